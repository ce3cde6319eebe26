"""The ``cluster.topology`` section: an NVSwitch node, a fat-tree of nodes, or a TPU torus.

The graph built from it is :class:`simulator.topology.Topology`; this is its validated
description. At most :data:`MAX_DEVICES` devices, because the graph is built in full.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from simulator.scenario.fields import MAX_DEVICES, Efficiency, Frozen, PosInt, Real
from simulator.units import Bandwidth, LinkLatency


class NodeSpec(Frozen):
    """A scale-up node: ``gpus`` devices behind NVSwitch (8 in a DGX, 72 in an NVL72 rack).

    ``nvlink_bandwidth`` is per GPU per direction; None takes the accelerator's scale-up figure.
    ``nvlink_efficiency`` is the payload fraction of NVLink's line rate: 20 of 25 GB/s per link
    with 128-byte writes (NCCL maintainer, nccl-tests issue 149). ``pcie_bandwidth`` joins each
    GPU to its NIC (PCIe Gen5 x16: 64 GB/s per direction). ``nvls`` marks NVLink SHARP
    (in-switch reduction) support.
    """

    gpus: PosInt = 8
    nvlink_bandwidth: Bandwidth | None = None
    nvlink_latency: LinkLatency = 0.7e-6
    nvlink_efficiency: Efficiency = 0.8
    pcie_bandwidth: Bandwidth = 64e9
    pcie_latency: LinkLatency = 0.5e-6
    nvls: bool = False


class NVSwitchTopology(Frozen):
    """One scale-up domain: ``node.gpus`` devices behind NVSwitch (a DGX, an NVL72 rack)."""

    kind: Literal["nvswitch"]
    name: str | None = None
    node: NodeSpec = NodeSpec()

    @model_validator(mode="after")
    def within_max_devices(self):
        return _within_max_devices(self)


LEVEL_NAMES = ("leaf", "spine")  # the switches each oversubscription ratio sits above


class FatTreeTopology(Frozen):
    """Nodes joined by an InfiniBand/RoCE fat-tree, one NIC per GPU.

    ``oversubscription`` gives, per level above the leaves, downlink:uplink bandwidth (1 = full
    bisection; 7 = 7:1 above Llama 3's 3,072-GPU pods, which the paper writes 1:7).
    ``nic_efficiency`` is the payload fraction of an InfiniBand packet: a 4,096-byte MTU
    behind 26 bytes of LRH, BTH, ICRC and VCRC headers (IBTA specification), 0.994.

    Rail-optimised fabrics give each GPU index its own leaf in a group of ``nodes_per_leaf``
    nodes; otherwise a leaf (top-of-rack switch) serves every NIC of its ``nodes_per_leaf``
    nodes. ``leaf_ports`` (the leaf switch's host-facing ports) is the alternative that keeps
    the switch the same when ``rail_optimized`` changes: a rail leaf takes one NIC of each of
    ``leaf_ports`` hosts, a top-of-rack leaf all NICs of ``leaf_ports / node.gpus`` hosts.
    Three levels group hosts into pods of ``nodes_per_pod`` hosts (``leaves_per_pod``
    top-of-rack leaves is the same for a fabric without rails; with rails it is refused, since
    the hosts it means would change with them).

    ``ecmp_flows`` splits each connection into that many sub-flows, each hashed onto one of
    the equal-cost paths (Llama 3's enhanced ECMP: 16); 0 spreads traffic evenly over all of
    them, as adaptive routing or packet spraying does. ``pxn`` (rail-optimised fabrics): a
    connection between GPUs of different rails crosses NVLink to its host's GPU on the
    destination's rail first and stays on that rail, as NCCL's PXN does from 2.12 on (on by
    default; false models ``NCCL_PXN_DISABLE=1``).
    """

    kind: Literal["fat_tree"]
    name: str | None = None
    node: NodeSpec = NodeSpec()
    nodes: PosInt
    nic_bandwidth: Bandwidth = 50e9
    nic_latency: LinkLatency = 2e-6
    nic_efficiency: Efficiency = 4096 / 4122
    switch_latency: LinkLatency = 0.5e-6
    levels: Annotated[int, Field(ge=1, le=3)] = 2
    nodes_per_leaf: PosInt = 16
    leaves_per_pod: PosInt | None = None
    oversubscription: list[Annotated[Real, Field(ge=1, le=1000)]] = [1.0]
    rail_optimized: bool = True
    ecmp_flows: Annotated[int, Field(ge=0, le=1024)] = 0
    pxn: bool = True
    leaf_ports: PosInt | None = None
    nodes_per_pod: PosInt | None = None

    @field_validator("oversubscription")
    @classmethod
    def one_ratio_per_upper_level(cls, ratios: list[float], info: ValidationInfo):
        """One ratio per level above the leaves, when the list is given at all (absent, every
        level is 1:1): a list one short would leave a level at 1:1 without a word."""
        levels = info.data.get("levels")  # absent when levels itself was invalid
        if levels is None:
            return ratios
        above = LEVEL_NAMES[: levels - 1]
        if len(ratios) > levels - 1:
            raise ValueError(
                f"{len(ratios)} ratios given but levels = {levels} has {levels - 1} level(s) "
                f"above the leaves; give one ratio per such level"
            )
        if len(ratios) < levels - 1:
            example = [*ratios, *[1.0] * (levels - 1 - len(ratios))]
            missing = ", ".join(above[len(ratios) :])
            raise ValueError(
                f"{len(ratios)} ratio(s) given but levels = {levels} has {levels - 1} levels "
                f"above the leaves ({', '.join(above)}): the {missing} ratio is missing "
                f"(1 is full bisection), e.g. [{', '.join(f'{r:g}' for r in example)}]"
            )
        return ratios

    @model_validator(mode="after")
    def leaves_and_pods_in_hosts(self):
        """``leaf_ports`` and ``nodes_per_pod`` must agree with the rest, and settings whose
        hosts would change with ``rail_optimized`` are refused with rails."""
        given = self.model_fields_set
        per_host = 1 if self.rail_optimized else self.node.gpus
        if self.leaf_ports is not None:
            if "nodes_per_leaf" in given:
                raise ValueError("give nodes_per_leaf or leaf_ports, not both")
            if self.leaf_ports % per_host:
                raise ValueError(
                    f"leaf_ports {self.leaf_ports}: a top-of-rack leaf takes all {per_host} "
                    f"NICs of each host, so its ports must be a multiple of {per_host}"
                )
        if self.leaves_per_pod is not None:
            if self.nodes_per_pod is not None:
                raise ValueError("give nodes_per_pod or leaves_per_pod, not both")
            if self.rail_optimized and self.node.gpus > 1:
                hosts = self.leaves_per_pod * self.hosts_per_leaf
                raise ValueError(
                    f"leaves_per_pod {self.leaves_per_pod} counts leaves, and rail_optimized "
                    f"gives each group of {self.hosts_per_leaf} hosts {self.node.gpus} leaves "
                    f"(one per rail): the pod would hold {hosts // self.node.gpus} hosts, not "
                    f"the {hosts} it holds without rails. Give nodes_per_pod (hosts per pod, "
                    f"the same with or without rails), e.g. nodes_per_pod: {hosts}"
                )
        pod = self.hosts_per_pod
        if pod is not None and pod % self.hosts_per_leaf and pod < self.nodes:
            raise ValueError(
                f"nodes_per_pod {pod} is not a whole number of leaf groups of "
                f"{self.hosts_per_leaf} hosts"
            )
        return self

    @property
    def hosts_per_leaf(self) -> int:
        """Hosts per leaf group (a rack): ``nodes_per_leaf``, or ``leaf_ports`` over the NICs
        each host has on one leaf."""
        if self.leaf_ports is not None:
            return max(1, self.leaf_ports // (1 if self.rail_optimized else self.node.gpus))
        return self.nodes_per_leaf

    @property
    def hosts_per_pod(self) -> int | None:
        """Hosts per pod with three levels (None: one pod of every host)."""
        if self.nodes_per_pod is not None:
            return self.nodes_per_pod
        if self.leaves_per_pod is not None:
            return self.leaves_per_pod * self.hosts_per_leaf
        return None

    @model_validator(mode="after")
    def within_max_devices(self):
        return _within_max_devices(self)


class TorusTopology(Frozen):
    """A TPU slice: 2D (v5e) or 3D (v4, v5p) torus of chips with ICI links."""

    kind: Literal["torus"]
    name: str | None = None
    shape: Annotated[list[PosInt], Field(min_length=1, max_length=3)]
    wraparound: bool = True
    ici_link_bandwidth: Bandwidth = 45e9
    ici_latency: LinkLatency = 1e-6
    ici_efficiency: Efficiency = 1.0

    @model_validator(mode="after")
    def within_max_devices(self):
        return _within_max_devices(self)


TopologyConfig = Annotated[
    NVSwitchTopology | FatTreeTopology | TorusTopology, Field(discriminator="kind")
]
"""The ``cluster.topology`` section (the built graph is :class:`simulator.topology.Topology`)."""


def _within_max_devices(topology):
    n = topology_devices(topology)
    if n > MAX_DEVICES:
        raise ValueError(
            f"{n:,} devices exceed the {MAX_DEVICES:,} supported: the topology graph is "
            f"built in full (131,072 GPUs take about 1.2 GB)"
        )
    return topology


def topology_devices(topology) -> int:
    """The number of accelerators ``topology`` describes."""
    if isinstance(topology, TorusTopology):
        n = 1
        for d in topology.shape:
            n *= d
        return n
    if isinstance(topology, FatTreeTopology):
        return topology.nodes * topology.node.gpus
    return topology.node.gpus
