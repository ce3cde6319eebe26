"""Links numbered by their builder (``LinkLayout``, ``FatTreeLinks``) against the graph.

The engine's link table is made from the builder's layout when the topology has one, and a
fat-tree's router then computes link ids from the structure it recorded instead of looking
each (u, v) up. Both must name the same links, with the same attributes, as the table read
from the graph does: compared here link by link, by name (the two number them differently).
"""

import dataclasses

import networkx as nx
import numpy as np
import pytest

from simulator import api
from simulator.engine.executor import hop_bandwidth
from simulator.engine.links import LinkTable
from simulator.topology.graph import LinkRecorder
from simulator.topology.nvswitch import nvswitch_topology
from simulator.topology.torus import torus_topology
from tests.fat_trees import fat_tree as fat_tree_topology
from tests.topology.test_fat_tree_routes import SMALL

BUILT = {
    **{
        f"fat-tree, {k}": (lambda kw=kw: fat_tree_topology(nic_bandwidth=50e9, **kw))
        for k, kw in SMALL.items()
    },
    "nvswitch": lambda: nvswitch_topology(8, 450e9, nvls=True),
    "torus": lambda: torus_topology((4, 2, 3), 100e9),
    "mesh": lambda: torus_topology((3, 2), 100e9, wraparound=False),
}


def _attributes(table: LinkTable) -> dict:
    return {
        e: (table.bandwidth[i], table.efficiency[i], table.latency[i], table.capacity[i])
        for i, e in enumerate(table.edges)
    }


@pytest.mark.parametrize("name", list(BUILT))
def test_the_layout_lists_the_graphs_links_with_their_attributes(name):
    topo = BUILT[name]()
    assert topo.own_layout is not None
    from_layout = LinkTable.from_layout(topo.layout)
    from_graph = LinkTable(topo.graph)
    assert len(from_layout) == len(from_graph) == topo.graph.number_of_edges()
    assert _attributes(from_layout) == _attributes(from_graph)
    # the index, made on demand, numbers the layout's own order
    assert [from_layout.index[e] for e in from_layout.edges] == list(range(len(from_layout)))


def _named(table: LinkTable, ids: np.ndarray) -> list:
    return [table.edges[i] if i >= 0 else None for i in np.asarray(ids).ravel().tolist()]


@pytest.mark.parametrize("shape", list(SMALL))
def test_a_fat_trees_recorded_ids_name_the_links_its_index_names(shape):
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL[shape])
    router, n = topo.router, topo.num_devices
    fixed, looked_up = LinkTable.from_layout(topo.layout), LinkTable(topo.graph)
    devices = np.arange(n)
    assert _named(fixed, router.device_link_ids(devices, fixed)) == _named(
        looked_up, router.device_link_ids(devices, looked_up.index)
    )
    # under the builder's numbering the recorded ids are used: nothing looked up
    assert router._spread_table(fixed).index is None and "index" not in vars(fixed)
    # each GPU's host and leaf as the builder recorded them: as host_of and leaf_of say
    table = router._spread_table(fixed)
    assert table.host.tolist() == [router.host_of[d] for d in range(n)]
    assert [table.leaf_names[x] for x in table.leaf.tolist()] == [
        router.leaf_of[d] for d in range(n)
    ]
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    a = router.spread_ids(src, dst, fixed)
    b = router.spread_ids(src, dst, looked_up.index)
    assert _named(fixed, a[0]) == _named(looked_up, b[0])
    assert a[1].tolist() == b[1].tolist() and a[2].tolist() == b[2].tolist()
    keys = rng.integers(0, 2**32, 200)
    a, b = router.path_ids(src, dst, keys, fixed), router.path_ids(src, dst, keys, looked_up)
    assert _named(fixed, a[0]) == _named(looked_up, b[0]) and a[1].tolist() == b[1].tolist()
    # the groups of links routes cross together: the same groups, each led by the same link
    rep_a = router.spread_representatives(fixed)
    rep_b = router.spread_representatives(looked_up.index)
    groups = {
        e: fixed.edges[rep_a[i]] for i, e in enumerate(fixed.edges) if rep_a[i] != i
    }  # fmt: skip
    assert groups == {
        e: looked_up.edges[rep_b[i]] for i, e in enumerate(looked_up.edges) if rep_b[i] != i
    }


