"""The Topology record shared by all builders, and the deterministic ECMP hash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import networkx as nx
import numpy as np

Node = int | str
Path = list[tuple[Node, Node]]


class Router(Protocol):
    """Chooses the path of a flow: a list of directed edges from ``src`` to ``dst``."""

    def path(self, src: Node, dst: Node, key: int = 0) -> Path: ...


def ecmp_hash(src: Node, dst: Node, key: int) -> int:
    """A deterministic 32-bit mix of a flow's endpoints and key (process-independent).

    Python's ``hash`` of strings changes per process, so ECMP would not be reproducible.
    """
    a = src if isinstance(src, int) else _str_id(src)
    b = dst if isinstance(dst, int) else _str_id(dst)
    x = (a * 0x9E3779B1 + b * 0x85EBCA77 + key * 0xC2B2AE3D + 0x27D4EB2F) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    x = (x * 0x297A2D39) & 0xFFFFFFFF
    return x ^ (x >> 15)


def ecmp_hash_array(src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """:func:`ecmp_hash` of integer endpoints and keys in [0, 2**32), element-wise: the same
    integer arithmetic in uint64, whose wrap-around at 2**64 leaves the low 32 bits that the
    hash keeps unchanged, so the same hashes."""
    a, b, k = (np.asarray(v, dtype=np.uint64) for v in (src, dst, key))
    mask = np.uint64(0xFFFFFFFF)
    x = (
        a * np.uint64(0x9E3779B1) + b * np.uint64(0x85EBCA77) + k * np.uint64(0xC2B2AE3D)
        + np.uint64(0x27D4EB2F)
    ) & mask  # fmt: skip
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & mask
    x ^= x >> np.uint64(12)
    x = (x * np.uint64(0x297A2D39)) & mask
    return (x ^ (x >> np.uint64(15))).astype(np.int64)


def _str_id(s: str) -> int:
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


def add_link(
    g: nx.DiGraph,
    u: Node,
    v: Node,
    bandwidth: float,
    latency: float,
    kind: str,
    efficiency: float = 1.0,
    both: bool = True,
) -> None:
    """Add the directed link u -> v (and v -> u when ``both``), one direction's line rate each."""
    attrs = {"bandwidth": bandwidth, "latency": latency, "kind": kind, "efficiency": efficiency}
    g.add_edge(u, v, **attrs)
    if both:
        g.add_edge(v, u, **attrs)


@dataclass(eq=False)
class LinkLayout:
    """A built graph's directed links in the order its builder added them, as arrays: the
    engine's link table made without reading 131K attribute dicts back out of the graph
    (0.13 s for 16K GPUs), and the ids a builder's router may compute from the structure
    instead of looking each (u, v) up.

    ``graph``: the graph described, as built (a built graph is not changed in place, as
    :class:`Topology` says; a copy with changes is described by none: :attr:`Topology.layout`
    is used only while ``topo.graph is layout.graph``);
    ``edges``: (u, v) per link id; ``bandwidth`` (B/s), ``efficiency`` (payload fraction),
    ``latency`` (s) per link id."""

    graph: nx.DiGraph
    edges: list[tuple[Node, Node]]
    bandwidth: np.ndarray
    efficiency: np.ndarray
    latency: np.ndarray


