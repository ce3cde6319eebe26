"""Dominated links: of each pair of a GPU's links that every route crosses both or neither of
with one share (GPU -> NIC and NIC -> leaf; leaf -> NIC and NIC -> GPU), a water-filling keeps
the one of smaller capacity. Its twin never has the smaller share, so the rates are the same
to the bit: checked here on the pairing itself, on the choice of twin, and on whole runs."""

import numpy as np
import pytest

from simulator import api
from simulator.engine import collective
from simulator.engine.links import LinkTable
from simulator.engine.reduced_rating import ReducedRating
from simulator.engine.transfer_paths import TransferPaths
from simulator.topology.fat_tree import FatTreeRouter
from tests.fat_trees import fat_tree as fat_tree_topology
from tests.topology.test_fat_tree_routes import SMALL

# device_link_ids' columns: (GPU -> NIC, NIC -> leaf), (leaf -> NIC, NIC -> GPU)
PAIRS = ((2, 3), (4, 5))


@pytest.mark.parametrize("shape", list(SMALL))
def test_every_route_crosses_both_links_of_a_pair_or_neither_with_one_share(shape):
    # the structural claim the exactness rests on, over every ordered pair of GPUs (PXN
    # relays included where the shape has rails)
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL[shape])
    router, n = topo.router, topo.num_devices
    links = LinkTable(topo.graph)
    ids = router.device_link_ids(np.arange(n), links.index)
    twin = {}
    for a, b in PAIRS:
        for x, y in ids[:, [a, b]].tolist():
            twin[x], twin[y] = y, x
    crossed_pairs = 0
    for s in range(n):
        for d in range(n):
            shares = {links.index[e]: w for e, w in router.spread(s, d, 0)}
            for link, w in shares.items():
                if link in twin:
                    assert shares.get(twin[link]) == w
                    crossed_pairs += 1
    assert crossed_pairs > 0


def test_the_larger_link_of_each_pair_is_left_out():
    topo = fat_tree_topology(nic_bandwidth=50e9, pcie_bandwidth=64e9, **SMALL["rails"])
    router, n = topo.router, topo.num_devices
    table = LinkTable(topo.graph)
    ids = router.device_link_ids(np.arange(n), table)
    dominated = router.spread_dominated(table)
    # PCIe (64 GB/s) above the NIC (50 GB/s): the GPU's PCIe links go, the NIC's stay
    assert dominated[ids[:, 2]].all() and not dominated[ids[:, 3]].any()
    assert dominated[ids[:, 5]].all() and not dominated[ids[:, 4]].any()
    assert dominated.sum() == 2 * n  # nothing else: NVLink, switch links
    # GPU 0's PCIe link slowed below its NIC's: that pair keeps the PCIe link instead
    slowed = LinkTable(topo.graph)
    slowed.capacity[ids[0, 2]] = 1e9
    assert not router.spread_dominated(slowed).any()  # links looked up: none known yet
    router.device_link_ids(np.arange(n), slowed)  # as routing learns them
    dominated = router.spread_dominated(slowed)
    assert not dominated[ids[0, 2]] and dominated[ids[0, 3]]
    assert dominated[ids[1:, 2]].all() and not dominated[ids[1:, 3]].any()
    # no capacities (an edge -> id dict), or hashed ECMP: none named
    assert router.spread_dominated(table.index) is None
    hashed = fat_tree_topology(ecmp_flows=4, **SMALL["rails"])
    assert hashed.router.spread_dominated(LinkTable(hashed.graph)) is None


