"""A topology's directed links as arrays (:class:`LinkTable`), and the flow classes that cross
them (:class:`FlowClass`): what the flow network (:mod:`simulator.engine.network`) rates."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np


class LinkTable:
    """A topology's directed links as arrays: capacity (B/s), latency (s), index by (u, v).

    Made from a graph, the links are numbered in ``graph.edges`` order; made from a builder's
    :class:`~simulator.topology.graph.LinkLayout` (:meth:`from_layout`), in the order the
    builder added them, and ``layout`` is that layout (routers that numbered their links
    as they built them then look nothing up: ``FatTreeRouter.recorded``). ``index`` ((u, v) ->
    id) is made when first asked for: routers that compute ids need none."""

    layout: object = None

    def __init__(self, graph: nx.DiGraph):
        # One pass over the adjacency dicts, in ``graph.edges`` order: 4x faster than the
        # edge views on the 200K links of a 24K-GPU cluster.
        edges, bandwidth, efficiency, latency = [], [], [], []
        for u, nbrs in graph.adjacency():
            for v, d in nbrs.items():
                edges.append((u, v))
                bandwidth.append(d["bandwidth"])
                efficiency.append(d.get("efficiency", 1.0))
                latency.append(d.get("latency", 0.0))
        self._set(edges, np.array(bandwidth, float), np.array(efficiency, float), latency)

    @classmethod
    def from_layout(cls, layout) -> LinkTable:
        """The links of a builder's ``layout`` (a LinkLayout), in its order: no pass over the
        graph (0.13 s for the 131K links of 16K GPUs)."""
        table = cls.__new__(cls)
        table._set(layout.edges, layout.bandwidth, layout.efficiency, layout.latency)
        table.layout = layout
        return table

    def _set(self, edges, bandwidth, efficiency, latency) -> None:
        self.edges = edges
        self.bandwidth = bandwidth
        self.efficiency = efficiency
        self.latency = np.asarray(latency, dtype=float)
        self.capacity = self.bandwidth * self.efficiency

    @cached_property
    def index(self) -> dict:
        """(u, v) -> link id."""
        return dict(zip(self.edges, range(len(self.edges)), strict=True))

    def __len__(self) -> int:
        return len(self.edges)

    def ids(self, path) -> np.ndarray:
        """Link indices of a path given as (u, v) pairs."""
        return np.fromiter((self.index[e] for e in path), dtype=np.int64, count=len(path))


@dataclass
class FlowClass:
    """One representative flow and its symmetric copies.

    ``links``/``counts``: the links its copies cross and how many copies cross each;
    ``bytes_``: bytes each copy moves; ``tail_s``: latency paid after the bytes;
    ``pattern``: a hashable identity for rate reuse (None: never reuse): it must name the
    same links, counts, rating and symmetric form for good, on every run on a link table
    (a :class:`~simulator.engine.rating_memory.RatingMemory` reuses rates across runs by it);
    ``rating``: the (links, counts) the water-filling needs, when fewer: links that every
    class crosses all or none of, with equal counts and capacities, share one entry (see
    :meth:`~simulator.engine.reduced_rating.ReducedRating.same_links`).
    ``symmetric``: ``rating`` with one link of each orbit of equivalent GPUs' own links
    (:class:`~simulator.engine.orbits.LinkOrbits`), when the class crosses every link of
    each orbit it touches, as often (None otherwise); used when every class of a
    water-filling has it.
    """

    links: np.ndarray
    counts: np.ndarray
    bytes_: float
    tail_s: float = 0.0
    pattern: Hashable | None = None
    rating: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    symmetric: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.rating is None:
            self.rating = (self.links, self.counts)

    # As lists, for the plain-Python water-filling of small components; made when first
    # needed (a 128-class ring of a 16K-GPU job never needs them).
    @cached_property
    def link_list(self) -> list[int]:
        return self.rating[0].tolist()

    @cached_property
    def count_list(self) -> list[float]:
        return self.rating[1].tolist()


def distinct_links(ids: np.ndarray, n_links: int) -> np.ndarray:
    """The distinct link ids of ``ids``, ascending: by sorting when few, by marking them
    among the topology's ``n_links`` when many (a 1,024-copy ring crosses 100K links)."""
    if ids.size * 16 < n_links:
        return np.unique(ids)
    crossed = np.zeros(n_links, dtype=bool)
    crossed[ids] = True
    return np.flatnonzero(crossed)
