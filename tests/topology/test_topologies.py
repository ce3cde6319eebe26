"""Topology builders: structure, routes, bandwidth figures."""

import pytest

from simulator import api
from simulator.topology.nvswitch import nvswitch_topology
from simulator.topology.summary import bisection_bandwidth
from simulator.topology.torus import torus_topology
from tests.fat_trees import fat_tree as fat_tree_topology


def _kinds(topo):
    out = {}
    for _, d in topo.graph.nodes(data=True):
        out[d["kind"]] = out.get(d["kind"], 0) + 1
    return out


def test_nvswitch_node():
    topo = nvswitch_topology(8, 450e9, latency=1e-6)
    assert _kinds(topo) == {"gpu": 8, "nvswitch": 1}
    path = topo.path(2, 7)
    assert path == [(2, "nvswitch0"), ("nvswitch0", 7)]
    assert sum(topo.graph.edges[e]["latency"] for e in path) == pytest.approx(1e-6)
    assert bisection_bandwidth(topo) == 4 * 450e9


@pytest.mark.parametrize(
    "name,devices,kinds",
    [
        ("dgx-h100.yaml", 8, {"gpu": 8, "nvswitch": 1}),
        ("nvl72.yaml", 72, {"gpu": 72, "nvswitch": 1}),
        ("dgx-a100-superpod.yaml", 1120, None),
        ("dgx-h100-superpod.yaml", 1024, None),
        ("llama3-24k-cluster.yaml", 24576, None),
        ("tpu-v5p-pod.yaml", 6144, {"tpu": 6144}),
    ],
)
def test_shipped_topologies_build(root, name, devices, kinds):
    topo = api.topology_from_file(root / "topologies" / name)
    assert topo.num_devices == devices
    if kinds:
        assert _kinds(topo) == kinds
    for u, v, d in list(topo.graph.edges(data=True))[:1000]:
        assert d["bandwidth"] > 0 and d["latency"] >= 0 and topo.graph.has_edge(v, u)


def test_llama3_cluster_oversubscription_and_bisection(root):
    topo = api.topology_from_file(root / "topologies/llama3-24k-cluster.yaml")
    # 8 pods of 3,072 GPUs at full bisection, 7:1 above: the cut across pods carries
    # 24,576 x 50 GB/s / 7 / 2 per direction.
    assert bisection_bandwidth(topo) == pytest.approx(24576 * 50e9 / 7 / 2, rel=1e-9)
    assert topo.meta["pods"] == 8 and topo.meta["leaves"] == 1536
    # A flow between pods climbs to a core switch: 8 links.
    path = topo.path(0, 24575)
    assert [topo.graph.nodes[v]["kind"] for _, v in path] == [
        "nic",
        "leaf",
        "spine",
        "core",
        "spine",
        "leaf",
        "nic",
        "gpu",
    ]
    # Within a pod it turns at a spine: 6 links.
    assert len(topo.path(0, 3071)) == 6


def test_rail_optimised_keeps_same_rail_traffic_under_one_leaf():
    rail = fat_tree_topology(nodes=4, nodes_per_leaf=4, rail_optimized=True)
    tor = fat_tree_topology(nodes=4, nodes_per_leaf=1, rail_optimized=False)
    # GPU 0 of host 0 to GPU 0 of host 1: one leaf hop on rails, through a spine otherwise.
    assert len(rail.path(0, 8)) == 4
    assert len(tor.path(0, 8)) == 6
    # Across rails the rail-optimised fabric needs the spine as well.
    assert len(rail.path(0, 9)) == 6


def test_ecmp_is_deterministic_and_spreads():
    topo = fat_tree_topology(nodes=8, nodes_per_leaf=1, rail_optimized=False)
    spines = {topo.path(0, 8 * h + 1, key)[2][1] for h in range(1, 8) for key in range(8)}
    assert len(spines) > 1  # flows hash over several spines
    again = fat_tree_topology(nodes=8, nodes_per_leaf=1, rail_optimized=False)
    assert [topo.path(0, 9, k) for k in range(5)] == [again.path(0, 9, k) for k in range(5)]