def test_a_copy_with_its_own_graph_is_read_from_its_graph():
    # a degraded copy (api._degraded) changes a link of a copied graph: the builder's layout
    # describes the original alone, so the copy's links come from its graph, slowed link
    # included
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL["rails"])
    graph = topo.graph.copy()
    graph.edges[0, "nic0"]["bandwidth"] /= 4
    copy = dataclasses.replace(topo, graph=graph)
    assert copy.own_layout is None and topo.own_layout is topo.layout
    model = api.network_model(copy)
    assert model.links.layout is None
    assert model.links.bandwidth[model.links.index[(0, "nic0")]] == 64e9 / 4
    assert api.network_model(topo).links.layout is topo.layout


def test_a_link_added_twice_leaves_no_layout():
    links = LinkRecorder(nx.DiGraph())
    assert links.add("a", "b", 1.0, 0.0, "x") == (0, 1)
    assert links.add("b", "c", 1.0, 0.0, "x", both=False) == (2, -1)
    assert links.layout().edges == [("a", "b"), ("b", "a"), ("b", "c")]
    links.add("a", "b", 2.0, 0.0, "x")  # the graph keeps one a -> b, with the new bandwidth
    assert links.layout() is None


class _OneByOne:
    """A router without ``path_ids``: hop_bandwidth walks the ring path by path."""

    def __init__(self, router):
        self.path = router.path


@pytest.mark.parametrize("shape", ["rails", "tor pods", "rail pods"])
def test_the_rings_slowest_hop_is_the_same_routed_at_once(shape):
    topo = fat_tree_topology(nic_bandwidth=50e9, pcie_bandwidth=40e9, **SMALL[shape])
    links = LinkTable.from_layout(topo.layout)
    rng = np.random.default_rng(3)
    rings = [tuple(range(4)), tuple(range(0, topo.num_devices, 4)), (5, 5), (2,)]
    rings += [tuple(rng.permutation(topo.num_devices)[:9].tolist()) for _ in range(5)]
    for ring in rings:
        at_once = hop_bandwidth(links, topo.router, ring)
        assert at_once == hop_bandwidth(links, _OneByOne(topo.router), ring)
    # the definition, read off the graph: the slowest link on either way round the pair
    pair = (0, topo.num_devices - 1)
    slowest = min(
        topo.graph.edges[e]["bandwidth"] for a, b in (pair, pair[::-1]) for e in topo.path(a, b)
    )
    assert hop_bandwidth(links, topo.router, pair) == slowest
    # without oversubscription, the 40 GB/s PCIe link between hosts
    assert shape == "tor pods" or slowest == 40e9
    # one NIC link degraded: the ring's slowest hop is it
    slowed = LinkTable.from_layout(topo.layout)
    slowed.capacity = slowed.capacity.copy()
    slowed.capacity[slowed.index[(0, "nic0")]] = 1e9
    ring = tuple(range(0, topo.num_devices, 4))
    assert hop_bandwidth(slowed, topo.router, ring) == 1e9
    assert hop_bandwidth(slowed, topo.router, ring) == hop_bandwidth(
        slowed, _OneByOne(topo.router), ring
    )


@pytest.mark.parametrize("shape", list(SMALL))
@pytest.mark.parametrize("numbering", ["recorded", "looked up"])
def test_folded_routes_are_the_full_ones_with_one_link_of_each_group(shape, numbering):
    # spread_ids(folded=True) keeps, of each group of links every route crosses all or none
    # of (spread_representatives), its first link with its share: the full route with the
    # other links of each group dropped, entry for entry
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL[shape])
    router, n = topo.router, topo.num_devices
    links = LinkTable.from_layout(topo.layout) if numbering == "recorded" else LinkTable(topo.graph)
    rng = np.random.default_rng(11)
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    ids, shares, lengths = router.spread_ids(src, dst, links)
    first = router.spread_representatives(links)
    keep = first[ids] == ids
    connection = np.repeat(np.arange(src.size), lengths)
    f_ids, f_shares, f_lengths = router.spread_ids(src, dst, links, folded=True)
    assert f_ids.tolist() == ids[keep].tolist()
    assert f_shares.tolist() == shares[keep].tolist()
    assert f_lengths.tolist() == np.bincount(connection[keep], minlength=src.size).tolist()
    # every group really is folded: through a spine the full route is longer
    assert (f_lengths < lengths).any() == (topo.meta["spines_per_pod"] > 0)


