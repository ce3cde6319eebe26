"""NVSwitch scale-up domains: a DGX/HGX node (8 GPUs) or an NVL72 rack (72 GPUs).

The NVSwitch chips of a domain are modelled as one non-blocking switch node: each GPU has one
link to it and one from it at its full NVLink bandwidth per direction, so any permutation of
GPU pairs runs at full rate, as NVSwitch provides.

>>> topo = nvswitch_topology(8, 450e9)
>>> topo.graph.number_of_edges(), topo.path(0, 5)
(16, [(0, 'nvswitch0'), ('nvswitch0', 5)])
"""

from __future__ import annotations

import networkx as nx

from simulator.topology.graph import LinkRecorder, Node, Path, Topology


def add_nvswitch_domain(
    links: LinkRecorder,
    host: int,
    first_device: int,
    gpus: int,
    bandwidth: float,
    latency: float,
    efficiency: float,
    device_kind: str = "gpu",
) -> tuple[str, list[tuple[int, int]]]:
    """Add ``gpus`` devices numbered from ``first_device`` around switch ``nvswitch{host}``
    to ``links.graph``; (the switch, each device's (GPU -> switch, switch -> GPU) link ids)."""
    g = links.graph
    switch = f"nvswitch{host}"
    g.add_node(switch, kind="nvswitch", host=host)
    ids = []
    for d in range(first_device, first_device + gpus):
        g.add_node(d, kind=device_kind, host=host)
        ids.append(links.add(d, switch, bandwidth, latency / 2, "nvlink", efficiency))
    return switch, ids


class NVSwitchRouter:
    """GPU -> its host's switch -> GPU; NVLS flows end or start at the switch itself."""

    def __init__(self, host_of: dict[int, int]):
        self.host_of = host_of

    def path(self, src: Node, dst: Node, key: int = 0) -> Path:
        if src == dst:
            return []
        if isinstance(dst, str):
            return [(src, dst)]
        if isinstance(src, str):
            return [(src, dst)]
        sw_s, sw_d = f"nvswitch{self.host_of[src]}", f"nvswitch{self.host_of[dst]}"
        if sw_s != sw_d:
            raise ValueError(f"devices {src} and {dst} are in different NVLink domains")
        return [(src, sw_s), (sw_s, dst)]


def nvswitch_topology(
    gpus: int,
    bandwidth: float,
    latency: float = 0.7e-6,
    efficiency: float = 1.0,
    nvls: bool = False,
    name: str = "",
) -> Topology:
    """One NVLink domain of ``gpus`` devices; ``latency`` (s) is GPU to GPU through the switch.

    ``bandwidth`` (B/s) is each GPU's NVLink line rate per direction, ``efficiency`` its payload
    fraction.
    """
    g = nx.DiGraph(name=name or f"NVSwitch x{gpus}")
    links = LinkRecorder(g)
    switch, _ = add_nvswitch_domain(links, 0, 0, gpus, bandwidth, latency, efficiency)
    host_of = dict.fromkeys(range(gpus), 0)
    return Topology(
        graph=g,
        devices=list(range(gpus)),
        host_of=host_of,
        router=NVSwitchRouter(host_of),
        nvls_switch={0: switch} if nvls else {},
        name=g.graph["name"],
        meta={"kind": "nvswitch"},
        layout=links.layout(),
    )
