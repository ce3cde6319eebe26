"""Everything measured from a Trace: each analysis a function from records to numbers or a
DataFrame (Holistic Trace Analysis' habit).

Definitions (per simulated rank, then averaged over ranks; T = step time):

- step_time_s: the end of the last task, or for ZB-H2 (which drops the optimizer's
  synchronisation, so steps overlap by the pipeline ramp) the longest stage span;
- bubble_fraction: time the rank neither computes nor communicates, / T;
- exposed_comm_fraction: time it communicates while not computing, / T;
- overlap_fraction: communication time hidden under compute / all communication time;
- mfu: model FLOPs per step (6 x params x tokens + attention, no recompute) /
  (T x GPUs x peak); hfu: FLOPs executed (with recompute) / (T x peak) per GPU;
- utilisation per stream kind: busy time / T.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def union_length(intervals: np.ndarray) -> float:
    """Total length (s) covered by ``[start, end]`` rows."""
    if len(intervals) == 0:
        return 0.0
    iv = intervals[np.argsort(intervals[:, 0])]
    total, cur_s, cur_e = 0.0, iv[0, 0], iv[0, 1]
    for s, e in iv[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length covered by both interval sets."""
    return (
        union_length(a) + union_length(b) - union_length(np.vstack([a, b]))
        if len(a) and len(b)
        else 0.0
    )


def rank_breakdown(
    frame: pd.DataFrame, span: dict[int, tuple[float, float]] | None = None
) -> pd.DataFrame:
    """Per rank: window, compute, communication, overlap, exposed comm and idle (seconds)."""
    rows = []
    for rank, f in frame.groupby("rank"):
        start, end = span[rank] if span else (0.0, f["end_s"].max())
        comp = f[(f["kind"] == "compute") & (f["end_s"] > f["start_s"])]
        comm = f[(f["kind"] == "comm") & (f["end_s"] > f["start_s"])]
        c = comp[["start_s", "end_s"]].to_numpy()
        m = comm[["start_s", "end_s"]].to_numpy()
        t_comp, t_comm = union_length(c), union_length(m)
        both = intersection_length(c, m)
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
                "flops": f["flops"].sum(),
            }
        )
    return pd.DataFrame(rows)


def stream_utilisation(frame: pd.DataFrame, step_time: float) -> dict[str, float]:
    """Mean busy fraction of each stream kind over the simulated ranks."""
    out = {}
    n = frame["rank"].nunique()
    for stream, f in frame.groupby("stream"):
        busy = sum(union_length(g[["start_s", "end_s"]].to_numpy()) for _, g in f.groupby("rank"))
        out[stream] = busy / (n * step_time) if step_time > 0 else 0.0
    return out


def memory_timeline(
    events: list[tuple[int, float, float]], static: dict[int, float]
) -> pd.DataFrame:
    """Memory in use per rank over time (bytes): the static state (parameters, gradients,
    optimizer) from time 0, then every allocation and release. Columns: rank, time_s, bytes,
    static_bytes."""
    start = pd.DataFrame({"rank": list(static), "time_s": 0.0, "delta": 0.0})
    ev = pd.concat(
        [start, pd.DataFrame(events, columns=["rank", "time_s", "delta"])], ignore_index=True
    )
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
) -> pd.DataFrame:
    """Load / capacity over time of the ``top`` links that carried the most bytes.

    ``samples`` are (time s, [(flow class, rate B/s), ...]) taken at each re-rating; loads hold
    until the next sample. Returns columns link, start_s, end_s, utilisation.
    """
    busiest = [int(i) for i in np.argsort(-link_bytes)[:top] if link_bytes[i] > 0]
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
