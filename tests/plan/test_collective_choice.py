"""Collective algorithms chosen per group, against the closed forms they compare."""

import pytest

from simulator import api
from simulator.plan.collective_choice import (
    NetworkFacts,
    algorithm_for,
    choose_algorithm,
    ring_seconds,
    tree_seconds,
)
from simulator.scenario import load_scenario_text

HOPPER = NetworkFacts(gpus_per_host=8, nvls=True, inter_Bps=50e9, inter_latency_s=5e-6)


def test_nvls_inside_a_node_from_four_ranks():
    # NVLS moves S(n+1)/n at 0.85, a ring 2(n-1)/n S: NVLS wins from n = 4
    assert choose_algorithm("all_reduce", (0, 1), 1e8, HOPPER) is None
    assert choose_algorithm("all_reduce", (0, 1, 2, 3), 1e8, HOPPER) == "nvls"
    assert choose_algorithm("all_reduce", tuple(range(8)), 1e8, HOPPER) == "nvls"
    assert choose_algorithm("all_gather", tuple(range(8)), 1e8, HOPPER) is None
    ampere = NetworkFacts(gpus_per_host=8)
    assert choose_algorithm("all_reduce", tuple(range(8)), 1e8, ampere) is None


def test_trees_where_ring_latency_dominates():
    group = tuple(range(0, 16384, 8))  # one GPU per node, 2,048 nodes
    small, large = 25e6, 8e9
    assert ring_seconds(2048, small, 50e9, 5e-6) > tree_seconds(2048, small, 50e9, 5e-6)
    assert choose_algorithm("all_reduce", group, small, HOPPER) == "tree"
    two_nodes = (0, 8)
    assert choose_algorithm("all_reduce", two_nodes, large, HOPPER) is None  # ring
    assert choose_algorithm("reduce_scatter", group, small, HOPPER) is None


def test_forced_algorithms_apply_where_they_can():
    g8 = tuple(range(8))
    assert algorithm_for("tp", "all_reduce", g8, 1e6, HOPPER, "ring") == "ring"
    assert algorithm_for("dp", "reduce_scatter", (0, 8), 1e6, HOPPER, "tree") is None
    with pytest.raises(ValueError, match="parallelism.collectives.dp: nvls"):
        algorithm_for("dp", "all_reduce", (0, 8), 1e6, HOPPER, "nvls")


DDP_16K = """
model: {layers: 1, hidden: 4096, heads: 32, ffn: 16384, vocab: 32000}
cluster:
  accelerator: H100-SXM
  gpus: 2048
  topology: {kind: fat_tree, node: {gpus: 8}, nodes: 256, nic_bandwidth: 400 Gb/s,
             levels: 2, nodes_per_leaf: 32}
parallelism: {dp: 2048}
training: {global_batch: 2048, micro_batch: 1, seq_len: 2048}
"""


def test_ddp_at_scale_uses_trees_and_the_scenario_can_force_rings():
    # Issue 14's F19: flat rings over thousands of ranks pay 2(n-1) hop latencies per bucket.
    s = load_scenario_text(DDP_16K)
    topo = api.build_topology(s.cluster)
    auto = api.build_step(api.build_plan(s, topo))
    algos = {t.comm.algorithm for t in auto.graph.tasks if t.name == "dp_all_reduce"}
    assert algos == {"tree"}
    forced = s.model_copy(
        update={"parallelism": s.parallelism.model_copy(update={"collectives": {"dp": "ring"}})}
    )
    step = api.build_step(api.build_plan(forced, topo))
    assert {t.comm.algorithm for t in step.graph.tasks if t.name == "dp_all_reduce"} == {"ring"}
    fast = api.step_metrics(api.simulate(auto, topo), auto).step_time_s
    slow = api.step_metrics(api.simulate(step, topo), step).step_time_s
    assert fast < slow
