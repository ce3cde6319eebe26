"""Build the Topology a scenario's ``cluster`` describes (the YAML schema lives in scenario/)."""

from __future__ import annotations

from simulator.collector import paused_gc
from simulator.scenario.schema import (
    ClusterConfig,
    FatTreeTopology,
    NVSwitchTopology,
    TorusTopology,
)
from simulator.topology.fat_tree import fat_tree_topology
from simulator.topology.graph import Topology
from simulator.topology.nvswitch import nvswitch_topology
from simulator.topology.torus import torus_topology


def build_topology(cluster: ClusterConfig) -> Topology:
    """The cluster's topology graph. Without one, GPUs form NVSwitch nodes of 8 on a
    full-bisection fat-tree with one 400 Gb/s NIC each (a DGX H100 SuperPOD's shape).

    Built with the cyclic garbage collector paused: a graph of 16K GPUs is a million
    long-lived dicts and tuples, which the collector's passes would walk again and again
    (0.3-0.5 s of the Llama 3 cluster's 0.9-1.2 s)."""
    with paused_gc():
        return _build(cluster)


def _build(cluster: ClusterConfig) -> Topology:
    acc = cluster.accelerator
    t = cluster.topology
    if t is None:
        nodes = -(-cluster.num_gpus // 8)
        if nodes == 1:
            return nvswitch_topology(
                cluster.num_gpus,
                acc.scale_up_bandwidth_Bps,
                efficiency=0.8,
                name=f"{cluster.num_gpus} x {acc.name}",
            )
        t = FatTreeTopology(kind="fat_tree", nodes=nodes)
    if isinstance(t, NVSwitchTopology):
        n = t.node
        return nvswitch_topology(
            n.gpus,
            n.nvlink_bandwidth or acc.scale_up_bandwidth_Bps,
            n.nvlink_latency,
            n.nvlink_efficiency,
            n.nvls,
            t.name or "",
        )
    if isinstance(t, FatTreeTopology):
        n = t.node
        return fat_tree_topology(
            nodes=t.nodes,
            gpus_per_node=n.gpus,
            nvlink_bandwidth=n.nvlink_bandwidth or acc.scale_up_bandwidth_Bps,
            nvlink_latency=n.nvlink_latency,
            nvlink_efficiency=n.nvlink_efficiency,
            pcie_bandwidth=n.pcie_bandwidth,
            pcie_latency=n.pcie_latency,
            nic_bandwidth=t.nic_bandwidth,
            nic_latency=t.nic_latency,
            nic_efficiency=t.nic_efficiency,
            switch_latency=t.switch_latency,
            levels=t.levels,
            nodes_per_leaf=t.hosts_per_leaf,
            leaves_per_pod=_leaves_per_pod(t),
            oversubscription=tuple(t.oversubscription),
            rail_optimized=t.rail_optimized,
            ecmp_flows=t.ecmp_flows,
            pxn=t.pxn,
            nvls=n.nvls,
            name=t.name or "",
        )
    if isinstance(t, TorusTopology):
        return torus_topology(
            tuple(t.shape),
            t.ici_link_bandwidth,
            t.ici_latency,
            t.ici_efficiency,
            t.wraparound,
            t.name or "",
        )
    raise TypeError(f"unknown topology {t!r}")


def _leaves_per_pod(t: FatTreeTopology) -> int | None:
    """Leaves per pod of the builder from the pod's hosts: its leaf groups times the leaves
    of a group (one per rail, or one top-of-rack leaf)."""
    hosts = t.hosts_per_pod
    if hosts is None:
        return None
    groups = max(1, -(-hosts // t.hosts_per_leaf))
    return groups * (t.node.gpus if t.rail_optimized and t.node.gpus > 1 else 1)
