"""Flow-level network inside a SimPy environment: max-min fair sharing, re-rated on change.

Flows are submitted in batches (one phase of a collective). A flow holds its links from
submission until its bytes are through; its ``tail_s`` (the latency its steps pay) is added
after, without holding bandwidth.

The flows of one batch are kept together (a group: lists of bytes left and rates).
Whenever flows start or end, only the groups that share links with them, directly or through
other groups (their connected component in the link-sharing graph), are re-rated max-min
fairly over link capacities (line rate x payload efficiency): max-min fair rates of disjoint
components are independent, so the other groups keep their rates and their finish times.
Rates for a component whose set of flow patterns was seen before are reused: a ring's phases,
or the same all-reduce issued again, cost one water-filling; and the runs after on the same
links find the fillings earlier runs did (:class:`RatingMemory`). Small components are
water-filled in plain Python, large ones with numpy (:mod:`simulator.engine.maxmin`).

Each group's next finish time sits in a heap (stale entries are skipped); the event loop keeps
one pending call for the earliest (:meth:`~simulator.engine.clock.Clock.call_in`), guarded by a
generation number so that an earlier finish supersedes it; no process per flow. A batch alone
on its links whose classes all end together (a tensor-parallel all-reduce inside a node) runs
*lone* instead: off the heap, its end on a timer of its own, until a flow joins its links
(:meth:`FlowNetwork._rate_alone`, :meth:`FlowNetwork.submit_later`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from heapq import heappop
from operator import attrgetter, truediv

import networkx as nx
import numpy as np
import simpy

from simulator.engine.clock import caller
from simulator.engine.kept import KeptWithin
from simulator.engine.maxmin import max_min_rates_lists, max_min_rates_segments

_EPS = 1e-12
_amin = np.minimum.reduce
_by_seq = attrgetter("seq")
# Entries (flow x link) up to which a component is water-filled in plain Python; above it
# numpy's per-call overhead is paid back (benchmarks/bench_maxmin.py: equal near 64-128
# entries on random instances; RESULTS.md).
SMALL_COMPONENT = 96
# Classes from which a group keeps bytes left and rates as numpy arrays, not lists: the
# 128-class data-parallel rings of the 405B step are advanced 110K times (12M class updates);
# the element-wise float operations are the same either way, so the bits are too.
VECTOR_CLASSES = 64
# Classes' patterns and water-fillings' rated classes a RatingMemory keeps (an entry counts
# its classes, and its groups): a few MB at most (a rate is a float; a pattern a small tuple).
RATED_CLASSES = 500_000
# Bytes of the links each key's classes cross (a link-sharing graph's nodes) a RatingMemory
# keeps: the 96 keys of a 16K-GPU Llama 3 step hold about 20 MB.
CROSSED_BYTES = 64 << 20


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
    (a :class:`RatingMemory` reuses rates across runs by it);
    ``rating``: the (links, counts) the water-filling needs, when fewer: links that every
    class crosses all or none of, with equal counts and capacities, share one entry (see
    :meth:`~simulator.engine.collective.CollectiveRunner._same_links`).
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


class _Batch:
    """A submitted batch: its callback, classes still moving bytes, and when its last tail
    ends (s)."""

    __slots__ = ("on_done", "pending", "end")

    def __init__(self, on_done: Callable[[], None], pending: int, end: float):
        self.on_done = on_done
        self.pending = pending
        self.end = end


class _Group:
    """The flow classes of one batch, in flight: bytes left ``rem`` as of time ``t``, rates
    (B/s; 0 once a class is through), and the group's next ``finish`` time (s).

    Plain lists, not arrays: most batches hold 1-8 classes, where numpy's per-call overhead
    costs more than the arithmetic (the same IEEE operations either way); from
    ``VECTOR_CLASSES`` classes on (``vector``), ``rem``, ``tot`` and ``rate`` are arrays.

    ``key`` (a small int) names the group's classes: the same for a phase issued again when
    every class has a pattern (then rates may be reused), fresh otherwise (see
    :meth:`FlowNetwork._key`).
    """

    __slots__ = (
        "batch", "classes", "key", "seq", "version", "active", "alive", "n_alive",
        "rem", "tot", "rate", "t", "finish", "tail", "vector", "lone", "later",
    )  # fmt: skip

    def __init__(
        self,
        batch: _Batch,
        classes: list[FlowClass],
        sizes: list[float],
        seq: int,
        key: int,
        now: float,
        tail: float,
    ):
        self.batch = batch
        self.tail = tail
        self.classes = classes
        self.key = key
        self.seq = seq
        self.version = 0
        self.active = True
        n = len(classes)
        self.alive = [True] * n
        self.n_alive = n
        self.vector = n >= VECTOR_CLASSES
        if self.vector:
            self.rem = np.array(sizes, dtype=float)
            self.tot = self.rem.copy()
            self.rate = np.zeros(n)
        else:
            self.rem = sizes
            self.tot = sizes  # never changed in place: advance makes a new rem
            self.rate = [0.0] * n
        self.t = now
        self.finish = math.inf
        self.lone = False  # ends on its own timer, off the heap (FlowNetwork._rate_alone)
        self.later = None  # (classes, on_done, scale) while a lone group waits to start

    def restart(
        self, on_done: Callable[[], None], classes: list[FlowClass], sizes: list[float],
        seq: int, now: float, tail: float,
    ) -> None:  # fmt: skip
        """This group, ended lone and untouched (its key, classes' links and ``alive`` as
        made), as ``_Group`` would make it for a new batch of the same key: the same
        patterns, but the batch's own sizes (another scale) and tail (another protocol's
        latency floor) (FlowNetwork.submit_later)."""
        batch = self.batch
        batch.on_done, batch.pending, batch.end = on_done, len(classes), now
        self.classes, self.tail, self.seq, self.t = classes, tail, seq, now
        self.active, self.n_alive = True, len(classes)
        if self.vector:
            self.rem = np.array(sizes, dtype=float)
            self.tot = self.rem.copy()
        else:
            self.rem = self.tot = sizes

    def live(self) -> list[int]:
        """Indices of the classes still in flight."""
        return [k for k, a in enumerate(self.alive) if a]

    def signature(self):
        """Which of its classes are still in flight, as a hashable (None: all)."""
        return None if self.n_alive == len(self.classes) else tuple(self.alive)

    def advance(self, now: float) -> None:
        """Move ``rem`` to ``now`` at the current rates."""
        dt = now - self.t
        if dt:
            if self.vector:
                self.rem = self.rem - self.rate * dt
            else:
                self.rem = [r - q * dt for r, q in zip(self.rem, self.rate)]  # noqa: B905
        self.t = now


class RatingMemory:
    """Water-fillings' rates kept for the runs after on one link table (a
    :class:`~simulator.engine.simulate.NetworkModel`'s): the later runs of a layout (a sweep's
    points, failure trials) rate the components they meet again without water-filling them.

    A water-filling's rates are a function of its classes' links, counts, ratings and
    symmetric forms, of the links' capacities, and, in the last bit, of the order of its
    groups (weights are added and used bandwidth taken away class by class). A class's
    pattern names it for good (a routed shape's classes are made once and kept:
    :mod:`simulator.engine.collective`), so ``rates`` maps the groups of a filling *in order*
    (key, which classes in flight) to each one's rates and whether the filling was
    symmetric: what a fresh run filling those groups in that order finds. (A run's own cache
    is keyed by the set: a run meets a set in its first order first, whatever ran before.)
    ``keys`` gives batches of patterns the same key in every run (a run keeps the ones it met
    in hand, so one dropped from here mid-run keeps its key in that run); ``crossed`` maps a
    key to the links its classes cross (ascending), what the link-sharing graph is built
    from. Entries found are made the newest (:meth:`KeptWithin.get`), so the budgets drop
    what is not used. A run counts a filling it finds here as done (``NetworkStats.rerates``,
    ``symmetric_fillings``), as a fresh run would: its counters do not depend on the runs
    before."""

    def __init__(
        self, links: LinkTable, budget: int = RATED_CLASSES, crossed_bytes: int = CROSSED_BYTES
    ):
        self.links = links
        self.counter = itertools.count(1)
        self.keys: dict = KeptWithin(budget, lambda patterns, key: len(patterns))
        self.rates: dict = KeptWithin(budget, _rated_classes)
        self.crossed: dict = KeptWithin(crossed_bytes, lambda key, links: links.nbytes)


def _rated_classes(items: tuple, found: tuple) -> int:
    """The size of a :class:`RatingMemory` ``rates`` entry: its groups and their classes."""
    return len(items) + sum(len(rates) for rates in found[0].values())


@dataclass
class NetworkStats:
    """Counters for benchmarks and tests."""

    rerates: int = 0
    cache_hits: int = 0
    symmetric_fillings: int = 0  # water-fillings over one link per orbit (engine/orbits.py)
    link_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # (time s, [(flow class, rate B/s), ...]) from each re-rating on, while links are tracked
    link_samples: list = field(default_factory=list)


def _union(ids: np.ndarray, n_links: int) -> np.ndarray:
    """The distinct link ids of ``ids``, ascending: by sorting when few, by marking them
    among the topology's ``n_links`` when many (a 1,024-copy ring crosses 100K links)."""
    if ids.size * 16 < n_links:
        return np.unique(ids)
    crossed = np.zeros(n_links, dtype=bool)
    crossed[ids] = True
    return np.flatnonzero(crossed)