def test_a_symmetric_run_with_folded_routes_is_the_same_run(monkeypatch):
    # the engine folds the routes of its symmetric copies (CollectiveRunner._route_plan),
    # counting each class's links from the endpoints (spread_counts) or, where the router
    # declines, from folded routes; unfolded, the classes carry every link and are reduced
    # by their rating instead: the same trace to the bit all three ways (a 64-node
    # data-parallel job through the spines)
    from simulator.topology.fat_tree import FatTreeRouter

    over = ["cluster.gpus=512", "cluster.topology.nodes=64", "parallelism.pp=2"]
    over += ["training.global_batch=256", "model.layers=12"]
    scenario = api.load("scenarios/examples/gpt3-175b-dgx-a100.yaml", over)
    spread_ids, spread_counts = FatTreeRouter.spread_ids, FatTreeRouter.spread_counts
    counted, asked = [], []

    def count_spy(self, *args):
        found = spread_counts(self, *args)
        counted.append(found is not None)
        return found

    def spy(self, src, dst, links, folded=False):
        asked.append(folded)
        return spread_ids(self, src, dst, links, folded)

    monkeypatch.setattr(FatTreeRouter, "spread_counts", count_spy)
    monkeypatch.setattr(FatTreeRouter, "spread_ids", spy)
    counts = api.run(scenario).trace
    assert any(counted)
    monkeypatch.setattr(FatTreeRouter, "spread_counts", lambda *a: None)
    asked.clear()  # the first run's PXN phases asked for folded routes too
    folded = api.run(scenario).trace
    assert any(asked)
    assert counts.equals(folded)
    topo = api.build_topology(scenario.cluster)
    step = api.build_step(api.build_plan(scenario, topo))

    def link_bytes():  # every link's load, tracked: never folded
        return api.simulate(step, topo, track_links=True).stats.link_bytes

    tracked = link_bytes()
    monkeypatch.setattr(FatTreeRouter, "spread_ids", lambda *a, folded=False: spread_ids(*a))
    assert folded.equals(api.run(scenario).trace)
    assert tracked.tolist() == link_bytes().tolist()
    edges = api.network_model(topo).links.edges
    spine = [i for i, (u, v) in enumerate(edges) if str(v).startswith("spine")]
    assert (tracked[spine] > 0).all()  # every uplink to a spine carries its share


def test_release_forgets_the_routers_recorded_ids_only_for_its_own_topology():
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL["rails"])
    copy = dataclasses.replace(topo, graph=topo.graph.copy())
    copy.release()  # a copy shares the router: its ids are the original's, kept
    assert topo.router.recorded is not None and topo.own_layout is not None
    topo.release()
    assert topo.router.recorded is None and topo.layout is None


def test_the_layouts_arrays_are_read_only():
    layout = fat_tree_topology(nic_bandwidth=50e9, **SMALL["rails"]).layout
    for a in (layout.bandwidth, layout.efficiency, layout.latency):
        with pytest.raises(ValueError):
            a[0] = 1.0


def _send_with_a_copy(model):
    """Seconds a 1 GB send 1 -> 8 with its copy 5 -> 12 takes on ``model`` (a rails fabric:
    PXN relays both through GPUs 0 and 4 and leaf0.0, a leaf neither group's devices are
    under), and the links its class is rated on."""
    from simulator.collectives.plan import CollectivePlan, Phase, Transfer

    env, _, runner = model.new_run()
    plan = CollectivePlan("send_recv", "p2p", (1, 8), 1e9, (Phase((Transfer(1, 8, 1e9),)),))
    runner.run(plan, lambda: None, [(5, 12)], copies_key=0)
    env.run()
    rated = runner.geometry(plan, [(5, 12)], copies_key=0)[0].classes[0].rating[0]
    return env.now, {model.links.edges[i] for i in rated}


