"""What the collective runner keeps and hands to the flow network: a routed phase
(:class:`Geometry`), the budgets routed shapes and plans are kept within across runs, the
copies' device rows as keys, each class's tail latency, and the chain of a collective's
phases on the network. Split from :mod:`simulator.engine.collective`, which routes."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from simulator.engine.kept import KeptWithin
from simulator.engine.links import FlowClass
from simulator.engine.network import FlowNetwork


@dataclass(frozen=True, eq=False)
class Geometry:
    """A routed phase: one flow class per transfer (or per merged kind of transfer), whose
    ``bytes_`` is its share of the collective's size (bytes x steps / size); the run scales
    it by the size. ``latency`` (s, each transfer's path) and ``class_of`` (each transfer's
    class) give the classes' tails again under another protocol's step latency: lists, or
    arrays for a phase classed all at once (:meth:`CollectiveRunner._merged_at_once`)."""

    classes: list[FlowClass]
    latency: list[float] | np.ndarray = field(default_factory=list, repr=False)
    class_of: list[int] | np.ndarray = field(default_factory=list, repr=False)
    # whether each transfer crosses hosts (NCCL's per-step floor differs across them)
    crosses: list[bool] | np.ndarray = field(default_factory=list, repr=False)


UNEVEN_COPIES = "a collective's copies must have as many members as its group"
# bytes of the arrays of the routed shapes a RoutedShapes keeps: a 16K-GPU Llama 3 step's
# 192 shapes hold 16 MB, a 1,024-rank data-parallel tree with its 7 copies 2.3 MB a phase
ROUTED_SHAPES_BYTES = 256 * 2**20
# transfers of the collective plans a KeptPlans keeps (a transfer: a tuple of about 80 bytes)
PLANNED_TRANSFERS = 1_000_000


class RoutedShapes(KeptWithin):
    """Routed collective shapes (key -> list of :class:`Geometry`) within ``budget`` bytes of
    their arrays and of the copies' devices in their keys (arrays and keys an entry shares
    with another counted for each: an upper bound), the least recently used dropped first.
    Runs that share one (a network model's) find the shapes their layout routed before; a
    run keeps its own in hand (``CollectiveRunner._here``), so one dropped mid-run is not
    routed again by it."""

    def __init__(self, budget: int = ROUTED_SHAPES_BYTES):
        super().__init__(budget, shape_bytes)


class KeptPlans(KeptWithin):
    """Collective plans (and a group's bandwidths) kept for later runs on a network model,
    within ``budget`` transfers (a plan counts its transfers, anything else 1): a 1,024-rank
    data-parallel tree is 8K transfers, a 16K-GPU Llama 3 step's 100 plans 5K in all."""

    def __init__(self, budget: int = PLANNED_TRANSFERS):
        super().__init__(budget, transfers_in)


def transfers_in(key, value) -> int:
    """Transfers in a kept plan's phases (1 for a value that is no plan)."""
    phases = getattr(value, "phases", None)
    return 1 if phases is None else max(1, sum(len(p.transfers) for p in phases))


def shape_bytes(key, geometry: list[Geometry]) -> int:
    """Bytes of a kept shape of a run's copies: its arrays (:func:`geometry_bytes`) and the
    devices' bytes its key holds (the key: ``(shape, size)`` or ``((shape, size), floor)``,
    the shape's fourth item ``((rows, bytes), orbits, tracked)``: see
    :meth:`CollectiveRunner.geometry`)."""
    shape = key[0][0] if len(key[0]) == 2 else key[0]
    return geometry_bytes(geometry) + len(shape[3][0][1])


def geometry_bytes(geometry: list[Geometry]) -> int:
    """Bytes of the arrays a routed shape holds (its classes' links, counts and reduced
    forms; its transfers' latencies and classes when arrays)."""
    total = 0
    for g in geometry:
        for c in g.classes:
            for part in (c.links, c.counts, *(c.rating or ()), *(c.symmetric or ())):
                total += getattr(part, "nbytes", 0)
        total += sum(getattr(a, "nbytes", 0) for a in (g.latency, g.class_of, g.crosses))
    return total


def devices_key(group: Sequence[int], copies: Sequence[Sequence[int]]) -> tuple:
    """The devices of a collective's group and copies as a hashable key: the shape and the
    bytes of their rows (:func:`device_rows`; 8,191 pipeline pairs in microseconds)."""
    rows = device_rows(group, copies)
    return rows.shape, rows.tobytes()


def device_rows(group: Sequence[int], copies: Sequence[Sequence[int]]) -> np.ndarray:
    """The group and its copies as rows of devices (copy x position, the group first): a
    :class:`~simulator.plan.grid.RankGroups`' array as it is (a stage's 8,191 pipeline
    pairs), other copies through one flat iterator, in C."""
    width = len(group)
    array = getattr(copies, "array", None)
    if array is None:
        if any(len(c) != width for c in copies):
            raise ValueError(UNEVEN_COPIES)
        flat = itertools.chain.from_iterable(copies)
        array = np.fromiter(flat, np.int64, width * len(copies)).reshape(-1, width)
    elif len(copies) and array.shape[1] != width:
        raise ValueError(UNEVEN_COPIES)
    return np.concatenate([np.array([group], np.int64), array.reshape(-1, width)])


def delayed_phase(geometry: list[Geometry], base_latency_s: float) -> list[FlowClass] | None:
    """The classes of a routed collective that :meth:`CollectiveRunner.run_routed` submits in
    one delayed submit (one phase after a base latency, > 0 s), else None: a caller that
    keeps them may submit them itself (the executor, once per collective)."""
    return geometry[0].classes if base_latency_s > 0 and len(geometry) == 1 else None


def class_tails(latency: list[float], phase, class_of: list[int], n_classes: int) -> list[float]:
    """Each class's tail (s): the latency its steps pay after its bytes, the most of its
    transfers'. A ring's chunk pays each hop's latency in turn (the mean: Phase.ring); a
    phase's fast hops pay its least latency, the rest each transfer's own."""
    if phase.ring:
        latency = [sum(latency) / len(latency)] * len(latency)
    slow_hops = phase.latency_count - phase.fast_hops
    fast = phase.fast_hops * min(latency) if phase.fast_hops else 0.0
    tails: list[float | None] = [None] * n_classes
    for lat, k in zip(latency, class_of, strict=True):
        tail = slow_hops * lat + fast
        tails[k] = tail if tails[k] is None else max(tails[k], tail)
    return tails


def class_tails_at_once(
    latency: np.ndarray, phase, class_of: np.ndarray, n_classes: int
) -> list[float]:
    """:func:`class_tails` over arrays (a phase that is no ring): the same products and sums
    element-wise, each class's most by ``np.maximum.at``."""
    slow_hops = phase.latency_count - phase.fast_hops
    fast = phase.fast_hops * float(latency.min()) if phase.fast_hops else 0.0
    tails = np.full(n_classes, -np.inf)
    np.maximum.at(tails, class_of, slow_hops * latency + fast)
    return tails.tolist()


def segment_sums(values: np.ndarray, lengths: np.ndarray) -> list[float]:
    """``float(values[a:b].sum())`` for the consecutive segments of ``lengths``, summing each
    distinct segment (by its bytes) once, as its own 1-D array."""
    out = np.empty(lengths.size)
    start = np.cumsum(lengths) - lengths
    for n in np.unique(lengths).tolist():
        sel = np.flatnonzero(lengths == n)
        rows = np.ascontiguousarray(values[start[sel][:, None] + np.arange(n)])
        keys = rows.view(np.dtype((np.void, 8 * n))).ravel() if n else np.zeros(sel.size, "V1")
        distinct, first, which = np.unique(keys, return_index=True, return_inverse=True)
        out[sel] = np.array([float(rows[i].sum()) for i in first.tolist()])[which.ravel()]
    return out.tolist()


def copies_per_link(
    ids: np.ndarray, shares: np.ndarray, n_links: int
) -> tuple[np.ndarray, np.ndarray]:
    """The links ``ids`` name (ascending) and the sum of the ``shares`` on each, added in
    route order by ``np.bincount`` either way: over a sorted unique for few entries, over
    every link of the topology (no sort) for many."""
    if ids.size * 16 < n_links:
        links, which = np.unique(ids, return_inverse=True)
        return links, np.bincount(which, weights=shares)
    crossed = np.zeros(n_links, dtype=bool)
    crossed[ids] = True
    links = np.flatnonzero(crossed)
    return links, np.bincount(ids, weights=shares, minlength=n_links)[links]


def run_phase(
    network: FlowNetwork,
    geometry: list[Geometry],
    i: int,
    scale: float,
    on_done: Callable[[], None],
) -> None:
    """Submit phase ``i`` of ``geometry`` (the next one when it ends, ``on_done`` after the
    last). A module function rather than a closure that names itself: such a closure is a
    reference cycle per collective, freed only by the cyclic collector (100 MB of peak memory
    in a 760K-task run)."""
    if i == len(geometry):
        on_done()
        return
    if i + 1 == len(geometry):  # the last phase: its end is the collective's
        network.submit(geometry[i].classes, on_done, scale)
        return
    network.submit(
        geometry[i].classes, partial(run_phase, network, geometry, i + 1, scale, on_done), scale
    )