def _overflow(rem: float, rate: float, now: float) -> ValueError:
    return ValueError(
        f"simulated time overflows: a flow of {rem:.3g} B at {rate:.3g} B/s does not finish in "
        f"finite time (at t = {now:.6g} s); check the topology's link bandwidths and efficiencies"
    )


def _latency_overflow(end: float) -> ValueError:
    return ValueError(
        f"simulated time overflows: a transfer's latency ends at t = {end!r} s; "
        "check the topology's link latencies"
    )


class FlowNetwork:
    """Flows over a :class:`LinkTable` in ``env``; ``submit`` a batch, get a callback."""

    def __init__(
        self,
        env: simpy.Environment,
        links: LinkTable,
        track_links: bool = False,
        memory: RatingMemory | None = None,
    ):
        self.env = env
        # call_in(delay s, fn, *args): fn(*args) that much later, the clock's delayed call
        # without an event object (Clock.call_in), for this network and its collectives
        self.call_in = caller(env)
        self.track_links = track_links  # bytes per link, load over time (tests, reports)
        self.links = links
        self._capacity = links.capacity
        # scratch for the water-filling of large components (see max_min_rates_segments),
        # made at the first one
        self._work: tuple[np.ndarray, np.ndarray] | None = None
        # The keys on each link, interned: link -> id of its key set (0: none yet), the sets,
        # and (set id, key) -> the id of that set with the key added. Links fall into a few
        # sets per key, so registering a key costs a few set unions, not one per link.
        self._link_set = np.zeros(len(links), dtype=np.int64)
        self._key_sets: list[frozenset] = [frozenset()]
        self._set_plus: dict[tuple[int, int], int] = {}
        self._groups_of: dict = {}  # key -> its groups in flight
        # The link-sharing graph between group keys, built once per key seen, as bit masks:
        # each key registered gets a bit (its position in ``_key_at``); ``_near_bits[key]``
        # has the bits of the keys that share links with it, its own included (equal to its
        # own bit: it shares links with none); ``_flying`` the bits of the keys in flight.
        self._bit: dict = {}
        self._key_at: list = []
        self._near_bits: dict = {}
        self._flying = 0
        self._heap: list[tuple[float, int, int, _Group]] = []  # (finish, seq, version, group)
        self._seq = 0
        self._generation = 0
        self._wake = math.nan  # finish time the pending timeout is for
        self._rate_cache: dict[frozenset, dict] = {}
        self._alone: dict[int, list[float]] = {}  # key -> rates of its classes, alone
        # (id(classes), scale) -> [classes, key, sizes, longest tail, (s alone, all classes
        # through together) or None] of a batch whose classes all move bytes
        self._sized: dict[tuple[int, float], list] = {}
        self._pattern_keys: dict[tuple, int] = {}  # patterns of a batch -> its key
        self._described: dict[int, tuple[list, tuple]] = {}  # id(list) -> (list, _describe)
        # (key, signature) -> a group's live classes' entries: links, counts, per-class sizes
        self._entries: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # rates and keys of earlier runs on these links (RatingMemory), or None
        self._memory = memory if memory is not None and memory.links is links else None
        # > 0: rates reusable; < 0: a batch without patterns
        self._keys = self._memory.counter if self._memory is not None else itertools.count(1)
        self._lone_seen = False  # some group ran lone (see _rate_alone)
        # key -> a group that ended lone, untouched, kept for the key's next lone run
        # (submit_later), which gives it its batch's sizes and tails
        self._spare: dict[int, _Group] = {}
        self.stats = NetworkStats(link_bytes=np.zeros(len(links)))

    # -- public -------------------------------------------------------------------------
    def submit(
        self, classes: list[FlowClass], on_done: Callable[[], None], scale: float = 1.0
    ) -> None:
        """Start ``classes`` now, each moving ``bytes_ x scale``; call ``on_done`` when every
        copy has moved its bytes and paid its tail."""
        now = self.env.now
        batch = _Batch(on_done, len(classes), now)
        sized = self._sized.get((id(classes), scale))
        if sized is not None and sized[0] is classes:  # the usual case: submitted before
            key, sizes, tail = sized[1], sized[2], sized[3]
            moving = classes
        else:
            key, bytes_, tail = self._describe(classes)
            sizes = [b * scale for b in bytes_] if key is not None else []
            if sizes and min(sizes) > 0:  # every class moves bytes
                moving = classes
                # sizes is shared by the batch's groups: no group changes it in place
                sized = self._sized[(id(classes), scale)] = [classes, key, sizes, tail, None]
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
        group = _Group(batch, moving, sizes, self._seq, key, now, tail)
        if key not in self._bit:
            self._register(group)
        in_flight = self._groups_of.get(key)
        if in_flight is not None:
            in_flight.append(group)
        else:
            self._groups_of[key] = [group]
            self._flying |= self._bit[key]
            alone = self._near_bits[key] == self._bit[key]
            if alone and not group.vector and not self.track_links:
                # alone on its links (a collective inside one node): its component is itself
                self._rate_alone(group, now, sized)
                return
        self._rerate(self._component([key]), now)

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

    def _register(self, group: _Group) -> None:
        """Add ``group``'s key to the link-sharing graph (once per key and run)."""
        key = group.key
        memory = self._memory if key > 0 else None
        links = memory.crossed.get(key) if memory is not None else None
        if links is None:
            links = _union(np.concatenate([c.links for c in group.classes]), len(self._link_set))
            if memory is not None:
                links.flags.writeable = False  # shared by the runs after
                memory.crossed[key] = links
        sets = self._link_set[links]
        near = {key}
        # the distinct sets among them, without sorting every link
        remap = np.zeros(len(self._key_sets), dtype=np.int64)
        for sid in np.flatnonzero(np.bincount(sets, minlength=remap.size)).tolist():
            shared = self._key_sets[sid]
            near |= shared
            plus = self._set_plus.get((sid, key))
            if plus is None:
                plus = self._set_plus[(sid, key)] = len(self._key_sets)
                self._key_sets.append(shared | {key})
            remap[sid] = plus
        self._link_set[links] = remap[sets]
        bit = self._bit[key] = 1 << len(self._key_at)
        self._key_at.append(key)
        near_bits, bits = self._near_bits, bit
        for other in near:
            if other != key:
                near_bits[other] |= bit
                bits |= self._bit[other]
        near_bits[key] = bits

    def _component(self, keys: list) -> list[_Group]:
        """The groups in flight that share links with ``keys``' groups, directly or through
        other groups in flight, in submission order."""
        groups_of = self._groups_of
        if len(keys) == 1 and self._near_bits[keys[0]] == self._bit[keys[0]]:
            # a key that shares links only with itself (a collective inside one node): its
            # groups in flight, already in submission order
            return list(groups_of.get(keys[0], ()))
        # breadth first over bit masks, a level at a time: the keys in flight next to the
        # level before, not reached yet (the 405B step's 44,623 walks, 15 groups in the large
        # ones: half the time of a walk over sets, which tested each neighbour in Python)
        near_bits, key_at, flying = self._near_bits, self._key_at, self._flying
        level = 0
        for key in keys:
            level |= near_bits[key]
        level &= flying
        reached = 0
        while level:
            reached |= level
            beyond = 0
            while level:
                low = level & -level
                beyond |= near_bits[key_at[low.bit_length() - 1]]
                level ^= low
            level = beyond & flying & ~reached
        found: list[_Group] = []
        while reached:
            low = reached & -reached
            found += groups_of[key_at[low.bit_length() - 1]]
            reached ^= low
        found.sort(key=_by_seq)
        return found

    def _rates(self, groups: list[_Group]) -> list[list[float]]:
        """Max-min fair rates of every class of ``groups`` (0 for classes already through)."""
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
        ordered = tuple(items) if key is not None and self._memory is not None else None
        if ordered is not None:  # filled in this order by an earlier run
            found = self._memory.rates.get(ordered)
            if found is not None:
                rated, symmetric = found
                self.stats.symmetric_fillings += symmetric
                self._rate_cache[key] = rated
                return [rated[item] for item in items]
        symmetric = False
        live = [g.live() for g in groups]
        chosen = [g.classes[k] for g, ks in zip(groups, live, strict=True) for k in ks]
        parts = [self._group_entries(g, ks) for g, ks in zip(groups, live, strict=True)]
        if sum(p[1].size for p in parts) <= SMALL_COMPONENT:
            flat = max_min_rates_lists(
                [c.link_list for c in chosen], [c.count_list for c in chosen], self._capacity
            )
        else:  # entries in class order, as the concatenated classes would give them
            if self._work is None:
                n = len(self._capacity)
                self._work = (np.zeros(n, dtype=bool), np.empty(n, dtype=np.intp))
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
                self._capacity,
                self._work,
            ).tolist()
        out, i = [], 0
        for g, ks in zip(groups, live, strict=True):
            rates = [0.0] * len(g.classes)
            for k in ks:
                rates[k] = flat[i]
                i += 1
            out.append(np.array(rates) if g.vector else rates)
        if key is not None:
            rated = self._rate_cache[key] = dict(zip(items, out, strict=True))
            if ordered is not None:
                for rates in out:  # shared by the runs after: none may change them
                    if isinstance(rates, np.ndarray):
                        rates.flags.writeable = False
                self._memory.rates[ordered] = (rated, symmetric)
        return out

    def _group_entries(self, g: _Group, live: list[int], symmetric: bool = False):
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

    def _rerate(self, groups: list[_Group], now: float) -> None:
        """Bring ``groups`` (a union of components) to ``now`` and give them fresh rates; a
        group on the heap whose rates stay the same keeps its state and finish (a quarter of
        them in a GPT-3 175B step: a flow that ends frees its bottleneck's sharers, not the
        rest). A group off the heap (just submitted, or lone until now) has an infinite
        ``finish`` and is always rated and pushed."""
        if self._lone_seen:
            groups = self._drop_through(groups, now)
        if groups:
            heap = self._heap
            for g, rate in zip(groups, self._rates(groups), strict=True):
                if g.finish != math.inf and (
                    rate is g.rate or (np.array_equal(rate, g.rate) if g.vector else rate == g.rate)
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
                    raise _overflow(g.rem[k], g.rate[k], now)
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

    def _rate_alone(self, g: _Group, now: float, sized: list | None) -> None:
        """:meth:`_rerate` of a component that is ``g`` alone, just submitted (every class
        in flight, none advanced): its rates remembered per key, as :meth:`_rates` does, and
        the time its bytes take per batch and scale (``sized``, from :meth:`submit`).

        A group that is its whole batch (``sized``) and whose classes all take equally long
        (no class ends first, leaving the others more bandwidth) then runs *lone*: off the
        heap, its end on a timer of its own (:meth:`_lone_end`), the batch's callback at its
        finish plus its tail, with none of the wake and completion work of a shared group. If a
        group that shares its links arrives before that, :meth:`_rerate` takes it back among the
        rest (advanced, rated anew, on the heap: its timer is superseded), or, when its bytes
        are already through, lets the timer end it (:meth:`_drop_through`). Most collectives
        inside a node (tensor-parallel all-reduces) never meet another group."""
        if g.key > 0:
            rate = self._alone.get(g.key)
            if rate is None:
                rate = self._alone[g.key] = self._rates([g])[0]
            else:
                self.stats.cache_hits += 1
        else:
            rate, sized = self._rates([g])[0], None
        timing = sized[4] if sized is not None else None
        if timing is None:
            if min(rate) > 0:
                times = list(map(truediv, g.rem, rate))
                timing = (min(times), max(times) == min(times))
            else:
                timing = (math.inf, False)
            if sized is not None:
                sized[4] = timing  # the same rates and sizes each time
        left, together = timing
        g.rate = rate
        g.finish = now + left
        if not math.isfinite(g.finish):
            k = min(g.live(), key=lambda k: g.rate[k])
            raise _overflow(g.rem[k], g.rate[k], now)
        if together and sized is not None:  # every class through at once: nothing to re-rate
            if not math.isfinite(g.finish + g.tail):
                raise _latency_overflow(g.finish + g.tail)
            self._go_lone(g, 0.0, left)
            return
        g.version += 1
        heapq.heappush(self._heap, (g.finish, g.seq, g.version, g))
        self._schedule(now)

    def submit_later(
        self, delay: float, classes: list[FlowClass], on_done: Callable[[], None], scale: float
    ) -> None:
        """:meth:`submit` ``delay`` s from now (a collective's base latency first).

        A batch that ran lone before (:meth:`_rate_alone`: it is its whole batch, its classes
        end together) and whose links nothing else is on or has been since is made lone now,
        starting ``delay`` s ahead, its end on one timer: one event where a plain delayed
        submit takes two. Should a group that shares its links arrive before it starts,
        :meth:`_drop_through` withdraws it and submits it at its start after all, as the
        plain delayed submit would have."""
        sized = self._sized.get((id(classes), scale))
        timing = sized[4] if sized is not None and sized[0] is classes else None
        key = sized[1] if timing is not None else 0
        if (
            timing is None
            or not timing[1]
            or key <= 0
            or key in self._groups_of
            or self._near_bits.get(key, 0) != self._bit.get(key)
            or self.track_links
        ):
            self.call_in(delay, self.submit, classes, on_done, scale)
            return
        start = self.env.now + delay
        left = timing[0]
        self._seq += 1
        g = self._spare.pop(key, None)
        if g is None:
            g = _Group(
                _Batch(on_done, len(classes), start),
                classes, sized[2], self._seq, key, start, sized[3],
            )  # fmt: skip
        else:  # the key's last lone group
            g.restart(on_done, classes, sized[2], self._seq, start, sized[3])
        self._groups_of[key] = [g]
        self._flying |= self._bit[key]
        g.rate = self._alone[key]
        self.stats.cache_hits += 1
        g.finish = start + left
        g.later = (classes, on_done, scale)
        self._go_lone(g, delay, left)

    def _go_lone(self, g: _Group, delay: float, left: float) -> None:
        """Run ``g`` lone: its batch ends on a timer ``delay + left`` s (its start, its bytes)
        plus its tail from now, unless it is taken back first (``version``)."""
        g.version += 1
        g.lone = self._lone_seen = True
        self.call_in(delay + left + g.tail, self._lone_end, g, g.version)

    def _lone_end(self, g: _Group, version: int) -> None:
        """A lone group's bytes and tail are through (unless it was taken back since,
        ``version``): end its batch."""
        if g.version != version:
            return  # rated among others since: it ends through the heap
        if g.active:
            self._retire(g)
        batch = g.batch
        batch.pending = 0
        g.n_alive = 0
        on_done, batch.on_done = batch.on_done, None
        if g.lone and self._near_bits[g.key] == self._bit[g.key]:
            # never taken back (alive, rates as made), on links no other key crosses: for the
            # key's next lone run (submit_later, which reuses no other)
            g.later = None
            self._spare[g.key] = g
        on_done()

    def _retire(self, g: _Group) -> None:
        """Take ``g`` out of the groups in flight."""
        g.active = False
        groups = self._groups_of[g.key]
        groups.remove(g)
        if not groups:
            del self._groups_of[g.key]
            self._flying &= ~self._bit[g.key]

    def _drop_through(self, groups: list[_Group], now: float) -> list[_Group]:
        """``groups`` less the lone ones whose bytes are through at ``now`` (their timers end
        them) or that have not started (:meth:`submit_later`: submitted at their start
        instead); the lone ones still moving bytes are lone no longer."""
        limit = now * (1 + _EPS)
        kept = []
        for g in groups:
            if g.lone:
                g.lone = False
                if g.later is not None and g.t > now:  # not started yet: start it as planned
                    self._retire(g)
                    g.version += 1  # its timer is void
                    classes, on_done, scale = g.later
                    self.call_in(g.t - now, self.submit, classes, on_done, scale)
                    continue
                g.later = None
                if g.finish <= limit:
                    self._retire(g)
                    continue
                g.finish = math.inf  # off the heap: _rerate must rate it and push it there
            kept.append(g)
        return kept

    def _top(self) -> _Group | None:
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
        if len(due) == 1 and not self.track_links:
            key = due[0].key
            if key not in self._groups_of and self._near_bits[key] == self._bit[key]:
                self._schedule(now)  # its component is empty now: nothing to re-rate
                return
        self._rerate(self._component([g.key for g in due]), now)

    def _complete(self, g: _Group, now: float) -> None:
        """End the classes of ``g`` whose bytes are through at ``now`` (to rounding)."""
        cut = _EPS * now
        if not g.vector and g.n_alive == len(g.alive) and not self.track_links:
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
        if g.n_alive == len(done) and all(done) and not self.track_links:
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

    def _finish_batch(self, batch: _Batch, now: float) -> None:
        if not math.isfinite(batch.end):
            raise _latency_overflow(batch.end)
        # Always through an event, never re-entrantly: on_done may submit the next phase.
        self.call_in(max(batch.end - now, 0.0), batch.on_done)
