"""Fat-tree routes as link-id arrays (``FatTreeRouter.spread_ids``) against ``spread``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.engine.links import LinkTable
from simulator.topology.graph import ecmp_hash, ecmp_hash_array
from tests.fat_trees import fat_tree as fat_tree_topology

FILES = ["dgx-a100-superpod.yaml", "dgx-h100-superpod.yaml", "llama3-24k-cluster.yaml"]
_BUILT: dict = {}


def _shipped(root, name):
    """A shipped fat-tree with ECMP spreading (ecmp_flows 0, the spread_ids case), and its
    link table; built once per module (the 24K-GPU cluster takes a second)."""
    if name not in _BUILT:
        topo = api.topology_from_file(root / "topologies" / name, overrides=["ecmp_flows=0"])
        _BUILT[name] = (topo, LinkTable(topo.graph))
    return _BUILT[name]


SMALL = {  # every shape the builder makes: one leaf, one pod of rails, ToR pods with cores
    "one leaf": dict(nodes=2, gpus_per_node=4, nodes_per_leaf=4, rail_optimized=False),
    "rails": dict(nodes=6, gpus_per_node=4, nodes_per_leaf=2),
    "one level": dict(nodes=3, gpus_per_node=2, levels=1, nodes_per_leaf=4, rail_optimized=False),
    "tor pods": dict(
        nodes=12, gpus_per_node=2, nodes_per_leaf=2, levels=3, leaves_per_pod=2,
        oversubscription=(1.0, 3.0), rail_optimized=False,
    ),
    # pods of 2 rail groups (8 leaves); 10 hosts make 5 groups, so the last pod is half full
    "rail pods": dict(nodes=10, gpus_per_node=4, nodes_per_leaf=2, levels=3, nodes_per_pod=4),
    "rails without pxn": dict(nodes=6, gpus_per_node=4, nodes_per_leaf=2, pxn=False),
}  # fmt: skip


def _small(shape):
    """One of the SMALL fat-trees, its link table and its number of devices."""
    topo = fat_tree_topology(**SMALL[shape])
    return topo, LinkTable(topo.graph), topo.num_devices


def _expected(router, index, src, dst):
    """spread's routes, one connection at a time, as (ids, shares, lengths)."""
    ids, shares, lengths = [], [], []
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        route = router.spread(s, d, 0)
        ids += [index[e] for e, _ in route]
        shares += [w for _, w in route]
        lengths.append(len(route))
    return ids, shares, lengths


def _check(topo, links, src, dst):
    got = topo.router.spread_ids(np.array(src, np.int64), np.array(dst, np.int64), links.index)
    ids, shares, lengths = _expected(topo.router, links.index, np.array(src), np.array(dst))
    assert got is not None
    # exact: the same links in the same order, shares from the same divisions
    assert got[0].tolist() == ids
    assert got[1].tolist() == shares
    assert got[2].tolist() == lengths
    # the single hashed paths, with keys as a phase numbers its transfers (and large ones)
    keys = np.arange(len(src), dtype=np.int64) * 7919 % 2**32
    paths = topo.router.path_ids(
        np.array(src, np.int64), np.array(dst, np.int64), keys, links.index
    )
    expected = [topo.router.path(s, d, k) for s, d, k in zip(src, dst, keys.tolist(), strict=True)]
    assert paths[0].tolist() == [links.index[e] for p in expected for e in p]
    assert paths[1].tolist() == [len(p) for p in expected]


@pytest.mark.parametrize("name", FILES)
def test_spread_ids_equal_spread_on_shipped_fat_trees(root, name):
    topo, links = _shipped(root, name)
    n = topo.num_devices
    rng = np.random.default_rng(7)
    src = rng.integers(0, n, 3000)
    # neighbours on the same host, leaf and pod as well as far pairs, and a device to itself
    dst = np.concatenate([rng.integers(0, n, 1000), (src[1000:2000] + 1) % n, src[2000:]])
    _check(topo, links, src.tolist(), dst.tolist())


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.sampled_from(sorted(SMALL)))
def test_spread_ids_equal_spread_for_random_pairs(data, shape):
    topo, links, n = _small(shape)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
    _check(topo, links, [p[0] for p in pairs], [p[1] for p in pairs])