DP = [  # the benchmarks' 7.5B model, TP 8, PP 2, at DP 64: data-parallel trees across pods
    "model.name=megatron-7.5b",
    "model.layers=8",
    "parallelism.tp=8",
    "parallelism.pp=2",
    "parallelism.pipeline.schedule=1f1b",
    "parallelism.pipeline.virtual_stages=1",
    "parallelism.recompute=none",
    "cluster.gpus=1024",
    "cluster.topology.nodes=128",
    "training.global_batch=512",
]
CASES = {
    "data-parallel trees": ("scenarios/examples/gpt3-175b-dgx-a100.yaml", DP, []),
    # a GPU's PCIe link slowed below its NIC's: that pair keeps the PCIe link instead
    "slowed PCIe": (
        "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        DP,
        [api.SlowLink(8, "nic8", 0.1)],
    ),
    # a NIC downlink slowed (already the smaller of its pair)
    "slowed NIC": (
        "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        DP,
        [api.SlowLink("leaf0.0", "nic8", 0.1)],
    ),
    "moe": ("scenarios/examples/mixtral-8x22b.yaml", [], []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runs_leaving_dominated_links_out_equal_runs_keeping_them(case, monkeypatch):
    path, overrides, slowed = CASES[case]
    s = api.load(path, overrides)
    step = api.build_step(api.build_plan(s, api.build_topology(s.cluster)))
    entries, reduced = [], []
    real_rating, real_class = ReducedRating.of, collective.FlowClass

    def counting(self, links, counts, same, firsts=False):
        out = real_rating(self, links, counts, same, firsts)
        entries.append((links if out is None else out[0]).size)
        return out

    def made(*args, **kw):
        c = real_class(*args, **kw)
        reduced.append(c.symmetric is not None)
        return c

    monkeypatch.setattr(ReducedRating, "of", counting)
    monkeypatch.setattr(collective, "FlowClass", made)
    # each on a topology of its own: no routed geometry shared between the two
    kept = api.simulate(step, api.build_topology(s.cluster), slowed)
    kept_entries, entries[:] = sum(entries), []
    kept_reduced, reduced[:] = sum(reduced), []
    monkeypatch.setattr(FatTreeRouter, "spread_dominated", lambda self, links: None)
    every = api.simulate(step, api.build_topology(s.cluster), slowed)
    assert kept.frame.equals(every.frame)  # task for task, to the bit
    # not vacuous: the water-fillings' classes were shorter with the twins left out
    assert kept_entries < sum(entries)
    # and as many classes with a rating of one link per orbit: a twin kept on one GPU only
    # (a slowed PCIe link) leaves the orbit of the rest whole
    assert kept_reduced == sum(reduced) > 0


def test_hops_found_by_the_routers_hosts_are_the_ones_looked_up(monkeypatch):
    # a merged phase's transfers across hosts (NCCL's per-step floor) from the fat-tree's
    # host array (TransferPaths.crosses) against one host_of lookup per transfer
    path, overrides, _ = CASES["data-parallel trees"]
    # TP 4, no pipeline, DP 512 on 256 hosts: two members of a data-parallel group per host,
    # so the trees between hosts carry a chain inside each host (NCCL's shape); a phase of
    # 2,044 transfers, past MERGE_ABOVE, is classed all at once, some hops inside hosts
    wider = [
        "parallelism.tp=4", "parallelism.pp=1", "cluster.gpus=2048",
        "cluster.topology.nodes=256", "training.global_batch=1024",
    ]  # fmt: skip
    s = api.load(path, overrides + wider)
    step = api.build_step(api.build_plan(s, api.build_topology(s.cluster)))
    found = []
    real = TransferPaths.crosses

    def recording(self, transfers, ends):
        out = real(self, transfers, ends)
        if isinstance(out, np.ndarray):  # found by the host array
            found.append((bool(out.any()), bool(out.all())))
        return out

    monkeypatch.setattr(TransferPaths, "crosses", recording)
    by_array = api.simulate(step, api.build_topology(s.cluster))
    # not vacuous: hops found as arrays, across hosts and inside them in one phase
    assert any(some and not every for some, every in found)
    # the same transfers without their device arrays: one host_of lookup each
    monkeypatch.setattr(TransferPaths, "crosses", lambda self, t, ends: real(self, t, None))
    by_lookup = api.simulate(step, api.build_topology(s.cluster))
    assert by_array.frame.equals(by_lookup.frame)  # task for task, to the bit