class LinkRecorder:
    """Adds links to ``graph`` (as :func:`add_link`) and numbers them in order, so a
    builder knows each link's id as it adds it and ends with a :class:`LinkLayout`.

    The links reach the graph in one ``add_edges_from`` when the layout is taken (or
    :meth:`flush`), in the order added: the same graph, each edge with its own attribute
    dict, at a third of the cost of an ``add_edge`` per link (131K links of a 16K-GPU
    fat-tree). A builder adds a link's nodes before the link (so the graph's node order is
    the builder's) and reads the graph's edges only after :meth:`layout`."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self._edges: list[tuple[Node, Node]] = []
        # (u, v, attributes) of the links not yet in the graph
        self._pending: list[tuple[Node, Node, dict]] = []
        # (first link id, (bandwidth, efficiency, latency)) where the attributes change:
        # builders add links of one kind in long runs
        self._runs: list[tuple[int, tuple[float, float, float]]] = []
        self._last: tuple[float, float, float] | None = None

    def add(
        self,
        u: Node,
        v: Node,
        bandwidth: float,
        latency: float,
        kind: str,
        efficiency: float = 1.0,
        both: bool = True,
    ) -> tuple[int, int]:
        """Add u -> v (and v -> u when ``both``); their ids (-1 for a direction not added)."""
        attrs = {"bandwidth": bandwidth, "latency": latency, "kind": kind, "efficiency": efficiency}
        edges, pending = self._edges, self._pending
        first = len(edges)
        edges.append((u, v))
        pending.append((u, v, attrs))  # copied into a dict of the edge's own by networkx
        if both:
            edges.append((v, u))
            pending.append((v, u, attrs))
        runs = (bandwidth, efficiency, latency)
        if runs != self._last:
            self._runs.append((first, runs))
            self._last = runs
        return first, first + 1 if both else -1

    def flush(self) -> None:
        """Put the links added so far into the graph."""
        if self._pending:
            self.graph.add_edges_from(self._pending)
            self._pending = []

    def layout(self) -> LinkLayout | None:
        """The links added, in order (in the graph from now on); None if some link was added
        twice (then the graph holds fewer links than were recorded, and only the graph is to
        be trusted)."""
        self.flush()
        n = len(self._edges)
        if n != self.graph.number_of_edges():
            return None
        starts = [first for first, _ in self._runs]
        lengths = np.diff(np.array([*starts, n], dtype=np.int64))
        attrs = np.array([a for _, a in self._runs], dtype=float).reshape(-1, 3)
        arrays = [np.repeat(attrs[:, k], lengths) for k in range(3)]
        for a in arrays:  # shared by every link table made from the layout: not to be changed
            a.flags.writeable = False
        return LinkLayout(self.graph, list(self._edges), *arrays)


@dataclass
class Topology:
    """A built topology: the graph, its devices, where each device lives, and its router.

    Attributes
    ----------
    graph : the directed link graph.
    devices : accelerator node ids, ``0 .. n-1``.
    host_of : device -> scale-up domain (node) index; devices of one host talk over NVLink.
    nvls_switch : host -> its NVSwitch node where in-switch reduction (NVLS) is available.
    router : picks each flow's path.
    name : human name.
    derived : views of this topology that the layers above build once and keep for every run
        on it (the engine's network model: its link arrays, routes and routed collectives). A
        built topology is not changed in place: change a copy (``dataclasses.replace`` with a
        copied graph), which starts with no derived views.
    layout : the graph's links as its builder numbered them (:class:`LinkLayout`), or None;
        it describes ``layout.graph`` alone, so a copy with another graph falls back to the
        graph itself.
    """

    graph: nx.DiGraph
    devices: list[int]
    host_of: dict[int, int]
    router: Router
    nvls_switch: dict[int, Node] = field(default_factory=dict)
    name: str = ""
    meta: dict = field(default_factory=dict)
    layout: LinkLayout | None = field(default=None, compare=False, repr=False)
    derived: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def own_layout(self) -> LinkLayout | None:
        """:attr:`layout` when it describes this topology's graph, else None."""
        layout = self.layout
        return layout if layout is not None and layout.graph is self.graph else None

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def __enter__(self) -> Topology:
        """``with build_topology(...) as topo:``: released (:meth:`release`) when the block
        ends, however it ends (a command's topology, used by nothing after it)."""
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Empty this topology once nothing will use it again (its graph, its derived views).

        A networkx graph holds reference cycles (it caches views of itself that point back
        at it), so a graph merely dropped waits for a full pass of the cyclic garbage
        collector, which a process holding a large task graph makes seldom: a sweep worker
        piled up a 1,024-GPU fat-tree's 4,500 attribute dicts (3.5 MB) a point, 1.7 GB over
        1,000 points. Emptied, its nodes and edges go at once by reference counting."""
        forget = getattr(self.router, "forget_links", None)
        if forget is not None and self.own_layout is not None:
            forget()  # the builder's router: its recorded ids, the link table it last used
        self.derived.clear()
        self.layout = None
        self.graph.clear()

    def path(self, src: Node, dst: Node, key: int = 0) -> Path:
        return self.router.path(src, dst, key)