def test_a_slowed_uplink_met_first_through_a_relay_is_not_folded_away(monkeypatch):
    # A copy with a slowed leaf uplink is read from its graph, and its router learns a leaf's
    # links as routing meets them: the relay's leaf only while the phase is routed, after
    # the check that every group's links are alike. The folded route must not hide the
    # slowed link (the time at a quarter of its rate, as with every link routed).
    from simulator.engine.simulate import NetworkModel
    from simulator.topology.fat_tree import FatTreeRouter

    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL["rails"])
    graph = topo.graph.copy()
    graph.edges["leaf0.0", "spine0.1"]["bandwidth"] *= 0.25
    slowed = dataclasses.replace(topo, graph=graph)

    def model():
        return NetworkModel(slowed.graph, slowed.router, slowed.host_of, slowed.nvls_switch)

    took, rated = _send_with_a_copy(model())
    assert ("leaf0.0", "spine0.1") in rated
    spread_ids = FatTreeRouter.spread_ids
    monkeypatch.setattr(FatTreeRouter, "spread_ids", lambda *a, folded=False: spread_ids(*a))
    assert _send_with_a_copy(model())[0] == took
    # two 1 GB sends spread over leaf0.0's two uplinks: 1 GB on the slowed one, at 12.5 GB/s
    assert took == pytest.approx(2 * 0.5e9 / 12.5e9, rel=1e-3)


def test_a_group_missing_a_link_is_not_folded():
    # under an index that lacks one of a leaf's uplinks the leaf's uplinks are no group:
    # spread_ids declines to fold (and, unfolded, to route: the link is missing)
    topo = fat_tree_topology(nic_bandwidth=50e9, **SMALL["rails"])
    index = dict(LinkTable(topo.graph).index)
    del index[("leaf0.0", "spine0.1")]
    src, dst = np.array([0]), np.array([8])  # leaf0.0 -> leaf1.0 through the spines
    assert topo.router.spread_ids(src, dst, index, folded=True) is None
    assert topo.router.spread_ids(np.array([1]), np.array([9]), index, folded=True) is not None


def test_the_recorded_graph_is_the_graph_built_link_by_link():
    """LinkRecorder puts its links into the graph at once when the layout is taken: the same
    nodes, edges, order and attributes as ``add_link`` one at a time, each edge with an
    attribute dict of its own (a degraded copy changes one direction, not its twin)."""
    from simulator.topology.graph import add_link

    links = [("a", "b", 1.0, 0.1, "x", 1.0, True), ("b", "c", 2.0, 0.2, "y", 0.5, False)]
    links += [(i, "s", 3.0 + i, 0.3, "z", 1.0, True) for i in range(5)]
    recorded, by_hand = nx.DiGraph(), nx.DiGraph()
    for g in (recorded, by_hand):
        g.add_nodes_from(["s", "c", "b", "a", *range(5)])
    recorder = LinkRecorder(recorded)
    for link in links:
        recorder.add(*link)
        add_link(by_hand, *link)
    assert recorded.number_of_edges() == 0  # not yet: at the layout
    layout = recorder.layout()
    assert list(recorded.edges(data=True)) == list(by_hand.edges(data=True))
    assert [list(recorded.predecessors(n)) for n in recorded] == [
        list(by_hand.predecessors(n)) for n in by_hand
    ]
    assert layout.edges == [e for u, v, *_, both in links for e in [(u, v), (v, u)][: 1 + both]]
    recorded.edges["a", "b"]["bandwidth"] = 9.0
    assert recorded.edges["b", "a"]["bandwidth"] == 1.0


def test_a_topology_used_in_a_with_block_is_released_when_it_ends():
    # the commands build one fabric and free its graph's reference cycles at the end, also
    # when the block raises (a bad scenario exits 2 from inside it)
    with nvswitch_topology(8, 450e9) as topo:
        assert topo.graph.number_of_nodes() > 8 and topo.layout is not None
    assert topo.graph.number_of_nodes() == 0 and topo.layout is None
    other = nvswitch_topology(8, 450e9)
    with pytest.raises(ValueError), other:
        raise ValueError("a bad scenario")
    assert other.graph.number_of_nodes() == 0
