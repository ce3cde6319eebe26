"""Flow-level network inside a SimPy environment: max-min fair sharing, re-rated on change.

Flows are submitted in batches (one phase of a collective). A flow holds its links from
submission until its bytes are through; its ``tail_s`` (the latency its steps pay) is added
after, without holding bandwidth.

The flows of one batch are kept together (a group: bytes left and rates,
:mod:`simulator.engine.flow_groups`). Whenever flows start or end, only the groups that share
links with them, directly or through other groups (their connected component in the
link-sharing graph, :mod:`simulator.engine.link_sharing`), are re-rated max-min fairly over
link capacities (line rate x payload efficiency): max-min fair rates of disjoint components
are independent, so the other groups keep their rates and their finish times. The rates come
from :mod:`simulator.engine.rating`, which spares the water-fillings it has done before (in
this run, or in earlier runs on the same links).

Each group's next finish time sits in a heap (stale entries are skipped); the event loop keeps
one pending call for the earliest (:meth:`~simulator.engine.clock.Clock.call_in`), guarded by a
generation number so that an earlier finish supersedes it; no process per flow. A batch alone
on its links whose classes all end together (a tensor-parallel all-reduce inside a node) runs
*lone* instead: off the heap, its end on a timer of its own, until a flow joins its links
(:mod:`simulator.engine.lone_path`).

``shortcuts=False`` is the reference mode: no group runs lone, every group of a component is
re-rated (none keeps its finish because its rates came out the same), every water-filling is
done afresh over every link of every class (:class:`~simulator.engine.rating.Rating` without
its caches, reduced entries and orbits), and the collectives' routes are not folded. It is
slow; it exists so that a test can check that the shortcuts change no result
(tests/properties/test_engine_properties.py).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from heapq import heappop
from operator import attrgetter, truediv

import numpy as np
import simpy

from simulator.engine.clock import caller
from simulator.engine.flow_groups import Batch, FlowGroup
from simulator.engine.link_sharing import LinkSharing
from simulator.engine.links import FlowClass, LinkTable, distinct_links
from simulator.engine.lone_path import LonePath, SizedBatch, latency_overflow, overflow
from simulator.engine.network_stats import NetworkStats
from simulator.engine.rating import Rating
from simulator.engine.rating_memory import RatingMemory

_EPS = 1e-12
_amin = np.minimum.reduce
_by_seq = attrgetter("seq")


class FlowNetwork:
    """Flows over a :class:`LinkTable` in ``env``; ``submit`` a batch, get a callback."""

    def __init__(
        self,
        env: simpy.Environment,
        links: LinkTable,
        track_links: bool = False,
        memory: RatingMemory | None = None,
        shortcuts: bool = True,
    ):
        self.env = env
        # call_in(delay s, fn, *args): fn(*args) that much later, the clock's delayed call
        # without an event object (Clock.call_in), for this network and its collectives
        self.call_in = caller(env)
        self.track_links = track_links  # bytes per link, load over time (tests, reports)
        # False: the reference mode, every shortcut off (module doc); ``fast``: the shortcuts
        # that a run tracking link loads also goes without (lone groups, the common cases)
        self.shortcuts = shortcuts
        self.fast = shortcuts and not track_links
        self.links = links
        self.sharing = LinkSharing(len(links))
        self._groups_of = self.sharing.groups_of  # key -> its groups in flight
        self._heap: list[tuple[float, int, int, FlowGroup]] = []  # (finish, seq, version, group)
        self._seq = 0
        self._generation = 0
        self._wake = math.nan  # finish time the pending timeout is for
        # (id(classes), scale) -> the batch's description, when its classes all move bytes
        self._sized: dict[tuple[int, float], SizedBatch] = {}
        self._pattern_keys: dict[tuple, int] = {}  # patterns of a batch -> its key
        self._described: dict[int, tuple[list, tuple]] = {}  # id(list) -> (list, _describe)
        # rates and keys of earlier runs on these links (RatingMemory), or None
        shared = shortcuts and memory is not None and memory.links is links
        self._memory = memory if shared else None
        # > 0: rates reusable; < 0: a batch without patterns
        self._keys = self._memory.counter if self._memory is not None else itertools.count(1)
        self.lone = LonePath()
        self.stats = NetworkStats(link_bytes=np.zeros(len(links)))
        self.rating = Rating(links.capacity, self._memory, self.stats, shortcuts)

    # -- public -------------------------------------------------------------------------
    def submit(
        self, classes: list[FlowClass], on_done: Callable[[], None], scale: float = 1.0
    ) -> None:
        """Start ``classes`` now, each moving ``bytes_ x scale``; call ``on_done`` when every
        copy has moved its bytes and paid its tail."""
        now = self.env.now
        batch = Batch(on_done, len(classes), now)
        sized = self._sized.get((id(classes), scale))
        if sized is not None and sized.classes is classes:  # the usual case: submitted before
            key, sizes, tail = sized.key, sized.sizes, sized.tail
            moving = classes
        else:
            key, bytes_, tail = self._describe(classes)
            sizes = [b * scale for b in bytes_] if key is not None else []
            if sizes and min(sizes) > 0:  # every class moves bytes
                moving = classes
                sized = self._sized[(id(classes), scale)] = SizedBatch(classes, key, sizes, tail)
            else:
                moving, sized = [], None
        if not moving:
            moving, sizes = [], []
            for cls in classes:
                size = cls.bytes_ * scale
                if size <= 0 or not cls.links.size:
                    batch.pending -= 1
                    batch.end = max(batch.end, now + cls.tail_s)
                else:
                    moving.append(cls)
                    sizes.append(size)
            if batch.pending == 0:
                self._finish_batch(batch, now)
            if not moving:
                return
            key, _, tail = self._describe(moving, remember=False)
        self._seq += 1
        group = FlowGroup(batch, moving, sizes, self._seq, key, now, tail)
        sharing = self.sharing
        if key not in sharing.bit:
            self._register(group)
        if sharing.fly(group) and sharing.alone(key):
            if not group.vector and self.fast:
                # alone on its links (a collective inside one node): its component is itself
                self.lone.rate_alone(self, group, now, sized)
                return
        self._rerate(sharing.component([key]), now)

    def submit_later(
        self, delay: float, classes: list[FlowClass], on_done: Callable[[], None], scale: float
    ) -> None:
        """:meth:`submit` ``delay`` s from now; a batch that ran lone before may run lone
        from its start (:meth:`~simulator.engine.lone_path.LonePath.submit_later`)."""
        self.lone.submit_later(self, delay, classes, on_done, scale)

    # -- internals ----------------------------------------------------------------------
    def _describe(
        self, classes: list[FlowClass], remember: bool = True
    ) -> tuple[int | None, list[float], float]:
        """(key, bytes per class, longest tail s) of a batch's classes; the key is None when
        some class moves nothing (no links or no bytes). Remembered by the list's identity
        (a geometry's phases are submitted again and again)."""
        known = self._described.get(id(classes))
        if known is not None and known[0] is classes:
            return known[1]
        if all(c.links.size and c.bytes_ > 0 for c in classes) and classes:
            out = (self._key(classes), [c.bytes_ for c in classes], max(c.tail_s for c in classes))
        else:
            out = (None, [], 0.0)
        if remember:
            self._described[id(classes)] = (classes, out)
        return out

    def _key(self, classes: list[FlowClass]) -> int:
        """A small int naming ``classes`` by their patterns (a fresh one if some class has
        none); hashing the patterns of a 1,000-transfer phase on every event would cost more
        than the event."""
        patterns = tuple(c.pattern for c in classes)
        if None in patterns:
            return -next(self._keys)
        key = self._pattern_keys.get(patterns)
        if key is None:
            memory = self._memory
            key = memory.keys.get(patterns) if memory is not None else None
            if key is None:
                key = next(self._keys)
                if memory is not None:
                    memory.keys[patterns] = key
            self._pattern_keys[patterns] = key
        return key

    def _register(self, group: FlowGroup) -> None:
        """Add ``group``'s key to the link-sharing graph (once per key and run)."""
        key = group.key
        memory = self._memory if key > 0 else None
        links = memory.crossed.get(key) if memory is not None else None
        if links is None:
            links = distinct_links(
                np.concatenate([c.links for c in group.classes]), len(self.links)
            )
            if memory is not None:
                links.flags.writeable = False  # shared by the runs after
                memory.crossed[key] = links
        self.sharing.add(key, links)

    def _rerate(self, groups: list[FlowGroup], now: float) -> None:
        """Bring ``groups`` (a union of components) to ``now`` and give them fresh rates; a
        group on the heap whose rates stay the same keeps its state and finish (a quarter of
        them in a GPT-3 175B step: a flow that ends frees its bottleneck's sharers, not the
        rest). A group off the heap (just submitted, or lone until now) has an infinite
        ``finish`` and is always rated and pushed."""
        if self.lone.seen:
            groups = self.lone.drop_through(self, groups, now)
        if groups:
            heap = self._heap
            keep = self.shortcuts  # a group whose rates stay the same keeps its finish
            for g, rate in zip(groups, self.rating.rates(groups), strict=True):
                if (
                    keep
                    and g.finish != math.inf
                    and (
                        rate is g.rate
                        or (np.array_equal(rate, g.rate) if g.vector else rate == g.rate)
                    )
                ):
                    continue  # the same rates: the same finish, its heap entry holds
                g.advance(now)
                g.rate = rate
                if g.n_alive != len(rate):
                    live = g.live()
                    ok = min(rate[k] for k in live) > 0
                    left = float(min(g.rem[k] / rate[k] for k in live)) if ok else math.inf
                elif g.vector:  # ndarray.min() is this reduce, behind two Python calls
                    left = float(_amin(g.rem / rate)) if _amin(rate) > 0 else math.inf
                else:  # map: C-speed over a list
                    left = min(map(truediv, g.rem, rate)) if min(rate) > 0 else math.inf
                g.finish = now + left
                if not math.isfinite(g.finish):
                    k = min(g.live(), key=lambda k: g.rate[k])
                    raise overflow(g.rem[k], g.rate[k], now)
                g.version += 1
                heapq.heappush(heap, (g.finish, g.seq, g.version, g))
        if self.track_links:  # class references and rates: link loads are derived later
            self.stats.link_samples.append(
                (
                    now,
                    [
                        (c, r)
                        for gs in self._groups_of.values()
                        for g in gs
                        for c, r, a in zip(g.classes, g.rate, g.alive, strict=True)
                        if a
                    ],
                )
            )
        self._schedule(now)

    def _retire(self, g: FlowGroup) -> None:
        """Take ``g`` out of the groups in flight."""
        g.active = False
        self.sharing.land(g)

    def _top(self) -> FlowGroup | None:
        """The group in flight that finishes first (stale heap entries dropped)."""
        heap = self._heap
        while heap:
            _, _, version, g = heap[0]
            if version == g.version and g.active:
                return g
            heapq.heappop(heap)
        return None

    def _schedule(self, now: float) -> None:
        heap = self._heap
        while heap:  # self._top(), inline
            _, _, version, top = heap[0]
            if version == top.version and top.active:
                break
            heappop(heap)
        else:
            return  # nothing to wait for
        if top.finish == self._wake:
            return  # the pending timeout already is for it
        self._generation += 1
        self._wake = top.finish
        self.call_in(max(top.finish - now, 0.0), self._on_completion, self._generation)

    def _on_completion(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by an earlier finish
        self._wake = math.nan
        now = self.env.now
        due = []
        heap = self._heap
        limit = now * (1 + _EPS)
        while heap:  # self._top(), inline
            _, _, version, g = heap[0]
            if version != g.version or not g.active:
                heappop(heap)
            elif g.finish <= limit:
                heappop(heap)
                due.append(g)
            else:
                break
        if len(due) > 1:
            due.sort(key=_by_seq)
        for g in due:
            self._complete(g, now)
        if len(due) == 1 and self.fast:
            key = due[0].key
            if key not in self._groups_of and self.sharing.alone(key):
                self._schedule(now)  # its component is empty now: nothing to re-rate
                return
        self._rerate(self.sharing.component([g.key for g in due]), now)

    def _complete(self, g: FlowGroup, now: float) -> None:
        """End the classes of ``g`` whose bytes are through at ``now`` (to rounding)."""
        cut = _EPS * now
        if not g.vector and g.n_alive == len(g.alive) and self.fast:
            # the common case first: every class in flight, and all through together
            rem, rate, tot = g.rem, g.rate, g.tot
            dt = now - g.t
            if dt:  # g.advance(now), inline
                g.rem = rem = [r - q * dt for r, q in zip(rem, rate)]  # noqa: B905
            g.t = now
            done = [r <= _EPS * t + 1e-9 or r <= cut * q for r, t, q in zip(rem, tot, rate)]  # noqa: B905
            if all(done):
                batch = g.batch
                batch.pending -= g.n_alive
                batch.end = max(batch.end, now + g.tail)
                g.n_alive = 0
                if batch.pending == 0:
                    self._finish_batch(batch, now)
                self._retire(g)
                return
        g.advance(now)
        if g.vector:
            through = (g.rem <= _EPS * g.tot + 1e-9) | (g.rem <= cut * g.rate)
            if g.n_alive != len(g.alive):
                through &= np.array(g.alive)
            done = through.tolist()
        else:
            done = [
                a and (r <= _EPS * tot + 1e-9 or r <= cut * q)
                for a, r, tot, q in zip(g.alive, g.rem, g.tot, g.rate, strict=True)
            ]
        if not any(done):  # rounding put the wake a hair early: end the first to finish
            done[min(g.live(), key=lambda k: g.rem[k] / g.rate[k])] = True
        batch = g.batch
        if g.n_alive == len(done) and all(done) and self.fast:
            # the common case, a symmetric phase ending at once
            batch.pending -= g.n_alive
            batch.end = max(batch.end, now + g.tail)
            g.n_alive = 0
        else:
            for k, d in enumerate(done):
                if d:
                    cls = g.classes[k]
                    if self.track_links:
                        np.add.at(self.stats.link_bytes, cls.links, cls.counts * g.tot[k])
                    batch.pending -= 1
                    batch.end = max(batch.end, now + cls.tail_s)
                    g.alive[k] = False
                    g.n_alive -= 1
        if batch.pending == 0:
            self._finish_batch(batch, now)
        if g.n_alive == 0:
            self._retire(g)

    def _finish_batch(self, batch: Batch, now: float) -> None:
        if not math.isfinite(batch.end):
            raise latency_overflow(batch.end)
        # Always through an event, never re-entrantly: on_done may submit the next phase.
        self.call_in(max(batch.end - now, 0.0), batch.on_done)
