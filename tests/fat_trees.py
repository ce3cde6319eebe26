"""Fat-trees for tests, from keywords: the fabric's settings with the plain defaults the
closed-form tests assume (ideal links: efficiency 1, 450 GB/s NVLink, 50 GB/s NICs), built
through the same config object a scenario's ``cluster.topology`` is."""

from __future__ import annotations

from simulator.scenario.topology_config import FatTreeTopology
from simulator.topology.fat_tree import fat_tree_topology

NODE_KEYS = {
    "gpus_per_node": "gpus",
    "nvlink_bandwidth": "nvlink_bandwidth",
    "nvlink_latency": "nvlink_latency",
    "nvlink_efficiency": "nvlink_efficiency",
    "pcie_bandwidth": "pcie_bandwidth",
    "pcie_latency": "pcie_latency",
    "nvls": "nvls",
}
DEFAULTS = {
    "nvlink_bandwidth": 450e9,
    "nvlink_efficiency": 1.0,
    "nic_bandwidth": 50e9,
    "nic_efficiency": 1.0,
}


def fat_tree(nodes: int, **settings):
    """The fat-tree of ``nodes`` hosts with ``settings`` (the config's field names; the
    node's as ``gpus_per_node``, ``nvlink_bandwidth``, ``pcie_bandwidth``, ...)."""
    given = {**DEFAULTS, **settings}
    node = {NODE_KEYS[k]: given.pop(k) for k in list(given) if k in NODE_KEYS}
    if "oversubscription" in given:
        given["oversubscription"] = list(given["oversubscription"])
    config = FatTreeTopology(kind="fat_tree", nodes=nodes, node=node, **given)
    return fat_tree_topology(config, node["nvlink_bandwidth"])
