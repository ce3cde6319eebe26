"""A collective's routed geometry (flow classes and their per-link copy counts) is the same
whether its connections are routed all at once (``spread_ids``) or one by one."""

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.collectives import plan_collective
from simulator.collectives.plan import CollectivePlan, Phase, Transfer
from simulator.engine import collective
from simulator.engine.collective import CollectiveRunner
from simulator.engine.links import LinkTable
from simulator.engine.network import FlowNetwork
from tests.fat_trees import fat_tree as fat_tree_topology

TOPOLOGY_FILES = [
    "dgx-h100.yaml",
    "nvl72.yaml",
    "dgx-a100-superpod.yaml",
    "dgx-h100-superpod.yaml",
    "llama3-24k-cluster.yaml",
    "tpu-v5p-pod.yaml",
]


class _OneByOne:
    """The router with ``path`` and ``spread`` only: every connection routed on its own."""

    def __init__(self, router):
        self.path = router.path
        if hasattr(router, "spread"):
            self.spread = router.spread
        if hasattr(router, "relay"):  # which routes PXN relays: part of the route's kind
            self.relay = router.relay


def _runner(topo, links, router):
    env = simpy.Environment()
    switch_of_host = {h: f"nvswitch{h}" for h in set(topo.host_of.values())}
    return CollectiveRunner(FlowNetwork(env, links), router, topo.host_of, switch_of_host)


def _assert_same_geometry(topo, links, plan, copies):
    fast = _runner(topo, links, topo.router).geometry(plan, copies)
    exact = _runner(topo, links, _OneByOne(topo.router)).geometry(plan, copies)
    assert len(fast) == len(exact)
    for a, b in zip(fast, exact, strict=True):
        assert len(a.classes) == len(b.classes)
        # each transfer's path latency and class (merged phases: arrays when classified
        # all at once), which give the tails again under another step latency
        assert np.asarray(a.latency).tolist() == np.asarray(b.latency).tolist()
        assert np.asarray(a.class_of).tolist() == np.asarray(b.class_of).tolist()
        for x, y in zip(a.classes, b.classes, strict=True):
            # bit for bit: the same links, copy counts summed in the same order
            assert x.links.tolist() == y.links.tolist()
            assert x.counts.tolist() == y.counts.tolist()
            assert (x.bytes_, x.tail_s) == (y.bytes_, y.tail_s)


def _plan(rng, n_devices, size, copies, transfers, floor=(0.0, 0.0)):
    """A random plan over ``size`` devices with ``copies`` copies and ``transfers``
    transfers in each of two phases (device-disjoint groups, as the grid's are), the second
    pipelined as a tree's (5 latency hops, 2 of them at the phase's least latency), with
    NCCL's per-step latency ``floor`` (s: inside a host, across hosts)."""
    devices = rng.permutation(n_devices)[: size * (copies + 1)].reshape(copies + 1, size)
    group = tuple(devices[0].tolist())
    phases = []
    for steps, hops, fast in ((1, None, 0), (3, 5, 2)):
        ends = rng.integers(0, size, (transfers, 2))
        bytes_ = rng.choice([1.0, 2.0, 0.5], transfers)
        phases.append(
            Phase(
                tuple(
                    Transfer(group[a], group[b], float(w))
                    for (a, b), w in zip(ends.tolist(), bytes_.tolist(), strict=True)
                ),
                steps,
                latency_hops=hops,
                fast_hops=fast,
            )
        )
    plan = CollectivePlan("all_to_all", "direct", group, 1e6, tuple(phases), step_latency_s=floor)
    return plan, [tuple(c) for c in devices[1:].tolist()]