@pytest.mark.parametrize("name", FILES)
def test_spread_ids_equal_spread_on_shipped_fat_trees_per_batch(root, name):
    # a table learns devices as they come: a second batch over other devices is right too
    topo, links = _shipped(root, name)
    n = topo.num_devices
    _check(topo, links, [0, 1, n - 1], [n - 1, 2, 0])
    _check(topo, links, list(range(n // 2, n // 2 + 50)), list(range(n - 50, n)))


def test_spread_ids_decline_hashed_ecmp_and_non_devices():
    hashed = fat_tree_topology(nodes=4, gpus_per_node=2, nodes_per_leaf=2, ecmp_flows=4)
    links = LinkTable(hashed.graph)
    pair = np.array([0]), np.array([7])
    # sub-flows placed by a per-pair hash: no relabelling can be promised, route one by one
    assert hashed.router.spread_ids(*pair, links.index) is None
    spread = fat_tree_topology(nodes=4, gpus_per_node=2, nodes_per_leaf=2)
    links = LinkTable(spread.graph)
    assert spread.router.spread_ids(np.array([0]), np.array([8]), links.index) is None
    assert spread.router.spread_ids(np.array([-1]), np.array([3]), links.index) is None


@pytest.mark.parametrize("pxn, met", [(False, {2, 6, 8}), (True, {2, 6, 10})])
def test_path_ids_equal_path_with_hashed_ecmp(pxn, met):
    # the single hashed path does not depend on ecmp_flows: arrays with sub-flows too
    topo = fat_tree_topology(
        nodes=8, gpus_per_node=2, nodes_per_leaf=2, levels=3, nodes_per_pod=2, ecmp_flows=4,
        pxn=pxn,
    )  # fmt: skip
    links = LinkTable(topo.graph)
    src, dst = np.arange(16), (np.arange(16) * 5 + 3) % 16
    keys = np.arange(16) * 4 + 1
    ids, lengths = topo.router.path_ids(src, dst, keys, links.index)
    triples = zip(src.tolist(), dst.tolist(), keys.tolist(), strict=True)
    expected = [topo.router.path(s, d, k) for s, d, k in triples]
    assert ids.tolist() == [links.index[e] for p in expected for e in p]
    assert lengths.tolist() == [len(p) for p in expected]
    # hosts, pods and cores all met; with PXN a pair of GPUs on different rails (d * 5 + 3
    # flips the rail of every even d) crosses NVLink first: its 8 links through a core + 2
    assert {len(p) for p in expected} >= met


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 2**32 - 1)] * 3), min_size=1, max_size=50))
def test_ecmp_hash_array_is_ecmp_hash(triples):
    a, b, k = (np.array(x, dtype=np.int64) for x in zip(*triples, strict=True))
    assert ecmp_hash_array(a, b, k).tolist() == [ecmp_hash(*t) for t in triples]


def test_pxn_crosses_nvlink_to_the_destinations_rail_and_stays_on_it():
    # NCCL's PXN (2.12+): GPU 1 of host 0 to GPU 3 of host 1, hosts under one leaf group: over
    # NVLink to GPU 3 of host 0, then rail 3's NIC and leaf, no spine
    topo = fat_tree_topology(nodes=4, gpus_per_node=4, nodes_per_leaf=2)
    assert topo.router.path(1, 7) == [
        (1, "nvswitch0"), ("nvswitch0", 3), (3, "nic3"), ("nic3", "leaf0.3"),
        ("leaf0.3", "nic7"), ("nic7", 7),
    ]  # fmt: skip
    assert topo.router.spread(1, 7) == [(e, 1.0) for e in topo.router.path(1, 7)]
    # same rail, same host or an NVLS switch: no relay
    assert topo.router.relay(1, 5) is None and topo.router.relay(1, 3) is None
    assert topo.router.relay(1, "nvswitch1") is None
    # without PXN (NCCL_PXN_DISABLE=1) the connection leaves through its own NIC, rail 1, and
    # crosses to rail 3 through a spine
    off = fat_tree_topology(nodes=4, gpus_per_node=4, nodes_per_leaf=2, pxn=False)
    hops = [e[1] for e in off.router.path(1, 7)]
    assert hops[:2] == ["nic1", "leaf0.1"] and hops[2].startswith("spine") and hops[3] == "leaf0.3"
    # a fabric that is not rail-optimised has nothing to relay to
    tor = fat_tree_topology(nodes=4, gpus_per_node=4, nodes_per_leaf=2, rail_optimized=False)
    assert tor.router.relay(1, 7) is None


