"""Everything measured from a Trace: each analysis a function from records to numbers or a
DataFrame (Holistic Trace Analysis' habit).

Definitions (per simulated rank, then averaged over ranks; T = step time):

- step_time_s: the end of the last task, or for ZB-H2 (which drops the optimizer's
  synchronisation, so steps overlap by the pipeline ramp) the longest stage span (of its
  GPU's tasks, not its host's launches);
- compute_fraction: time the rank computes, / T;
- bubble_fraction: time the rank neither computes nor communicates before its last task
  (waiting for the pipeline), / T;
- sync_wait_fraction: time after its last task until the step ends (waiting for the slowest
  rank), / T; compute + exposed comm + bubble + sync wait = 1 per rank;
- exposed_comm_fraction: time it communicates while not computing, / T;
- overlap_fraction: communication time hidden under compute / all communication time;
- mfu: model FLOPs per step (6 x params x tokens + attention, no recompute) /
  (T x GPUs x peak); hfu: FLOPs executed (with recompute) / (T x peak) per GPU;
- utilisation per stream kind: busy time / T.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from simulator.plan.memory import device_bytes
from simulator.trace import gpu_rows, rows_array


def union_length(intervals: np.ndarray) -> float:
    """Total length (s) covered by ``[start, end]`` rows (vectorised: sort by start, a new
    merged block begins where a start passes every earlier end)."""
    if len(intervals) == 0:
        return 0.0
    return _union_sorted(intervals[np.argsort(intervals[:, 0], kind="stable")])


def _union_sorted(iv: np.ndarray) -> float:
    """:func:`union_length` of rows already sorted by start (the same blocks whatever the
    order among equal starts: a block ends at the most of its ends)."""
    if len(iv) == 0:
        return 0.0
    starts, ends = iv[:, 0], np.maximum.accumulate(iv[:, 1])
    new_block = np.empty(len(iv), dtype=bool)
    new_block[0] = True
    new_block[1:] = starts[1:] > ends[:-1]
    first = np.flatnonzero(new_block)
    last = np.append(first[1:] - 1, len(iv) - 1)
    return float((ends[last] - starts[first]).sum())


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length covered by both interval sets."""
    return (
        union_length(a) + union_length(b) - union_length(np.vstack([a, b]))
        if len(a) and len(b)
        else 0.0
    )


def _group_order(key: np.ndarray) -> np.ndarray:
    """Stable argsort of integer group keys: a radix sort on 16 bits when they fit (5x
    numpy's merge sort of 64-bit keys over a 315K-row trace), the same order either way."""
    lo = int(key.min()) if key.size else 0
    if key.size and int(key.max()) - lo < 1 << 15:
        key = (key - lo).astype(np.int16)
    return np.argsort(key, kind="stable")


def rank_breakdown(
    frame: pd.DataFrame,
    span: dict[int, tuple[float, float]] | None = None,
    step_end: float | None = None,
) -> pd.DataFrame:
    """Per rank: window, compute, communication, overlap, exposed comm and idle (seconds).

    The window runs to the rank's own last task (or its ``span``); ``sync_wait_s`` is the time
    from there to ``step_end``, when the rank waits for the slowest one to finish the step, so
    compute + exposed comm + idle + sync wait = the step, per rank."""
    rows = []
    # each rank's rows in trace order, as ``groupby("rank")`` gives them, as arrays: taking
    # sub-frames (with the trace's text columns) costs more than the analysis
    ranks = frame["rank"].to_numpy()
    iv = frame[["start_s", "end_s"]].to_numpy()
    flops = frame["flops"].to_numpy()
    kind = frame["kind"]
    live = iv[:, 1] > iv[:, 0]
    is_comp = (kind == "compute").to_numpy() & live
    is_comm = (kind == "comm").to_numpy() & live
    order = _group_order(ranks)
    cut = np.flatnonzero(ranks[order][1:] != ranks[order][:-1]) + 1
    for rows_of in np.split(order, cut) if len(order) else []:
        rank = ranks[rows_of[0]]
        start, end = span[rank] if span else (0.0, iv[rows_of, 1].max())
        # one sort by start of the rank's live intervals; its compute and its communication
        # rows stay sorted (as intersection_length's three sorts would give them)
        busy = rows_of[(is_comp | is_comm)[rows_of]]
        by_start = np.argsort(iv[busy, 0], kind="stable")
        every = iv[busy][by_start]
        comp = is_comp[busy][by_start]
        c, m = every[comp], every[~comp]
        t_comp, t_comm = _union_sorted(c), _union_sorted(m)
        both = t_comp + t_comm - _union_sorted(every) if len(c) and len(m) else 0.0
        window = end - start
        rows.append(
            {
                "rank": rank,
                "window_s": window,
                "compute_s": t_comp,
                "comm_s": t_comm,
                "overlap_s": both,
                "exposed_comm_s": t_comm - both,
                "idle_s": max(window - (t_comp + t_comm - both), 0.0),
                "sync_wait_s": max((step_end or end) - end, 0.0) if not span else 0.0,
                "flops": pd.Series(flops[rows_of]).sum(),
            }
        )
    return pd.DataFrame(rows)


