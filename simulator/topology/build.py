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

DEFAULT_NODE_GPUS = 8  # GPUs per NVSwitch node of the fabric built without a topology


def build_topology(cluster: ClusterConfig) -> Topology:
    """The cluster's topology graph. Without one, GPUs form NVSwitch nodes of 8 on a
    full-bisection fat-tree with one 400 Gb/s NIC each (a DGX H100 SuperPOD's shape).

    Built with the cyclic garbage collector paused: a graph of 16K GPUs is a million
    long-lived dicts and tuples, which the collector's passes would walk again and again
    (0.3-0.5 s of the Llama 3 cluster's 0.9-1.2 s).

    >>> from simulator.api import load
    >>> topo = build_topology(load("scenarios/examples/pipeline-1f1b.yaml").cluster)
    >>> topo.name, topo.num_devices, topo.meta["kind"]
    ('DGX H100', 8, 'nvswitch')
    """
    with paused_gc():
        return _build(cluster)


def _build(cluster: ClusterConfig) -> Topology:
    acc = cluster.accelerator
    t = cluster.topology
    if t is None:
        nodes = -(-cluster.num_gpus // DEFAULT_NODE_GPUS)
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
        return fat_tree_topology(t, acc.scale_up_bandwidth_Bps)
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