def test_oversubscription_sets_leaf_uplinks():
    full = fat_tree_topology(nodes=4, nodes_per_leaf=1, rail_optimized=False)
    thin = fat_tree_topology(nodes=4, nodes_per_leaf=1, rail_optimized=False, oversubscription=(4,))

    def uplink(t):
        return sum(
            d["bandwidth"]
            for u, v, d in t.graph.edges(data=True)
            if u == "leaf0.0" and t.graph.nodes[v]["kind"] == "spine"
        )

    assert uplink(full) == pytest.approx(8 * 50e9)
    assert uplink(thin) == pytest.approx(8 * 50e9 / 4)


def test_torus_wraparound_and_dimension_order():
    topo = torus_topology((4, 4, 4), 100e9)
    assert topo.graph.number_of_edges() == 64 * 6
    # (0,0,0) -> (3,0,0) is one wraparound hop; (0,0,0) -> (2,2,2) is 6 hops, x first.
    assert len(topo.path(0, 3)) == 1
    path = topo.path(0, 2 + 4 * 2 + 16 * 2)
    assert len(path) == 6
    assert [topo.graph.nodes[v]["coords"] for _, v in path][:2] in (
        [(1, 0, 0), (2, 0, 0)],
        [(3, 0, 0), (2, 0, 0)],
    )
    mesh = torus_topology((4, 4), 100e9, wraparound=False)
    assert len(mesh.path(0, 3)) == 3
    # Bisection of a 16 x 16 x 24 torus: cut the 24-long dimension, 2 x 256 links.
    v5p = torus_topology((16, 16, 24), 100e9)
    assert bisection_bandwidth(v5p) == 2 * 256 * 100e9


def test_topology_drawing_has_a_legend_of_nodes_and_links(tmp_path, monkeypatch):
    from matplotlib import pyplot as plt

    from simulator.topology.draw import draw_topology

    legends = []
    real = plt.Axes.legend

    def spy(self, *args, **kwargs):
        legend = real(self, *args, **kwargs)
        legends.append([t.get_text() for t in legend.get_texts()])
        return legend

    monkeypatch.setattr(plt.Axes, "legend", spy)
    topo = fat_tree_topology(nodes=2, gpus_per_node=4, nodes_per_leaf=1, rail_optimized=False)
    draw_topology(topo, tmp_path / "t.png")
    nodes, links = legends
    assert "GPU (8)" in nodes and "NIC (8)" in nodes and "NVSwitch (2)" in nodes
    assert "nic-leaf: 8 links x 50 GB/s per direction" in links


def test_ecmp_flows_of_a_topology_file_reach_the_router():
    # the Llama 3 cluster's 16-flow static ECMP was validated, then dropped.
    from simulator import api

    topo = api.topology_from_file("topologies/llama3-24k-cluster.yaml", "H100-SXM", ["nodes=64"])
    assert topo.router.ecmp_flows == 16
    adaptive = api.topology_from_file(
        "topologies/llama3-24k-cluster.yaml", "H100-SXM", ["nodes=64", "ecmp_flows=0"]
    )
    assert adaptive.router.ecmp_flows == 0


def test_a_one_level_rail_optimized_fabric_says_which_setting_to_change():
    # QA: "raise nodes_per_leaf" for 2 nodes under a 16-node leaf; the rails are what split it
    from tests.fat_trees import fat_tree as fat_tree_topology

    with pytest.raises(ValueError, match="set rail_optimized: false"):
        fat_tree_topology(nodes=2, levels=1)
    assert fat_tree_topology(nodes=2, levels=1, rail_optimized=False).num_devices == 16
    with pytest.raises(ValueError, match="raise nodes_per_leaf"):
        fat_tree_topology(nodes=4, levels=1, nodes_per_leaf=2, rail_optimized=False)


def test_a_large_topology_is_built_without_collector_passes():
    # build_topology pauses the cyclic collector (simulator.collector.paused_gc): the same
    # 1,024-GPU fat-tree (70K dicts and tuples) built with the collector on sets off passes;
    # through build_topology none runs, and the collector is on again after
    import gc

    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    over = ["cluster.gpus=1024", "cluster.topology.nodes=128"]
    scenario = api.load("scenarios/examples/gpt3-175b-dgx-a100.yaml", over)
    gc.callbacks.append(count)
    try:
        fat_tree_topology(nodes=128, gpus_per_node=8, nic_bandwidth=50e9)
        with_collector = len(passes)
        topo = api.build_topology(scenario.cluster)
    finally:
        gc.callbacks.remove(count)
    assert with_collector > 0
    assert topo.num_devices == 1024 and len(passes) == with_collector and gc.isenabled()
