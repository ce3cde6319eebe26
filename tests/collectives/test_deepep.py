"""The DeepEP-style all-to-all (simulator.collectives.deepep): its routing expectations against
direct enumeration, its transfers against the bytes they must carry, and the step's dispatcher."""

import itertools
import math

import pytest

from simulator import api
from simulator.collectives import deepep
from simulator.infeasible import InfeasibleError


def _enumerated(top_k, hosts, per_host):
    """E[nodes reached], E[GPUs reached on a reached node] by enumerating every assignment
    of ``top_k`` independent copies to the ``hosts x per_host`` GPUs (no node limit)."""
    gpus = hosts * per_host
    nodes = reached = 0.0
    count = 0
    for pick in itertools.product(range(gpus), repeat=top_k):
        on = {}
        for g in pick:
            on.setdefault(g // per_host, set()).add(g)
        nodes += len(on)
        reached += sum(len(v) for v in on.values()) / len(on)
        count += 1
    return nodes / count, reached / count


@pytest.mark.parametrize("top_k, hosts, per_host", [(2, 2, 2), (3, 2, 3), (4, 3, 2)])
def test_nodes_reached_is_the_enumerated_expectation(top_k, hosts, per_host):
    """d = H (1 - (1 - 1/H)^k) is exact for independent copies; u, the GPUs reached on a
    reached node, takes the mean copies k / d as if every reached node had that many: the
    enumeration's value within 10% for these tiny groups (exact when copies are not split)."""
    d, u = deepep.routing(top_k, 1 << 20, hosts, per_host)
    nodes, gpus = _enumerated(top_k, hosts, per_host)
    assert d == pytest.approx(nodes, rel=1e-12)
    assert u == pytest.approx(gpus, rel=0.10)


def test_transfers_carry_each_tokens_copies_once_per_node_and_gpu():
    """2 nodes x 4 GPUs, top-8 without a node limit: every rank sends S d/H to its rail peer
    on the other node, and each GPU receives its share of every rank's tokens (S d/H u/g each)
    once, directly or forwarded."""
    host_of = {r: r // 4 for r in range(8)}
    size = 1e6
    (phase,) = deepep.deepep_phases("all_to_all", tuple(range(8)), size, host_of, 8, 1 << 20)
    d, u = deepep.routing(8, 1 << 20, 2, 4)
    rdma = [t for t in phase.transfers if host_of[t.src] != host_of[t.dst]]
    nvl = [t for t in phase.transfers if host_of[t.src] == host_of[t.dst]]
    assert len(rdma) == 8 and all(t.bytes_ == pytest.approx(size * d / 2) for t in rdma)
    assert all(t.dst == t.src + 4 or t.dst == t.src - 4 for t in rdma)  # rail to rail
    per_gpu = size * d / 2 * u / 4
    received = sum(t.bytes_ for t in nvl if t.dst == 0)
    # GPU 0 gets the 3 local peers' own tokens and the 3 forwarded from the other node's
    # ranks 5-7 through its local peers; ranks 4's tokens come through GPU 0 itself
    assert received == pytest.approx(3 * 2 * per_gpu)
    assert math.isclose(u, 4 * (1 - (3 / 4) ** (8 / d)))


def test_uneven_nodes_are_refused():
    with pytest.raises(InfeasibleError, match="same number"):
        deepep.deepep_phases("all_to_all", (0, 1, 2), 1e6, {0: 0, 1: 0, 2: 1}, 8, 4)


def test_the_deepep_dispatcher_shortens_a_cross_node_expert_exchange():
    """DeepSeek-V3-like, EP 64 over 8 nodes: a token crosses the network once per node it
    reaches (3.6 of 4 eligible) instead of once per copy (8): the all-to-alls and the step
    shrink."""
    over = [
        "model.layers=8", "parallelism.pp=2", "parallelism.pipeline.schedule=1f1b",
        "parallelism.pipeline.first_stage_layers=null",
        "parallelism.pipeline.last_stage_layers=null", "training.global_batch=512",
        "cluster.gpus=128", "cluster.topology.nodes=16", "parallelism.recompute=full",
    ]  # fmt: skip
    path = "scenarios/examples/deepseek-v3-like.yaml"
    a2a = api.run(api.load(path, [*over, "parallelism.moe_dispatcher=alltoall"]))
    dep = api.run(api.load(path, [*over, "parallelism.moe_dispatcher=deepep"]))
    ep = lambda r: r.trace[r.trace["stream"] == "ep"].eval("end_s - start_s").sum()  # noqa: E731
    assert ep(dep) < 0.7 * ep(a2a)
    assert dep.metrics.step_time_s < a2a.metrics.step_time_s
