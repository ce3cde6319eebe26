"""Topologies as networkx graphs: NVSwitch nodes, fat-trees, TPU tori, and their routers.

Builders are pure functions of their parameters returning a :class:`Topology`: a directed graph
whose nodes have a ``kind`` (gpu, nvswitch, nic, leaf, spine, core, tpu) and whose edges carry
``bandwidth`` (B/s, line rate per direction), ``efficiency`` (payload fraction), ``latency`` (s)
and a link ``kind``. Devices are the integers ``0 .. n-1``.
"""

from simulator.topology.build import build_topology
from simulator.topology.graph import Topology

__all__ = ["Topology", "build_topology"]
