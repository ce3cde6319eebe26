"""Generic shortest-path routing with deterministic ECMP among equal-cost paths.

Used for graphs without a structural router (small or irregular ones). At each hop the flow
picks, by :func:`ecmp_hash`, one of the neighbours that is one hop closer to the destination,
so different flows spread over equal-cost paths and the same flow always takes the same one.
"""

from __future__ import annotations

import networkx as nx

from simulator.topology.graph import Node, Path, ecmp_hash


class ShortestPathRouter:
    """Hop-count shortest paths with per-flow ECMP; distance maps cached per destination."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self._reverse = graph.reverse(copy=False)
        self._dist: dict[Node, dict[Node, int]] = {}

    def _distances(self, dst: Node) -> dict[Node, int]:
        d = self._dist.get(dst)
        if d is None:
            d = nx.single_source_shortest_path_length(self._reverse, dst)
            self._dist[dst] = d
        return d

    def path(self, src: Node, dst: Node, key: int = 0) -> Path:
        if src == dst:
            return []
        dist = self._distances(dst)
        if src not in dist:
            raise ValueError(f"no path from {src!r} to {dst!r}")
        out: Path = []
        here, hop = src, 0
        while here != dst:
            closer = [n for n in self.graph.successors(here) if dist.get(n) == dist[here] - 1]
            nxt = (
                closer[ecmp_hash(src, dst, key + hop) % len(closer)]
                if len(closer) > 1
                else closer[0]
            )
            out.append((here, nxt))
            here, hop = nxt, hop + 1
        return out
