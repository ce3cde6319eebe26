"""Uncongested collectives against their closed forms, on a non-blocking NVSwitch domain.

Each GPU has one link up to the switch and one down, of bandwidth B (line rate x efficiency)
and latency l/2 each, so a GPU-to-GPU step pays latency l. Formulas from the algorithms'
module doc; the engine must reproduce them to float precision (rel 1e-9).
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives import Locality, plan_collective
from simulator.engine import NetworkModel, time_collective
from simulator.topology.nvswitch import nvswitch_topology

REL = 1e-9  # only float rounding separates the engine from the formula


def _time(n, size, bw, lat, kind, algo, nvls=False):
    topo = nvswitch_topology(n, bw, latency=lat, nvls=nvls)
    model = NetworkModel(topo.graph, topo.router, topo.host_of, topo.nvls_switch)
    plan = plan_collective(
        kind, list(range(n)), size, algo, model.locality, protocol_efficiency=False
    )
    return time_collective(model, plan)[0]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 64),
    size=st.floats(1.0, 1e10),
    bw=st.floats(1e9, 1e12),
    lat=st.floats(0.0, 1e-5),
)
def test_ring_all_reduce_exact(n, size, bw, lat):
    expected = 2 * (n - 1) / n * size / bw + 2 * (n - 1) * lat
    assert _time(n, size, bw, lat, "all_reduce", "ring") == pytest.approx(expected, rel=REL)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 32),
    size=st.floats(1.0, 1e10),
    bw=st.floats(1e9, 1e12),
    lat=st.floats(0.0, 1e-5),
    kind=st.sampled_from(["reduce_scatter", "all_gather"]),
)
def test_ring_reduce_scatter_all_gather_exact(n, size, bw, lat, kind):
    expected = (n - 1) / n * size / bw + (n - 1) * lat
    assert _time(n, size, bw, lat, kind, "ring") == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 64])
def test_halving_doubling_exact(n):
    size, bw, lat = 3e8, 4e11, 2e-6
    expected = 2 * (n - 1) / n * size / bw + 2 * math.log2(n) * lat
    assert _time(n, size, bw, lat, "all_reduce", "halving_doubling") == pytest.approx(
        expected, rel=REL
    )


@pytest.mark.parametrize("n", [2, 3, 8, 13])
@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "all_to_all"])
def test_direct_exact(n, kind):
    size, bw, lat = 3e8, 4e11, 2e-6
    expected = (n - 1) / n * size / bw + lat
    assert _time(n, size, bw, lat, kind, "direct") == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [3, 4, 8, 9, 16, 33])
def test_double_binary_tree_exact(n):
    from simulator.collectives.algorithms import _depth, double_binary_trees

    size, bw, lat = 3e8, 4e11, 2e-6
    depth = max(_depth(t) for t in double_binary_trees(n))
    expected = 2 * size / bw + 2 * depth * lat  # each rank sends and receives S per phase
    assert _time(n, size, bw, lat, "all_reduce", "tree") == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("n", [4, 8, 72])
def test_nvls_exact(n):
    size, bw, lat = 3e8, 4e11, 2e-6
    # S (n+1)/n each way through the switch; two switch hops of l/2 each.
    expected = (n + 1) / n * size / bw + lat
    assert _time(n, size, bw, lat, "all_reduce", "nvls", nvls=True) == pytest.approx(
        expected, rel=REL
    )


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_pipelined_chain(kind):
    n, size, bw, lat = 8, 3e8, 4e11, 2e-6
    expected = size / bw + (n - 1) * lat
    assert _time(n, size, bw, lat, kind, "ring") == pytest.approx(expected, rel=REL)


def _nic_bound_hosts(hosts: int, nic: float):
    """(topology, network model) of ``hosts`` DGX-like hosts of 8 GPUs on a fat-tree where
    only the NICs (``nic`` B/s) bound: NVLink and PCIe far faster, no latencies."""
    from tests.fat_trees import fat_tree as fat_tree_topology

    topo = fat_tree_topology(
        nodes=hosts, nvlink_bandwidth=1e15, nvlink_latency=0.0, pcie_bandwidth=1e12,
        pcie_latency=0.0, nic_bandwidth=nic, nic_latency=0.0, switch_latency=0.0,
        nodes_per_leaf=4,
    )  # fmt: skip
    return topo, NetworkModel(topo.graph, topo.router, topo.host_of)


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_chains_across_hosts_run_on_every_rail(kind):
    # QA: broadcast and reduce across nodes ran one chain, through one NIC, 7.6x slower than
    # an all-gather of the same buffer. NCCL runs them on its ring channels: g chains of S/g,
    # each leaving and entering every host on a different GPU's NIC, so each NIC carries one
    # share and the time is (S/g) / NIC bandwidth (no latencies here; NVLink and PCIe faster).
    hosts, g, size, nic = 4, 8, 1e9, 5e10
    topo, model = _nic_bound_hosts(hosts, nic)
    plan = plan_collective(
        kind, topo.devices, size, "ring", model.locality, protocol_efficiency=False
    )
    roots = {t.src if kind == "broadcast" else t.dst for t in plan.phases[0].transfers}
    ends = {t.dst if kind == "broadcast" else t.src for t in plan.phases[0].transfers}
    assert topo.devices[0] in roots and topo.devices[0] not in ends  # data from / to the root
    assert time_collective(model, plan)[0] == pytest.approx(size / g / nic, rel=REL)


def test_tree_across_hosts_runs_a_chain_per_gpu_under_each_host_node():
    # QA: over 4 hosts of 8 GPUs the tree was one binary tree over all 32 ranks, its host
    # crossings on two NICs: 44 GB/s busbw against the ring's 392. NCCL's trees join hosts,
    # with a chain inside each and a channel per local GPU. Two hosts: in each channel one
    # tree goes host 0 -> 1 and its mirror 1 -> 0, so every NIC carries one share of S / 2g
    # each way per phase: reduce then broadcast take S / (g x NIC) (no latencies here).
    hosts, g, size, nic = 2, 8, 1e9, 5e10
    topo, model = _nic_bound_hosts(hosts, nic)
    plan = plan_collective(
        "all_reduce", topo.devices, size, "tree", model.locality, protocol_efficiency=False
    )
    assert time_collective(model, plan)[0] == pytest.approx(size / (g * nic), rel=REL)
    crossing = [t for t in plan.phases[0].transfers if t.src // g != t.dst // g]
    assert sorted(t.src % g for t in crossing) == sorted(2 * list(range(g)))  # every NIC


@pytest.mark.parametrize("g", [1, 2, 8])
def test_a_ring_across_hosts_pays_the_network_latency_on_the_hops_that_cross_it(g):
    # QA: every one of a ring's 2(n-1) steps paid the slowest hop's (the network's) latency;
    # a chunk travels the ring hop after hop, so the 2(n-1) steps pay the mean hop latency:
    # of a ring's n hops, 2 cross the network between 2 hosts (NCCL's tuning.cc charges its
    # inter-node latency on those steps alone). The bytes take the same time whatever the
    # NIC's latency, so two latencies differ by 2(n-1)/n x 2 x the latency added per crossing.
    from tests.fat_trees import fat_tree as fat_tree_topology

    def ring_time(nic_latency: float) -> float:
        topo = fat_tree_topology(nodes=2, gpus_per_node=g, nic_latency=nic_latency)
        model = NetworkModel(topo.graph, topo.router, topo.host_of)
        plan = plan_collective(
            "all_reduce", topo.devices, 1e6, "ring", model.locality, protocol_efficiency=False
        )
        return time_collective(model, plan)[0]

    n, added = 2 * g, 10e-6  # nic_latency is split over a crossing's NIC-leaf link pair
    expected = 2 * (n - 1) / n * 2 * added
    assert ring_time(2e-6 + added) - ring_time(2e-6) == pytest.approx(expected, rel=1e-9)


def test_a_tree_across_hosts_pays_the_network_latency_on_its_levels_between_hosts():
    # A chunk climbs the chain inside its host (g - 1 NVLink hops), then the tree's levels
    # between hosts (one, for 2 hosts); up and down: raising the NIC latency by L adds 2 x L
    # (it had added 2 x 8 x L: every hop was charged the slowest), NVLink's by l (a
    # GPU-to-GPU hop's, split over its two links) adds 2 x (g - 1) x l
    from tests.fat_trees import fat_tree as fat_tree_topology

    g = 8

    def tree_time(nic_latency: float, nvlink_latency: float) -> float:
        topo = fat_tree_topology(
            nodes=2, gpus_per_node=g, nic_latency=nic_latency, nvlink_latency=nvlink_latency
        )
        model = NetworkModel(topo.graph, topo.router, topo.host_of)
        plan = plan_collective(
            "all_reduce", topo.devices, 1e6, "tree", model.locality, protocol_efficiency=False
        )
        return time_collective(model, plan)[0]

    base = tree_time(2e-6, 0.7e-6)
    assert tree_time(12e-6, 0.7e-6) - base == pytest.approx(2 * 10e-6, rel=1e-9)
    assert tree_time(2e-6, 1.2e-6) - base == pytest.approx(2 * (g - 1) * 0.5e-6, rel=1e-9)


@pytest.mark.parametrize("hosts", [2, 4, 3])
def test_rings_cross_hosts_on_one_rail(hosts):
    # QA: each ring left a host on one GPU's NIC and entered the next on another's, so on a
    # rail-optimised fabric every crossing went through the spine (a 1 GiB all-reduce over
    # 2 DGX H100 at 2:1 oversubscription took twice as long as at 1:1). NCCL keeps a ring's
    # network hop on one NIC index at both ends; with an odd host count the closing hop of
    # each ring must cross (one of its 3).
    from simulator.collectives.algorithms import ring_channels

    g = 8
    loc = Locality({d: d // g for d in range(hosts * g)})
    rings = ring_channels(list(range(hosts * g)), loc)
    assert len(rings) == g and all(sorted(r) == list(range(hosts * g)) for r in rings)
    crossings = [
        (a % g, b % g)
        for r in rings
        for a, b in zip(r, r[1:] + r[:1], strict=True)
        if a // g != b // g
    ]
    assert len(crossings) == g * hosts
    off_rail = sum(a != b for a, b in crossings)
    assert off_rail == (0 if hosts % 2 == 0 else g)
    # each NIC sends and receives one ring's crossing per host pair: the rails stay balanced
    assert sorted(a for a, _ in crossings) == sorted(list(range(g)) * hosts)


def test_hosts_of_unequal_members_run_a_ring_per_member_of_the_smallest():
    # QA: 8 + 4 GPUs on two hosts ran one ring through one NIC (49.6 GB/s busbw where 16
    # ranks reach 394): now 4 channels, each leaving each host from another member
    from simulator.collectives.algorithms import ring_channels

    loc = Locality({d: d // 8 for d in range(16)})
    rings = ring_channels(list(range(12)), loc)
    assert len(rings) == 4 and all(sorted(r) == list(range(12)) for r in rings)
    exits = [{a for a, b in zip(r, r[1:] + r[:1], strict=True) if a // 8 != b // 8} for r in rings]
    assert all(len(e) == 2 for e in exits)  # one exit per host per ring
    assert len(set().union(*exits)) == 8  # 4 rings x 2 hosts: every exit on its own NIC


def test_torus_dimension_rings_exact():
    from simulator.topology.torus import torus_topology

    shape, size, bw, lat = (4, 4, 8), 1e9, 1e11, 1e-6
    topo = torus_topology(shape, bw, latency=lat)
    model = NetworkModel(topo.graph, topo.router, topo.host_of, torus_shape=shape)
    plan = plan_collective("all_reduce", topo.devices, size, "torus", model.locality)
    expected, chunk = 0.0, size
    for d in shape:  # bidirectional ring: half the chunk each way, (d-1) steps, RS then AG
        expected += 2 * ((d - 1) * chunk / d / 2 / bw + (d - 1) * lat)
        chunk /= d
    assert time_collective(model, plan)[0] == pytest.approx(expected, rel=REL)


def test_hierarchical_exact():
    from tests.fat_trees import fat_tree as fat_tree_topology

    hosts, g, size = 4, 8, 1e9
    topo = fat_tree_topology(
        nodes=hosts,
        nvlink_bandwidth=4e11,
        nvlink_latency=1e-6,
        nic_bandwidth=5e10,
        nic_latency=2e-6,
        pcie_bandwidth=6.4e10,
        pcie_latency=5e-7,
        nodes_per_leaf=4,
    )
    model = NetworkModel(topo.graph, topo.router, topo.host_of)
    plan = plan_collective("all_reduce", topo.devices, size, "hierarchical", model.locality)
    intra = (g - 1) / g * size / 4e11 + (g - 1) * 1e-6
    # Inter-host rings of each rank's S/g slice run over PCIe (6.4e10) and the NIC (5e10):
    # the NIC is the bottleneck; a hop pays 2 x PCIe + 2 x half NIC latency.
    hop_latency = 2 * 5e-7 + 2e-6
    inter = 2 * (hosts - 1) / hosts * (size / g) / 5e10 + 2 * (hosts - 1) * hop_latency
    assert time_collective(model, plan)[0] == pytest.approx(2 * intra + inter, rel=REL)


def test_bytes_per_rank_match_bus_factors():
    # Each rank sends busbw-factor x S in total: 2(n-1)/n S for all-reduce, (n-1)/n S else.
    n, size = 8, 1e9
    for kind, factor in [
        ("all_reduce", 2 * (n - 1) / n),
        ("all_gather", (n - 1) / n),
        ("reduce_scatter", (n - 1) / n),
        ("all_to_all", (n - 1) / n),
    ]:
        plan = plan_collective(kind, list(range(n)), size, None, Locality())
        assert plan.bytes_sent == pytest.approx(n * factor * size, rel=1e-12)


def test_tree_depth_is_the_longest_walk_to_a_root():
    # the memoised depth against its definition: walk each rank up to its root
    from simulator.collectives.algorithms import _depth, double_binary_trees

    for n in range(1, 600):
        for parents in double_binary_trees(n):
            walks = []
            for r in parents:
                d, x = 0, r
                while x in parents:
                    x, d = parents[x], d + 1
                walks.append(d)
            assert _depth(parents) == max(walks, default=0)
    assert [_depth(t) for t in double_binary_trees(1024)] == [10, 10]  # log2(1,024)


def test_tree_phases_are_the_trees_edges_as_transfers():
    # the transfers made in C (transfers_of) against the definition: each edge of both
    # trees once up (child -> parent) and once down, with half the buffer, as Transfer tuples
    from simulator.collectives.algorithms import double_binary_trees, tree
    from simulator.collectives.plan import Transfer, TransferArrays

    for hosts_of, n in ((lambda d: d, 37), (lambda d: d // 4, 48)):
        group = [3 * d for d in range(n)]
        loc = Locality(host_of={3 * d: hosts_of(d) for d in range(n)})
        up, down = tree("all_reduce", group, 6.0, loc)
        assert all(type(t) is Transfer for t in up.transfers + down.transfers)
        assert all(type(t.src) is int and type(t.dst) is int for t in up.transfers)
        for phase in (up, down):  # the arrays the engine reads (one GPU per host)
            if n == 37:
                assert isinstance(phase.transfers, TransferArrays)
                src, dst, size = phase.transfers.arrays()
                assert list(zip(src.tolist(), dst.tolist(), size.tolist(), strict=True)) == [
                    tuple(t) for t in phase.transfers
                ]
        assert [(t.dst, t.src, t.bytes_) for t in down.transfers] == [
            tuple(t) for t in up.transfers
        ]
        if n == 37:  # one GPU per host: the two trees over the group
            edges = [(group[c], group[p]) for t in double_binary_trees(n) for c, p in t.items()]
            assert up.transfers == tuple(Transfer(c, p, 3.0) for c, p in edges)
        else:  # 12 hosts of 4: 4 channels x 2 trees x (11 edges + 12 chains of 3 hops)
            assert len(up.transfers) == 4 * 2 * (11 + 12 * 3)
            assert {t.bytes_ for t in up.transfers} == {6.0 / 8}


def test_transfer_arrays_are_the_tuple_of_their_transfers():
    """TransferArrays stands for the tuple of its transfers wherever a plan is compared,
    hashed, sliced, joined or pickled, and a phase holding one equals the phase holding the
    tuple; its arrays are read-only (a tree's up and down phases share them)."""
    import pickle

    import numpy as np

    from simulator.collectives.plan import Phase, Transfer, TransferArrays

    src, dst = np.array([4, 7, 9]), np.array([7, 9, 4])
    arrays = TransferArrays(src, dst, 2.5)
    plain = tuple(Transfer(s, d, 2.5) for s, d in [(4, 7), (7, 9), (9, 4)])
    assert arrays == plain and plain == arrays and not (arrays != plain)
    assert arrays != plain[:2] and plain[:2] != arrays
    assert hash(arrays) == hash(plain) and len(arrays) == 3
    assert arrays[1] == Transfer(7, 9, 2.5) and arrays[1:] == plain[1:]
    assert type(arrays[0].src) is int and type(arrays[0].dst) is int
    assert arrays + plain[:1] == plain + plain[:1] and plain[:1] + arrays == plain[:1] + plain
    assert Transfer(9, 4, 2.5) in arrays and list(arrays) == list(plain)
    assert Phase(arrays, 2, 3) == Phase(plain, 2, 3)
    assert hash(Phase(arrays, 2, 3)) == hash(Phase(plain, 2, 3))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(arrays, protocol)) == plain
    assert not src.flags.writeable and not arrays.arrays()[1].flags.writeable
    assert arrays.arrays()[2].tolist() == [2.5] * 3
    assert "4->7" in repr(arrays)
    with pytest.raises(ValueError, match="3 sources for 2"):
        TransferArrays(np.array([1, 2, 3]), np.array([1, 2]), 1.0)