@pytest.mark.parametrize("name", TOPOLOGY_FILES)
def test_geometry_equal_on_shipped_topologies(root, name):
    overrides = ["ecmp_flows=0"] if "superpod" in name or "24k" in name else []
    topo = api.topology_from_file(root / "topologies" / name, overrides=overrides)
    links = LinkTable(topo.graph)
    rng = np.random.default_rng(11)
    n = topo.num_devices
    for size, copies, transfers in [(8, min(7, n // 8 - 1), 8), (16, 3, 40), (32, 1, 300)]:
        if size * (copies + 1) <= n:  # 300 transfers: merged into classes of equal kind
            _assert_same_geometry(topo, links, *_plan(rng, n, size, copies, transfers))
            # NCCL's per-step floor (between the fabric's hop latencies: some raised)
            floored = _plan(rng, n, size, copies, transfers, floor=(1.5e-6, 4e-6))
            _assert_same_geometry(topo, links, *floored)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.sampled_from(["rails", "tor pods", "rail pods", "rails, hashed ecmp"]),
    size=st.integers(2, 8),
    copies=st.integers(0, 3),
    transfers=st.integers(1, 12),
    merge=st.booleans(),
    floor=st.sampled_from([(0.0, 0.0), (1.5e-6, 4e-6)]),
)
def test_geometry_equal_for_random_plans(seed, shape, size, copies, transfers, merge, floor):
    topo = fat_tree_topology(
        **{
            "rails": dict(nodes=9, gpus_per_node=4, nodes_per_leaf=3),  # 3 spines: shares of 1/3
            "tor pods": dict(
                nodes=12,
                gpus_per_node=2,
                nodes_per_leaf=2,
                levels=3,
                leaves_per_pod=2,
                oversubscription=(1.0, 3.0),
                rail_optimized=False,
            ),
            "rail pods": dict(
                nodes=10, gpus_per_node=4, nodes_per_leaf=2, levels=3, nodes_per_pod=4
            ),
            # 2 hashed sub-flows per connection: routed one by one, classed all at once
            "rails, hashed ecmp": dict(nodes=9, gpus_per_node=4, nodes_per_leaf=3, ecmp_flows=2),
        }[shape]
    )
    links = LinkTable(topo.graph)
    rng = np.random.default_rng(seed)
    copies = min(copies, topo.num_devices // size - 1)
    old = collective.MERGE_ABOVE
    collective.MERGE_ABOVE = 0 if merge else old  # merged classes at any size
    try:
        plan, others = _plan(rng, topo.num_devices, size, copies, transfers, floor)
        _assert_same_geometry(topo, links, plan, others)
    finally:
        collective.MERGE_ABOVE = old


def test_nvls_switch_endpoints_are_routed_one_by_one():
    # a transfer ending at a host's NVSwitch (NVLS) is not a device pair: the exact routing
    topo = fat_tree_topology(nodes=2, gpus_per_node=4, nodes_per_leaf=2, nvls=True)
    links = LinkTable(topo.graph)
    phase = Phase((Transfer(0, "nvswitch0", 1.0), Transfer(1, 3, 1.0)))
    plan = CollectivePlan("all_reduce", "nvls", (0, 1, 2, 3), 1e6, (phase,))
    _assert_same_geometry(topo, links, plan, [(4, 5, 6, 7)])


def test_a_merged_phase_with_nvls_switch_endpoints_is_classed_one_by_one(monkeypatch):
    # a phase classed by kind (merged) whose transfers include an NVSwitch endpoint: not
    # all devices, so neither classed nor routed at once; the same classes either way
    monkeypatch.setattr(collective, "MERGE_ABOVE", 0)
    topo = fat_tree_topology(nodes=2, gpus_per_node=4, nodes_per_leaf=2, nvls=True)
    links = LinkTable(topo.graph)
    transfers = [Transfer(0, "nvswitch0", 1.0), Transfer("nvswitch0", 1, 1.0)]
    transfers += [Transfer(a, b, 2.0) for a in range(4) for b in range(4) if a != b]
    phase = Phase(tuple(transfers), 2)
    plan = CollectivePlan("all_reduce", "nvls", (0, 1, 2, 3), 1e6, (phase,))
    _assert_same_geometry(topo, links, plan, [(4, 5, 6, 7)])


@pytest.mark.parametrize("outside", [1, 30])  # below the group's largest member, above it
def test_a_transfer_leaving_its_group_is_a_key_error_either_way(monkeypatch, outside):
    monkeypatch.setattr(collective, "MERGE_ABOVE", 0)
    topo = fat_tree_topology(nodes=9, gpus_per_node=4, nodes_per_leaf=3)
    links = LinkTable(topo.graph)
    group = tuple(range(0, 24, 2))
    transfers = [Transfer(a, b, 1.0) for a in group for b in group if a != b]
    phase = Phase((*transfers, Transfer(0, outside, 1.0)), 1)
    plan = CollectivePlan("all_to_all", "direct", group, 1e6, (phase,))
    copies = [tuple(d + 1 for d in group)]
    for router in (topo.router, _OneByOne(topo.router)):
        with pytest.raises(KeyError):
            _runner(topo, links, router).geometry(plan, copies)


class _NoGroups:
    """The router without ``spread_representatives``: every link of a route is water-filled."""

    def __init__(self, router):
        self.path, self.spread, self.spread_ids = router.path, router.spread, router.spread_ids
        self.relay = router.relay


def _finish_times(topo, links, router, plans):
    """Completion time (s) of each (start s, plan, copies), run together on one network."""
    env = simpy.Environment()
    runner = CollectiveRunner(FlowNetwork(env, links), router, topo.host_of)
    done = {}
    for i, (start, plan, copies) in enumerate(plans):
        env.timeout(start).callbacks.append(
            lambda _e, i=i, plan=plan, copies=copies: runner.run(
                plan, lambda i=i: done.setdefault(i, env.now), copies
            )
        )
    env.run()
    return [done[i] for i in range(len(plans))], runner


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), slow=st.booleans())
def test_links_crossed_together_rate_as_every_link(seed, slow):
    # A leaf's uplinks, its downlinks and a pod's core links are crossed all or none, with
    # equal shares: water-filling one of each gives the same finish times to the bit. With a
    # slowed spine-core link, that link no longer matches its group and is kept on its own.
    topo = fat_tree_topology(
        nodes=12, gpus_per_node=2, nodes_per_leaf=2, levels=3, leaves_per_pod=2,
        oversubscription=(1.0, 3.0), rail_optimized=False,
    )  # fmt: skip
    if slow:
        topo.graph.edges["spine0.1", "core0"]["bandwidth"] *= 0.5
    links = LinkTable(topo.graph)
    rng = np.random.default_rng(seed)
    plans = []
    for _ in range(4):
        plan, copies = _plan(rng, topo.num_devices, 4, 2, 6)
        plans.append((float(rng.uniform(0, 1e-4)), plan, copies))
    grouped, runner = _finish_times(topo, links, topo.router, plans)
    every, _ = _finish_times(topo, links, _NoGroups(topo.router), plans)
    assert grouped == every
    geometry = [runner.geometry(plan, copies) for _, plan, copies in plans]
    classes = [c for g in geometry for phase in g for c in phase.classes]
    assert any(c.rating[0].size < c.links.size for c in classes)  # links were grouped


def test_merged_all_to_all_classes_keep_pxn_relays_apart():
    # Review: a relayed route under one leaf (GPU -> NVSwitch -> GPU -> NIC -> leaf -> NIC ->
    # GPU) is as long as a direct one through a spine; merged by length alone, leaf-local and
    # spine-bound transfers of a large all-to-all shared one class and one rate, the leaf-local
    # ones held to the spines' and their NICs busy for longer. 32 ranks over two leaf groups at
    # 4:1 (992 transfers, merged above 256) beside an all-reduce on rail 0's NICs: every time
    # as with one class per transfer (the old merge let the all-reduce end at 9.4 ms, not 14.3)
    def times(merge_above):
        collective.MERGE_ABOVE = merge_above
        topo = fat_tree_topology(
            nodes=4, gpus_per_node=8, nodes_per_leaf=2, nic_bandwidth=50e9,
            oversubscription=(4.0,),
        )  # fmt: skip
        env = simpy.Environment()
        runner = CollectiveRunner(
            FlowNetwork(env, LinkTable(topo.graph)), topo.router, topo.host_of
        )
        ideal = dict(protocol_efficiency=False)
        a2a = plan_collective("all_to_all", list(range(32)), 2.0**30, "direct", **ideal)
        ar = plan_collective("all_reduce", [0, 8], 2.0**28, "ring", **ideal)
        done = {}
        runner.run(a2a, lambda: done.setdefault("a2a", env.now))
        runner.run(ar, lambda: done.setdefault("ar", env.now))
        env.run()
        return done

    old = collective.MERGE_ABOVE
    try:
        merged, exact = times(old), times(10**9)
    finally:
        collective.MERGE_ABOVE = old
    assert merged["ar"] == pytest.approx(exact["ar"], rel=1e-9)
    assert merged["a2a"] == pytest.approx(exact["a2a"], rel=1e-9)
