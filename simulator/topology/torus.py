"""TPU slices: 2D (v5e) and 3D (v4, v5p) tori of chips joined by ICI links.

Chip ``(x, y, z)`` is device ``x + X (y + Y z)``. Each chip links to its neighbours along each
dimension, with wraparound links closing every ring when ``wraparound`` (a full torus; a
dimension of size 2 has a single neighbour). Routing is dimension-order (x, then y, then z),
each dimension the shorter way round; a tie at half the ring is broken by ECMP hash.

>>> topo = torus_topology((4, 4), 45e9)
>>> topo.graph.number_of_edges()  # 16 chips x 4 neighbours
64
>>> len(topo.path(0, 15))  # (0,0) -> (3,3): one wraparound hop in each dimension
2
"""

from __future__ import annotations

import networkx as nx

from simulator.topology.graph import LinkRecorder, Node, Path, Topology, ecmp_hash


def _coords(d: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in shape:
        out.append(d % n)
        d //= n
    return out


def _index(c: list[int], shape: tuple[int, ...]) -> int:
    d, mul = 0, 1
    for x, n in zip(c, shape, strict=True):
        d += x * mul
        mul *= n
    return d


def torus_topology(
    shape: tuple[int, ...],
    link_bandwidth: float,
    latency: float = 1e-6,
    efficiency: float = 1.0,
    wraparound: bool = True,
    name: str = "",
) -> Topology:
    """A torus (or mesh, without wraparound) of ``prod(shape)`` chips.

    ``link_bandwidth`` (B/s) is one ICI link's rate per direction, ``latency`` (s) per hop.
    """
    shape = tuple(shape)
    g = nx.DiGraph(name=name or "torus " + "x".join(map(str, shape)))
    n = 1
    for s in shape:
        n *= s
    links = LinkRecorder(g)
    for d in range(n):
        g.add_node(d, kind="tpu", coords=tuple(_coords(d, shape)))
    for d in range(n):
        c = _coords(d, shape)
        for dim, size in enumerate(shape):
            if size == 1:
                continue
            if c[dim] + 1 < size or (wraparound and size > 2):
                nb = list(c)
                nb[dim] = (c[dim] + 1) % size
                links.add(d, _index(nb, shape), link_bandwidth, latency, "ici", efficiency)
    host_of = {d: d for d in range(n)}  # every chip is its own scale-up "host"
    return Topology(
        graph=g,
        devices=list(range(n)),
        host_of=host_of,
        router=TorusRouter(shape, wraparound),
        name=g.graph["name"],
        meta={"kind": "torus", "shape": shape, "wraparound": wraparound},
        layout=links.layout(),
    )


class TorusRouter:
    """Dimension-order routing, the shorter way round each ring."""

    def __init__(self, shape: tuple[int, ...], wraparound: bool):
        self.shape = shape
        self.wraparound = wraparound

    def path(self, src: Node, dst: Node, key: int = 0) -> Path:
        if src == dst:
            return []
        here = _coords(int(src), self.shape)
        goal = _coords(int(dst), self.shape)
        out: Path = []
        for dim, size in enumerate(self.shape):
            fwd = (goal[dim] - here[dim]) % size
            if fwd == 0:
                continue
            back = size - fwd
            if not self.wraparound or size <= 2:
                step, count = (
                    (1, goal[dim] - here[dim])
                    if goal[dim] > here[dim]
                    else (-1, here[dim] - goal[dim])
                )
            elif fwd < back or (fwd == back and ecmp_hash(src, dst, key + dim) % 2 == 0):
                step, count = 1, fwd
            else:
                step, count = -1, back
            for _ in range(count):
                a = _index(here, self.shape)
                here[dim] = (here[dim] + step) % size
                out.append((a, _index(here, self.shape)))
        return out
