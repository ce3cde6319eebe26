"""A worker keeps the topologies of its last points: reusing one must not change a result."""

import dataclasses

import pytest

from simulator import api
from simulator.sweep import adapter

# Four DGX A100 nodes under one leaf: data-parallel rings across nodes, routed with copies.
SCENARIO = "scenarios/examples/ddp-megatron-1.7b.yaml"
PIPELINED = ["parallelism.tp=2", "parallelism.pp=2"]


@pytest.fixture(autouse=True)
def empty_keep(monkeypatch):
    """Each test starts with no kept topology and leaves none behind."""
    monkeypatch.setattr(adapter, "_kept", type(adapter._kept)())


def test_a_kept_topology_is_reused_and_an_other_cluster_is_not():
    s = api.load(SCENARIO)
    first = adapter.topology_of(s.cluster)
    assert adapter.topology_of(api.load(SCENARIO).cluster) is first  # equal clusters
    other = api.load(SCENARIO, ["cluster.topology.nic_bandwidth=100 Gb/s"])
    assert adapter.topology_of(other.cluster) is not first


def test_at_most_the_kept_number_of_topologies_stay():
    for gbps in (100, 200, 400, 800):
        s = api.load(SCENARIO, [f"cluster.topology.nic_bandwidth={gbps} Gb/s"])
        adapter.topology_of(s.cluster)
    assert len(adapter._kept) == adapter.KEPT_TOPOLOGIES


def test_a_topology_no_longer_kept_leaves_no_cyclic_garbage():
    # A networkx graph is a reference cycle: a dropped topology whole would wait for a full
    # collection (in a sweep worker: 3.5 MB a point, 1.7 GB over 1,000 points). Emptied on
    # eviction, nothing of it is left for the collector but a few view objects.
    import gc

    built = []
    for gbps in (100, 200, 400, 800):
        s = api.load(SCENARIO, [f"cluster.topology.nic_bandwidth={gbps} Gb/s"])
        built.append(adapter.topology_of(s.cluster))
    evicted = built[: -adapter.KEPT_TOPOLOGIES]
    assert all(t.graph.number_of_nodes() == 0 and not t.derived for t in evicted)
    assert all(t.graph.number_of_nodes() > 0 for t in built[-adapter.KEPT_TOPOLOGIES :])
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        del built, evicted
        gc.collect()
        dicts = sum(type(o) is dict for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert dicts < 20  # the graphs' own attribute dicts only (a whole graph leaves ~100s)


def test_runs_on_a_kept_topology_give_the_fresh_topology_results():
    # The network model (link table, routes) is kept on the topology across runs; each run's
    # routed collectives with their copies (named by its task graph's indices) are its own.
    # Two runs on one topology, with a different plan in between, must give exactly what a
    # freshly built topology gives.
    s = api.load(SCENARIO, PIPELINED)
    other = api.load(SCENARIO)
    topo = adapter.topology_of(s.cluster)
    before = api.run(s, topo).summary
    api.run(other, topo)
    again = api.run(s, topo).summary
    fresh = api.run(s, api.build_topology(s.cluster)).summary
    assert api.network_model(topo) is api.network_model(topo)
    # shared shapes are keyed by their copies themselves, never by a run's copy-set index
    shared = api.network_model(topo).geometry_cache
    assert all(isinstance(key[3], tuple) for key in shared)
    assert before == again == fresh


def test_a_changed_copy_of_a_topology_gets_its_own_network_model():
    s = api.load(SCENARIO)
    topo = api.build_topology(s.cluster)
    model = api.network_model(topo)
    graph = topo.graph.copy()
    for _, _, d in graph.edges(data=True):
        d["bandwidth"] *= 0.5
    slower = dataclasses.replace(topo, graph=graph)
    assert api.network_model(slower) is not model
    assert api.network_model(slower).links.bandwidth.sum() == model.links.bandwidth.sum() / 2
    topo.graph = graph  # swapped in place, against the rule: still not the stale model
    assert api.network_model(topo) is not model
