"""Flow-level network inside a SimPy environment: max-min fair sharing, re-rated on change.

Flows are submitted in batches (one phase of a collective). A flow holds its links from
submission until its bytes are through; its ``tail_s`` (the latency its steps pay) is added
after, without holding bandwidth. Whenever a flow starts or ends, every active flow is re-rated
max-min fairly over link capacities (line rate x payload efficiency). Rates for a set of active
flow patterns seen before are reused: a ring's phases, or the same all-reduce issued again,
cost one water-filling.

The event loop keeps one pending SimPy timeout (the next completion), guarded by a generation
number so that a re-rating simply supersedes it; no process per flow.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

from simulator.engine.maxmin import max_min_rates

_EPS = 1e-12


class LinkTable:
    """A topology's directed links as arrays: capacity (B/s), latency (s), index by (u, v)."""

    def __init__(self, graph: nx.DiGraph):
        edges = list(graph.edges(data=True))
        self.edges = [(u, v) for u, v, _ in edges]
        self.index = {e: i for i, e in enumerate(self.edges)}
        self.bandwidth = np.array([d["bandwidth"] for _, _, d in edges], dtype=float)
        self.efficiency = np.array([d.get("efficiency", 1.0) for _, _, d in edges], dtype=float)
        self.latency = np.array([d.get("latency", 0.0) for _, _, d in edges], dtype=float)
        self.kind = [d.get("kind", "") for _, _, d in edges]
        self.capacity = self.bandwidth * self.efficiency

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
    ``pattern``: a hashable identity for rate reuse (None: never reuse).
    """

    links: np.ndarray
    counts: np.ndarray
    bytes_: float
    tail_s: float = 0.0
    pattern: Hashable | None = None


@dataclass
class _Batch:
    on_done: Callable[[], None]
    pending: int
    end: float


@dataclass
class _Active:
    cls: FlowClass
    batch: _Batch


@dataclass
class NetworkStats:
    """Counters for benchmarks and tests."""

    rerates: int = 0
    cache_hits: int = 0
    events: int = 0
    link_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # (time s, [(flow class, rate B/s), ...]) from each re-rating on, while links are tracked
    link_samples: list = field(default_factory=list)


class FlowNetwork:
    """Flows over a :class:`LinkTable` in ``env``; ``submit`` a batch, get a callback."""

    def __init__(self, env: simpy.Environment, links: LinkTable, track_links: bool = False):
        self.env = env
        self.track_links = track_links  # bytes per link, load over time (tests, reports)
        self.links = links
        self.active: list[_Active] = []
        # per active flow, aligned with ``active``: bytes left, total bytes, rate (B/s)
        self._rem = np.zeros(0)
        self._tot = np.zeros(0)
        self._rate = np.zeros(0)
        self._last = env.now
        self._generation = 0
        self._rate_cache: dict[frozenset, dict] = {}
        self.stats = NetworkStats(link_bytes=np.zeros(len(links)))

    # -- public -------------------------------------------------------------------------
    def submit(
        self, classes: list[FlowClass], on_done: Callable[[], None], scale: float = 1.0
    ) -> None:
        """Start ``classes`` now, each moving ``bytes_ x scale``; call ``on_done`` when every
        copy has moved its bytes and paid its tail."""
        now = self.env.now
        batch = _Batch(on_done, len(classes), now)
        self._advance(now)
        sizes = []
        for cls in classes:
            size = cls.bytes_ * scale
            if size <= 0 or cls.links.size == 0:
                batch.pending -= 1
                batch.end = max(batch.end, now + cls.tail_s)
            else:
                self.active.append(_Active(cls, batch))
                sizes.append(size)
        if sizes:
            self._rem = np.concatenate([self._rem, sizes])
            self._tot = np.concatenate([self._tot, sizes])
        if batch.pending == 0:
            self._finish_batch(batch, now)
        self._rerate_and_schedule(now)

    # -- internals ----------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0 and self._rate.size:
            self._rem -= self._rate * dt
        self._last = now

    def _rates(self) -> np.ndarray:
        patterns = [f.cls.pattern for f in self.active]
        key = None
        if None not in patterns:
            key = frozenset(patterns)
            if len(key) == len(patterns):  # a pattern twice at once: rate it afresh
                cached = self._rate_cache.get(key)
                if cached is not None:
                    self.stats.cache_hits += 1
                    return np.fromiter((cached[p] for p in patterns), float, len(patterns))
            else:
                key = None
        self.stats.rerates += 1
        sizes = [f.cls.links.size for f in self.active]
        flow_idx = np.repeat(np.arange(len(sizes)), sizes)
        link_idx = np.concatenate([f.cls.links for f in self.active])
        counts = np.concatenate([f.cls.counts for f in self.active])
        rates = max_min_rates(flow_idx, link_idx, counts, len(self.active), self.links.capacity)
        if key is not None:
            self._rate_cache[key] = dict(zip(patterns, rates.tolist(), strict=True))
        return rates

    def _rerate_and_schedule(self, now: float) -> None:
        self._generation += 1
        if not self.active:
            self._rate = np.zeros(0)
            if self.track_links:
                self.stats.link_samples.append((now, []))
            return
        self._rate = self._rates()
        next_dt = float(np.min(self._rem / self._rate))
        if self.track_links:  # class references and rates: link loads are derived later
            self.stats.link_samples.append(
                (now, [(f.cls, r) for f, r in zip(self.active, self._rate.tolist(), strict=True)])
            )
        gen = self._generation
        event = self.env.timeout(max(next_dt, 0.0))
        event.callbacks.append(lambda _ev: self._on_completion(gen))

    def _on_completion(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later re-rating
        self.stats.events += 1
        now = self.env.now
        self._advance(now)
        done = (self._rem <= _EPS * self._tot + 1e-9) | (self._rem / self._rate <= _EPS * now)
        for k in np.nonzero(done)[0].tolist():
            f = self.active[k]
            if self.track_links:
                np.add.at(self.stats.link_bytes, f.cls.links, f.cls.counts * self._tot[k])
            f.batch.pending -= 1
            f.batch.end = max(f.batch.end, now + f.cls.tail_s)
            if f.batch.pending == 0:
                self._finish_batch(f.batch, now)
        keep = ~done
        self.active = [f for f, k in zip(self.active, keep.tolist(), strict=True) if k]
        self._rem, self._tot = self._rem[keep], self._tot[keep]
        self._rerate_and_schedule(now)

    def _finish_batch(self, batch: _Batch, now: float) -> None:
        # Always through an event, never re-entrantly: on_done may submit the next phase.
        self.env.timeout(max(batch.end - now, 0.0)).callbacks.append(lambda _ev: batch.on_done())
