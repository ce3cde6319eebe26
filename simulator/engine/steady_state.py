"""Run a pipeline's steady state for two periods and repeat it, instead of simulating it all.

Between warm-up and cool-down a 1F1B-like pipeline repeats itself: every ``q`` micro-batches
(:meth:`~simulator.pipelines.PipelineSchedule.steady_period`) each stage runs the same passes
with the same communication and contention, ``delta`` seconds later. GPT-3 175B on 1,024 A100
(192 micro-batches, interleaved with ``q`` = 16) spends 128 of its micro-batches there.

So the step is simulated with ``head + 2q + tail`` micro-batches
(:func:`~simulator.pipelines.steady_state`): the warm-up's, two periods, the cool-down's.
:func:`find_repeat` checks that the second period is the first shifted: every task that
starts while the second period runs (from its first task's start to its last's) has a twin
``q`` micro-batches earlier (or, for the first ``q`` micro-batches' late passes, later) -
same rank, stream, name, layer, FLOPs and bytes - that started and ended exactly ``delta``
before (after) it (to :data:`TOLERANCE_S`; the engine's own rounding
between periods is about 1e-12 s), and no task outside the micro-batches (gradient
synchronisation, optimizer) runs then. :func:`expand` then writes the full step's trace and
memory events: what came before the window as it is, the second period ``k`` more times each
``delta`` later, and everything after the window (the cool-down, the gradient synchronisation,
the optimizer) ``k delta`` later, micro-batches renumbered. The engine is deterministic, so a
state that repeats once repeats every time; the tests compare the result with the full
simulation record by record. When the check fails the caller tries a longer warm-up or a
longer period (``stages.steady._steady_state_retries``), and simulates the full step when
those fail too.

A host stream (the CPU's launches, tasks of kind "host") runs up to a launch queue ahead of
its GPU, across periods and into the step's end: the check is the GPU's tasks' (the caller
leaves the host's out), and the launches are expanded by their micro-batch like the rest.
Where the host sets the pace the GPU repeats only if it does; where the GPU does, the
launches' places in the expanded trace are the reduced step's pattern (their count and
durations are exact, their utilisation within a percent).

What is not repeated: ``NetworkStats`` (the engine's own counters, ``network_rerates``, count
the work actually done) and per-link loads, which is why a run that tracks links is
simulated in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.pipelines import SteadyState

TOLERANCE_S = 1e-9  # a twin's start and end may differ from +delta by this much (s)
SHIFT_DIFFERS = "the second period is not the first shifted"
"""How :func:`find_repeat`'s reason starts when every task has its twin but not at one
shift: the state may repeat over more micro-batches (``stages.steady._steady_state_retries``)."""
_KEY = ["rank", "stream", "kind", "phase", "name", "layer", "microbatch"]
_TEXT = ["stream", "kind", "phase", "name"]


@dataclass(frozen=True)
class Repeat:
    """A verified repetition: micro-batches ``[first, first + period)`` (the second simulated
    period) repeat every ``delta_s`` s; tasks starting before ``window_s[0]`` stay, tasks
    starting after ``window_s[1]`` move ``copies x delta_s`` later."""

    first: int
    period: int
    delta_s: float
    window_s: tuple[float, float]
    copies: int


def find_repeat(frame: pd.DataFrame, steady: SteadyState, full: int) -> Repeat | str:
    """The repetition in ``frame``, the trace of a step run with ``steady.reduced``
    micro-batches, that stretches it to ``full``; or why there is none (a str)."""
    h, q = steady.head, steady.period
    mb = frame["microbatch"].to_numpy()
    start = frame["start_s"].to_numpy()
    end = frame["end_s"].to_numpy()
    second = (mb >= h + q) & (mb < h + 2 * q)
    if not second.any():
        return "no task of the second period"
    a, b = float(start[second].min()), float(start[second].max())
    outside = mb < 0
    if (outside & (end > a) & (start <= b)).any():
        return "a task outside the micro-batches runs during the steady state"
    if ((mb >= 0) & (mb < h + q) & (start > b)).any():
        return "a warm-up micro-batch's task starts after the second period"
    if ((mb >= h + 2 * q) & (start < a)).any():
        return "a cool-down micro-batch's task starts before the second period"
    tasks = frame.loc[mb >= 0, [*_KEY, "start_s", "end_s", "flops", "bytes"]]
    for col in _TEXT:  # as codes: equal where the text is equal, and cheaper to group and join
        if tasks[col].dtype.kind not in "iu":  # not coded already (Trace.coded_frame)
            tasks[col] = pd.factorize(tasks[col])[0]
    tasks = tasks.sort_values("start_s", kind="stable")
    twins = _twins(tasks, a, b, q)
    if isinstance(twins, str):
        return twins
    d_start, d_end = twins
    d_start, d_end = np.concatenate(d_start), np.concatenate(d_end)
    delta = float(np.median(d_start))
    off = max(np.abs(d_start - delta).max(), np.abs(d_end - delta).max())
    if not off <= TOLERANCE_S:
        return f"{SHIFT_DIFFERS} (off by up to {off:.3g} s)"
    copies, rem = divmod(full - steady.reduced, q)
    if rem or copies < 1:
        return f"{full} micro-batches are not {steady.reduced} plus whole periods of {q}"
    return Repeat(h + q, q, delta, (a, b), copies)


def _twins(tasks: pd.DataFrame, a: float, b: float, q: int) -> tuple[list, list] | str:
    """(start s, end s) differences between each task of ``tasks`` (integer keys, sorted by
    start) starting in ``[a, b]`` and its twin ``q`` micro-batches away (signed so that a
    repeat gives +delta), as lists of arrays; or why some task has no equal twin (a str).

    A task's twin has the same key (rank, stream, kind, phase, name, layer) with the
    micro-batch shifted, and the same occurrence: the same count of earlier-starting tasks
    with its key. Keys are packed into one integer where they fit in 62 bits (the general
    join otherwise): the same pairs, found by sorting instead of a 8-column join."""
    cols = [tasks[c].to_numpy() for c in _KEY]
    if any(col.dtype.kind not in "iu" for col in cols):
        return _twins_joined(tasks, a, b, q)
    start = tasks["start_s"].to_numpy()
    end = tasks["end_s"].to_numpy()
    m = _KEY.index("microbatch")
    key = np.zeros(len(tasks), dtype=np.int64)
    shift, total = 1, 1
    for j, col in enumerate(cols):  # mixed radix, microbatch with room for +-q
        lo, hi = (int(col.min()), int(col.max())) if col.size else (0, 0)
        if j == m:
            lo, hi = lo - q, hi + q
        total *= hi - lo + 1
        if total >= 1 << 62:
            return _twins_joined(tasks, a, b, q)
        key = key * (hi - lo + 1) + (col - lo)
        if j == m:
            shift = 1
        elif j > m:
            shift *= hi - lo + 1
    # occurrence: the rank of each row among the rows of its key, in start order
    order = np.argsort(key, kind="stable")
    k_sorted = key[order]
    first = np.r_[True, k_sorted[1:] != k_sorted[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(key.size), 0))
    occurrence = np.empty(key.size, dtype=np.int64)
    occurrence[order] = np.arange(key.size) - group_start
    n_occ = int(occurrence.max()) + 1 if key.size else 1
    if total * n_occ >= 1 << 62:
        return _twins_joined(tasks, a, b, q)
    full = key * n_occ + occurrence
    by_full = np.argsort(full)
    full_sorted = full[by_full]
    mb = cols[m]
    window = (start >= a) & (start <= b)
    d_start, d_end = [], []
    flops, bytes_ = tasks["flops"].to_numpy(), tasks["bytes"].to_numpy()
    for sign in (1, -1):
        rows = np.flatnonzero(window & ((mb >= q) == (sign == 1)))
        want = full[rows] - sign * q * shift * n_occ
        pos = np.minimum(np.searchsorted(full_sorted, want), max(full.size - 1, 0))
        if rows.size and not np.array_equal(full_sorted[pos], want):
            return "a task in the window has no twin a period away"
        twin = by_full[pos]
        for name, col in (("flops", flops), ("bytes", bytes_)):
            if not np.array_equal(col[rows], col[twin]):
                return f"a task in the window differs from its twin in {name}"
        d_start.append(sign * (start[rows] - start[twin]))
        d_end.append(sign * (end[rows] - end[twin]))
    return d_start, d_end


def _twins_joined(tasks: pd.DataFrame, a: float, b: float, q: int) -> tuple[list, list] | str:
    """:func:`_twins` by a join on the key columns (keys too wide to pack)."""
    tasks = tasks.copy()
    tasks["occurrence"] = tasks.groupby(_KEY, sort=False).cumcount()
    in_window = (tasks["start_s"] >= a) & (tasks["start_s"] <= b)
    window = tasks[in_window]
    # the twin: a period earlier; for the first period's micro-batches (a warm-up's deferred
    # weight gradients), a period later
    d_start, d_end = [], []
    for sign in (1, -1):
        side = window[(window["microbatch"] >= q) == (sign == 1)].copy()
        side["microbatch"] -= sign * q
        pairs = side.merge(
            tasks, on=[*_KEY, "occurrence"], how="left", suffixes=("", "_twin"), validate="1:1"
        )
        if pairs["start_s_twin"].isna().any():
            return "a task in the window has no twin a period away"
        for col in ("flops", "bytes"):
            if not np.array_equal(pairs[col].to_numpy(), pairs[f"{col}_twin"].to_numpy()):
                return f"a task in the window differs from its twin in {col}"
        d_start.append(sign * (pairs["start_s"].to_numpy() - pairs["start_s_twin"].to_numpy()))
        d_end.append(sign * (pairs["end_s"].to_numpy() - pairs["end_s_twin"].to_numpy()))
    return d_start, d_end


def expand(frame: pd.DataFrame, rep: Repeat, columns: list[str] | None = None) -> pd.DataFrame:
    """The full step's trace from the reduced one (rows in the order they end); ``columns``
    of it only, when given (they must include ``start_s``, ``end_s`` and ``microbatch``).

    Built as row numbers into ``frame`` with each row's shift (s) and micro-batch offset,
    taken once: the same rows, values and order as concatenating shifted copies and sorting
    them by end time (stably)."""
    mb = frame["microbatch"].to_numpy()
    start = frame["start_s"].to_numpy()
    end = frame["end_s"].to_numpy()
    lo, hi = rep.first, rep.first + rep.period
    later = (mb >= hi) | ((mb < 0) & (start > rep.window_s[1]))
    period = np.flatnonzero((mb >= lo) & (mb < hi))
    rows = [np.flatnonzero(~later)]
    dts: list[np.ndarray | float] = [0.0]
    dmbs = [0]
    for j in range(1, rep.copies + 1):
        rows.append(period)
        dts.append(j * rep.delta_s)
        dmbs.append(j * rep.period)
    rows.append(np.flatnonzero(later))
    dts.append(rep.copies * rep.delta_s)
    dmbs.append(rep.copies * rep.period)
    # each part's end times as _moved gives them (the same float additions), then the order
    ends = [end[r] + dt if dt else end[r] for r, dt in zip(rows, dts, strict=True)]
    order = np.argsort(np.concatenate(ends), kind="stable")
    which = np.concatenate(rows)[order]
    shift = np.concatenate([np.full(r.size, dt) for r, dt in zip(rows, dts, strict=True)])[order]
    step = np.concatenate([np.full(r.size, d) for r, d in zip(rows, dmbs, strict=True)])[order]
    out = (frame if columns is None else frame[columns]).take(which).reset_index(drop=True)
    moved = shift != 0.0
    out["start_s"] = np.where(moved, start[which] + shift, start[which])
    out["end_s"] = np.where(moved, end[which] + shift, end[which])
    m = mb[which]
    out["microbatch"] = np.where(m >= 0, m + step, m)
    return out


def expand_memory(events: np.ndarray, microbatch: np.ndarray, rep: Repeat) -> np.ndarray:
    """The full step's memory events from the reduced step's: ``events`` an (n, 3) array of
    (rank, time s, bytes delta), ``microbatch`` each event's task's micro-batch (-1: none).
    The events in order,
    those after the window ``copies x delta_s`` later, then the second period's ``copies``
    times, each ``j x delta_s`` later (the same float additions as event by event)."""
    lo, hi = rep.first, rep.first + rep.period
    time = events[:, 1]
    later = (microbatch >= hi) | ((microbatch < 0) & (time > rep.window_s[1]))
    out = events.copy()
    out[later, 1] = time[later] + rep.copies * rep.delta_s
    repeated = events[~later & (microbatch >= lo)]
    parts = [out]
    for j in range(1, rep.copies + 1):
        moved = repeated.copy()
        moved[:, 1] += j * rep.delta_s
        parts.append(moved)
    return np.concatenate(parts)