def test_pxn_keeps_an_all_to_all_off_oversubscribed_uplinks():
    # an all-to-all over 2 rail-optimised hosts of 8 GPUs under one leaf group: with PXN every
    # byte between hosts stays on its rail's leaf, so the leaves' 4:1 uplinks do not matter;
    # each NIC carries S/16 from each of its host's 8 GPUs either way (S/2), so at 1:1 the
    # two agree closely (PXN adds an NVLink hop of latency, 0.7 us, and NVLink copies)
    def time(pxn, over):
        topo = fat_tree_topology(
            nodes=2, gpus_per_node=8, nodes_per_leaf=2, nic_bandwidth=50e9, pxn=pxn,
            oversubscription=(over,),
        )  # fmt: skip
        return api.collective_table(topo, "all_to_all", 16, None, [2.0**30])["time_s"].iloc[0]

    assert time(True, 4.0) == pytest.approx(time(True, 1.0), rel=1e-12)
    assert time(False, 4.0) > 1.5 * time(False, 1.0)
    # at 1:1 PXN costs what it moves over NVLink at most: within 1% (the hop's latency and
    # an 8:1 NVLink-to-NIC bandwidth ratio)
    assert time(True, 1.0) == pytest.approx(time(False, 1.0), rel=0.01)


def _counts_from_routes(router, links, src, dst, klass, n_classes):
    """Each class's (links, summed shares) as the engine makes them from folded routes:
    ``copies_per_link`` of the class's route entries, in route order."""
    from simulator.engine.routed import copies_per_link

    ids, shares, lengths = router.spread_ids(src, dst, links, folded=True)
    entry = np.repeat(klass, lengths)
    return [
        copies_per_link(ids[entry == k], shares[entry == k], len(links)) for k in range(n_classes)
    ]


def _check_counts(topo, links, src, dst, klass, n_classes):
    src, dst = np.array(src, np.int64), np.array(dst, np.int64)
    klass = np.array(klass, np.int64)
    got = topo.router.spread_counts(src, dst, klass, n_classes, links)
    if src.size and topo.router.relays(src, dst, links).any():  # PXN: declined
        assert got is None
        return
    want = _counts_from_routes(topo.router, links, src, dst, klass, n_classes)
    assert got is not None and len(got) == n_classes
    for (a, b), (c, d) in zip(got, want, strict=True):
        # the same links, and the same bits: k additions of one share in a row either way
        assert a.tolist() == c.tolist()
        # (bincount gives an empty class integer counts: no entry, nothing to add)
        assert b.tobytes() == d.tobytes() and (b.dtype == d.dtype or not b.size)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.sampled_from(sorted(SMALL)))
def test_spread_counts_equal_the_folded_routes_counted(data, shape):
    topo, links, n = _small(shape)
    n_classes = data.draw(st.integers(1, 4))
    pairs = data.draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, n_classes - 1))
        )
    )
    src, dst, klass = ([p[i] for p in pairs] for i in range(3))
    _check_counts(topo, links, src, dst, klass, n_classes)


