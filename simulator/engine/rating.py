"""Max-min fair rates of the flow groups of a component (:class:`Rating`), and the shortcuts
that spare a water-filling, each giving the rates a fresh one would to the last bit:

- a run's own rates by the set of (key, classes in flight) rated (a ring's phases, an
  all-reduce issued again);
- the rates earlier runs on the same link table found for the same groups in the same order
  (:class:`~simulator.engine.rating_memory.RatingMemory`);
- each key's rates alone on its links (a collective inside a node that meets no other);
- the classes' entries (links, counts) concatenated once per key and classes in flight;
- small components water-filled in plain Python, large ones with numpy, over one link per
  orbit of equivalent GPUs when every class is symmetric (:mod:`simulator.engine.orbits`).
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from simulator.engine.flow_groups import FlowGroup
from simulator.engine.maxmin import max_min_rates_lists, max_min_rates_segments
from simulator.engine.rating_memory import RatingMemory

# Entries (flow x link) up to which a component is water-filled in plain Python; above it
# numpy's per-call overhead is paid back (benchmarks/bench_maxmin.py: equal near 64-128
# entries on random instances; RESULTS.md).
SMALL_COMPONENT = 96


class Rating:
    """Rates over links of ``capacity`` (B/s each), with a run's caches and, when given, the
    ``memory`` of earlier runs; counts its fillings and reuses in ``stats`` (a
    :class:`~simulator.engine.network_stats.NetworkStats`)."""

    def __init__(
        self, capacity: np.ndarray, memory: RatingMemory | None, stats, shortcuts: bool = True
    ):
        self.capacity = capacity
        self.memory = memory if shortcuts else None
        self.stats = stats
        # False: the reference mode, every water-filling afresh over every link of every
        # class (no cache, no reduced entries, no orbits)
        self.shortcuts = shortcuts
        # scratch for the water-filling of large components (see max_min_rates_segments),
        # made at the first one
        self._scratch: tuple[np.ndarray, np.ndarray] | None = None
        self._rate_cache: dict[frozenset, dict] = {}
        self.alone: dict[int, list[float]] = {}  # key -> rates of its classes, alone
        # (key, signature) -> a group's live classes' entries: links, counts, per-class sizes
        self._entries: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def rates_alone(self, g: FlowGroup) -> list[float]:
        """:meth:`rates` of ``g`` alone on its links, every class in flight: remembered per
        key (a key's classes name their links for good)."""
        if g.key <= 0 or not self.shortcuts:
            return self.rates([g])[0]
        rate = self.alone.get(g.key)
        if rate is None:
            rate = self.alone[g.key] = self.rates([g])[0]
        else:
            self.stats.cache_hits += 1
        return rate

    def rates(self, groups: list[FlowGroup]) -> list[list[float]]:
        """Max-min fair rates of every class of ``groups`` (0 for classes already through)."""
        if not self.shortcuts:
            self.stats.rerates += 1
            return self._fill_in_full(groups)
        key = None
        items = [(g.key, g.signature()) for g in groups]
        if all(g.key > 0 for g in groups):
            key = frozenset(items)
            if len(key) == len(items):  # a pattern twice at once: rate it afresh
                cached = self._rate_cache.get(key)
                if cached is not None:
                    self.stats.cache_hits += 1
                    return [cached[item] for item in items]
            else:
                key = None
        self.stats.rerates += 1
        ordered = tuple(items) if key is not None and self.memory is not None else None
        if ordered is not None:  # filled in this order by an earlier run
            found = self.memory.rates.get(ordered)
            if found is not None:
                rated, symmetric = found
                self.stats.symmetric_fillings += symmetric
                self._rate_cache[key] = rated
                return [rated[item] for item in items]
        out, symmetric = self._fill(groups)
        if key is not None:
            rated = self._rate_cache[key] = dict(zip(items, out, strict=True))
            if ordered is not None:
                for rates in out:  # shared by the runs after: none may change them
                    if isinstance(rates, np.ndarray):
                        rates.flags.writeable = False
                self.memory.rates[ordered] = (rated, symmetric)
        return out

    def _fill(self, groups: list[FlowGroup]) -> tuple[list, bool]:
        """The water-filling itself: each group's per-class rates (0 for classes already
        through), and whether one link per orbit stood for its orbit."""
        symmetric = False
        live = [g.live() for g in groups]
        chosen = [g.classes[k] for g, ks in zip(groups, live, strict=True) for k in ks]
        parts = [self._group_entries(g, ks) for g, ks in zip(groups, live, strict=True)]
        if sum(p[1].size for p in parts) <= SMALL_COMPONENT:
            flat = max_min_rates_lists(
                [c.link_list for c in chosen], [c.count_list for c in chosen], self.capacity
            )
        else:  # entries in class order, as the concatenated classes would give them
            if self._scratch is None:
                n = len(self.capacity)
                self._scratch = (np.zeros(n, dtype=bool), np.empty(n, dtype=np.intp))
            if all(c.symmetric is not None for c in chosen):  # one link per orbit will do
                parts = [
                    self._group_entries(g, ks, True) for g, ks in zip(groups, live, strict=True)
                ]
                self.stats.symmetric_fillings += 1
                symmetric = True
            flat = max_min_rates_segments(
                np.concatenate([p[2] for p in parts]),
                np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts]),
                self.capacity,
                self._scratch,
            ).tolist()
        return _per_group(groups, live, flat), symmetric

    def _fill_in_full(self, groups: list[FlowGroup]) -> list:
        """:meth:`_fill` in the reference mode: over every link of every live class, as
        the flow classes name them (``links``, ``counts``), with numpy."""
        live = [g.live() for g in groups]
        chosen = [g.classes[k] for g, ks in zip(groups, live, strict=True) for k in ks]
        flat = []
        if chosen:
            scratch = (np.zeros(len(self.capacity), bool), np.empty(len(self.capacity), np.intp))
            flat = max_min_rates_segments(
                np.array([c.links.size for c in chosen]),
                np.concatenate([c.links for c in chosen]),
                np.concatenate([c.counts for c in chosen]),
                self.capacity,
                scratch,
            ).tolist()
        return _per_group(groups, live, flat)

    def _group_entries(self, g: FlowGroup, live: list[int], symmetric: bool = False):
        """(links, counts, entries per class) of ``g``'s classes ``live``, concatenated, from
        their ``rating`` (or ``symmetric``); remembered per (key, signature) for keys that
        name their classes (a component of a dozen 128-class rings would otherwise
        concatenate 1,500 small arrays per water-filling)."""
        key = (g.key, g.signature(), symmetric) if g.key > 0 else None
        found = self._entries.get(key) if key is not None else None
        if found is None:
            which = attrgetter("symmetric" if symmetric else "rating")
            ratings = [which(g.classes[k]) for k in live]
            found = (
                np.concatenate([r[0] for r in ratings]),
                np.concatenate([r[1] for r in ratings]),
                np.array([r[0].size for r in ratings]),
            )
            if key is not None:
                self._entries[key] = found
        return found


def _per_group(groups: list[FlowGroup], live: list[list[int]], flat: list[float]) -> list:
    """``flat`` (the live classes' rates, group after group) as each group's rates per class,
    0 for its classes already through (an array for a vector group)."""
    out, i = [], 0
    for g, ks in zip(groups, live, strict=True):
        rates = [0.0] * len(g.classes)
        for k in ks:
            rates[k] = flat[i]
            i += 1
        out.append(np.array(rates) if g.vector else rates)
    return out