def stream_utilisation(frame: pd.DataFrame, step_time: float) -> dict[str, float]:
    """Mean busy fraction of each stream kind over the simulated ranks."""
    out = {}
    n = frame["rank"].nunique()
    # groups by stream, then rank (both sorted), rows in trace order within each, as
    # ``groupby("stream")`` then ``groupby("rank")`` give them, without taking sub-frames
    code, streams = pd.factorize(frame["stream"], sort=True)
    rank = frame["rank"].to_numpy()
    order = _group_order(
        code * (int(rank.max()) - int(rank.min()) + 1) + rank if len(rank) else rank
    )
    iv = frame[["start_s", "end_s"]].to_numpy()[order]
    code, rank = code[order], rank[order]
    cut = np.flatnonzero((code[1:] != code[:-1]) | (rank[1:] != rank[:-1])) + 1
    bounds = [0, *cut.tolist(), len(order)]
    busy: dict[int, list[float]] = {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if b > a:
            seg = iv[a:b]  # a stream runs one task at a time: in trace order, by start
            chronological = bool((seg[1:, 0] >= seg[:-1, 0]).all())
            length = _union_sorted(seg) if chronological else union_length(seg)
            busy.setdefault(int(code[a]), []).append(length)
    for c, lengths in busy.items():
        out[streams[c]] = sum(lengths) / (n * step_time) if step_time > 0 else 0.0
    return out


def memory_timeline(
    events: list[tuple[int, float, float]], static: dict[int, float]
) -> pd.DataFrame:
    """Memory in use per rank over time (bytes): the static state (parameters, gradients,
    optimizer) from time 0, then every allocation and release. Columns: rank, time_s, bytes,
    static_bytes."""
    start = pd.DataFrame({"rank": list(static), "time_s": 0.0, "delta": 0.0})
    flat = rows_array(events, 3)  # (rank, time, delta) tuples: ranks are exact as floats
    moves = pd.DataFrame(
        {"rank": flat[:, 0].astype(np.int64), "time_s": flat[:, 1], "delta": flat[:, 2]}
    )
    ev = pd.concat([start, moves], ignore_index=True)
    # At equal times, releases before allocations: a buffer freed as the next is taken.
    ev = ev.sort_values(["rank", "time_s", "delta"], kind="stable")
    ev["static_bytes"] = ev["rank"].map(static)
    ev["bytes"] = ev.groupby("rank")["delta"].cumsum() + ev["static_bytes"]
    return ev[["rank", "time_s", "bytes", "static_bytes"]].reset_index(drop=True)


def peak_memory(timeline: pd.DataFrame, static: dict[int, float]) -> dict[int, float]:
    peaks = dict(static)
    for rank, f in timeline.groupby("rank"):
        peaks[rank] = max(peaks.get(rank, 0.0), float(f["bytes"].max()))
    return peaks


def link_utilisation(
    samples: list,
    link_bytes: np.ndarray,
    capacity: np.ndarray,
    names: list[str],
    end_s: float,
    top: int = 8,
    chosen: list[int] | None = None,
) -> pd.DataFrame:
    """Load / capacity over time of the links ``chosen`` (indices), or else of the ``top``
    links that carried the most bytes.

    ``samples`` are (time s, [(flow class, rate B/s), ...]) taken at each re-rating; loads hold
    until the next sample. Returns columns link, start_s, end_s, utilisation.
    """
    if chosen is not None:
        busiest = [i for i in chosen if link_bytes[i] > 0]
    else:  # the most loaded, equal loads by name (not by how the links were numbered)
        loaded = np.flatnonzero(link_bytes > 0)
        if loaded.size > top:
            cut = np.partition(link_bytes[loaded], loaded.size - top)[loaded.size - top]
            loaded = loaded[link_bytes[loaded] >= cut]
        busiest = sorted(loaded.tolist(), key=lambda i: (-link_bytes[i], names[i]))[:top]
    if not samples or not busiest:
        return pd.DataFrame(columns=["link", "start_s", "end_s", "utilisation"])
    weights: dict[int, np.ndarray] = {}  # per class: its copies on each busy link

    def on_busiest(cls) -> np.ndarray:
        w = weights.get(id(cls))
        if w is None:
            w = np.zeros(len(busiest))
            for k, link in enumerate(busiest):
                hit = np.nonzero(cls.links == link)[0]
                if hit.size:
                    w[k] = cls.counts[hit[0]]
            weights[id(cls)] = w
        return w

    times = [t for t, _ in samples] + [end_s]
    rows = []
    for (t, active), t_next in zip(samples, times[1:], strict=True):
        if t_next <= t:
            continue
        load = np.zeros(len(busiest))
        for cls, rate in active:
            load += on_busiest(cls) * rate
        rows += [
            (names[link], t, t_next, load[k] / capacity[link]) for k, link in enumerate(busiest)
        ]
    return pd.DataFrame(rows, columns=["link", "start_s", "end_s", "utilisation"])


@dataclass(frozen=True)
class StepMetrics:
    """The headline numbers of one simulated step, shared by the CLI table, summary.json/.md,
    ``compare``, ``validate``, sweeps and goodput. Times in s, memory in B, fractions of 1."""

    scenario: str | None
    num_gpus: int
    simulated_ranks: int
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    compute_fraction: float  # busy computing (with or without communication beside it)
    bubble_fraction: float  # idle before the rank's last task: waiting on the pipeline
    sync_wait_fraction: float  # idle after it, until the slowest rank ends the step
    exposed_comm_fraction: float
    overlap_fraction: float
    peak_memory_bytes: float
    memory_capacity_bytes: float
    oom: bool
    peak_memory_by_rank: dict[str, float]
    utilisation: dict[str, float]
    stage_of_rank: dict[str, int]
    tasks: int
    network_rerates: int
    busiest_links: dict[str, float] | None = None

    def as_dict(self) -> dict:
        """Plain JSON-ready dict (``busiest_links`` only when links were tracked)."""
        out = asdict(self)
        if out["busiest_links"] is None:
            del out["busiest_links"]
        return out


@dataclass(frozen=True)
class StepFacts:
    """What metrics need to know of the step besides its trace: the model's FLOPs per step,
    the global batch in tokens, the peak FLOP/s and HBM capacity of one GPU, and whether
    consecutive steps overlap (ZB-H2: the step time is the longest stage span)."""

    scenario: str | None
    num_gpus: int
    tokens_per_step: float
    model_flops_per_step: float
    peak_flops_per_s: float
    hbm_bytes: float
    overlapping_steps: bool
    static_memory: dict[int, float]
    stage_of: dict[int, int]
    runtime_bytes: float = 0.0  # per GPU outside the allocator (framework.runtime_bytes)
    allocator_reserve: float = 0.0  # reserved = allocated / (1 - reserve)
    nccl_bytes: dict[int, float] = field(default_factory=dict)  # per rank, outside it too


def step_time(frame: pd.DataFrame, overlapping_steps: bool):
    """(step time s, per-rank windows or None): the end of the last task, or with overlapping
    steps each stage's own span, the longest being the period."""
    if not overlapping_steps:
        return float(frame["end_s"].max()), None
    # a stage's span is its GPU's: its host issues ahead while earlier stages fill the pipe
    gpu = gpu_rows(frame)
    spans = {r: (f["start_s"].min(), f["end_s"].max()) for r, f in gpu.groupby("rank")}
    period = max(e - s for s, e in spans.values())
    return float(period), {r: (s, s + period) for r, (s, _) in spans.items()}


def step_metrics(
    frame: pd.DataFrame,
    memory_events: list[tuple[int, float, float]],
    facts: StepFacts,
    network_rerates: int = 0,
    timeline: pd.DataFrame | None = None,
) -> StepMetrics:
    """Everything :class:`StepMetrics` holds, from the trace and the memory events (or their
    ``timeline``, :func:`memory_timeline`, when the caller built it already)."""
    t, spans = step_time(frame, facts.overlapping_steps)
    parts = rank_breakdown(frame, spans, step_end=t)
    if timeline is None:
        timeline = memory_timeline(memory_events, facts.static_memory)
    outside = facts.runtime_bytes  # the timeline counts live tensors only: add what is not
    nccl = facts.nccl_bytes
    peaks = {
        r: device_bytes(v, outside + nccl.get(r, 0.0), facts.allocator_reserve)
        for r, v in peak_memory(timeline, facts.static_memory).items()
    }
    peak = facts.peak_flops_per_s
    n = facts.num_gpus
    comm = parts["comm_s"].sum()
    return StepMetrics(
        scenario=facts.scenario,
        num_gpus=n,
        simulated_ranks=len(facts.stage_of),
        step_time_s=t,
        tokens_per_s=facts.tokens_per_step / t,
        mfu=facts.model_flops_per_step / (t * n * peak),
        hfu=float((parts["flops"] / (t * peak)).mean()),
        model_tflops_per_gpu=facts.model_flops_per_step / (t * n) / 1e12,
        compute_fraction=float((parts["compute_s"] / t).mean()),
        bubble_fraction=float((parts["idle_s"] / t).mean()),
        sync_wait_fraction=float((parts["sync_wait_s"] / t).mean()),
        exposed_comm_fraction=float((parts["exposed_comm_s"] / t).mean()),
        overlap_fraction=float(parts["overlap_s"].sum() / comm) if comm > 0 else 0.0,
        peak_memory_bytes=max(peaks.values()),
        memory_capacity_bytes=facts.hbm_bytes,
        oom=max(peaks.values()) > facts.hbm_bytes,
        peak_memory_by_rank={str(k): v for k, v in sorted(peaks.items())},
        utilisation=stream_utilisation(frame, t),
        stage_of_rank={str(r): st for r, st in sorted(facts.stage_of.items())},
        tasks=len(frame),
        network_rerates=network_rerates,
    )