@pytest.mark.parametrize("name", FILES)
def test_spread_counts_equal_the_folded_routes_counted_at_scale(root, name):
    # many connections per link: the sums of 1/S and 1/(S C) over thousands of entries
    topo, links = _shipped(root, name)
    n = topo.num_devices
    rng = np.random.default_rng(11)
    rails = topo.router.rails or 1
    src = rng.integers(0, n, 20000)
    dst = rng.integers(0, n // rails, 20000) * rails + src % rails  # same rail: no PXN relay
    dst[:500] = src[:500]  # a device to itself: no link
    _check_counts(topo, links, src, dst, rng.integers(0, 3, src.size), 3)


def test_spread_counts_decline_pxn_and_hashed_ecmp():
    rails = fat_tree_topology(**SMALL["rails"])
    links = LinkTable(rails.graph)
    one = np.zeros(1, np.int64)
    assert (
        rails.router.spread_counts(np.array([0]), np.array([5]), one, 1, links) is None
    )  # rail 0 -> 1
    hashed = fat_tree_topology(nodes=4, gpus_per_node=2, nodes_per_leaf=2, ecmp_flows=4)
    table = LinkTable(hashed.graph)
    assert hashed.router.spread_counts(np.array([0]), np.array([7]), one, 1, table) is None


def test_spread_counts_decline_a_link_two_devices_share():
    # counted per device, a NIC two GPUs shared would be counted apart: declined instead
    topo = fat_tree_topology(**SMALL["tor pods"])
    links = LinkTable(topo.graph)
    src, dst = np.array([0, 2], np.int64), np.array([5, 7], np.int64)
    one = np.zeros(2, np.int64)
    assert topo.router.spread_counts(src, dst, one, 1, links) is not None
    table = topo.router._spread_table(links)
    table.device_links[2, 3] = table.device_links[0, 3]  # device 2 leaves by device 0's NIC
    table._devices_own = None
    assert topo.router.spread_counts(src, dst, one, 1, links) is None


def test_spread_counts_look_again_at_shared_links_when_devices_are_learned():
    # a table that learns devices as they come (links looked up by (u, v)): a device learned
    # later whose NIC uplink is another's is found out then, not only at the first call
    topo = fat_tree_topology(**SMALL["tor pods"])
    index = dict(LinkTable(topo.graph).index)
    index[("nic2", next(v for u, v in index if u == "nic2"))] = index[
        ("nic0", next(v for u, v in index if u == "nic0"))
    ]  # device 2 leaves by device 0's NIC uplink
    one = np.zeros(1, np.int64)
    assert topo.router.spread_counts(np.array([0]), np.array([5]), one, 1, index) is not None
    assert topo.router.spread_counts(np.array([2]), np.array([5]), one, 1, index) is None


def _latencies_from_paths(topo, links, src, dst):
    """The path latencies the runner took before path_latencies: each hashed path built
    (connection ``j`` keyed ``j``) and its row of latencies summed."""
    from simulator.engine.routed import segment_sums

    ids, lengths = topo.router.path_ids(src, dst, np.arange(src.size), links)
    return lengths, segment_sums(links.latency[ids], lengths)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.sampled_from(sorted(SMALL)))
def test_path_latencies_are_the_paths_latencies_summed(data, shape):
    # every kind of path (to itself, in a host, under a leaf, a pod, across pods), with and
    # without PXN relays: the same lengths and the same bits as summing each built path
    topo, links, n = _small(shape)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
    src = np.array([p[0] for p in pairs], np.int64)
    dst = np.array([p[1] for p in pairs], np.int64)
    got = topo.router.path_latencies(src, dst, links)
    assert got is not None
    lengths, sums = _latencies_from_paths(topo, links, src, dst)
    assert got[0].tolist() == lengths.tolist() and got[1] == sums


@pytest.mark.parametrize("name", FILES)
def test_path_latencies_are_the_paths_latencies_summed_at_scale(root, name):
    topo, links = _shipped(root, name)
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, topo.num_devices, (2, 20000))
    got = topo.router.path_latencies(src, dst, links)
    lengths, sums = _latencies_from_paths(topo, links, src, dst)
    assert got[0].tolist() == lengths.tolist() and got[1] == sums


def test_path_latencies_decline_a_link_of_another_latency():
    """A NIC link slower to cross than its peers (or a leaf uplink): the rows differ by
    path, so the paths are built and summed (None here)."""
    topo, links, n = _small("rail pods")
    src, dst = np.arange(n), np.arange(n)[::-1].copy()
    assert topo.router.path_latencies(src, dst, links) is not None
    for edge in [(3, "nic3"), ("leaf0.1", "spine0.1")]:
        slower = LinkTable(topo.graph)
        slower.latency = slower.latency.copy()
        slower.latency[slower.index[edge]] *= 2
        assert topo.router.path_latencies(src, dst, slower) is None


@pytest.mark.parametrize("gpus", [4, 6])
def test_relays_at_once_are_each_connections_relay(gpus):
    # rails of a power of two (the low bits compared) and not (a modulo): every pair's PXN
    # relay as relay() names it one connection at a time
    topo = fat_tree_topology(nodes=5, gpus_per_node=gpus, nodes_per_leaf=2)
    links = LinkTable(topo.graph)
    n = topo.num_devices
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n)))
    via, relayed = topo.router._spread_table(links).relays(src, dst)
    want = [topo.router.relay(s, d) for s, d in zip(src.tolist(), dst.tolist(), strict=True)]
    assert relayed.tolist() == [w is not None for w in want]
    assert via.tolist() == [s if w is None else w for s, w in zip(src.tolist(), want, strict=True)]
    same_rail = src % gpus == dst % gpus
    assert topo.router._spread_table(links).relays(src[same_rail], dst[same_rail])[1] is None
