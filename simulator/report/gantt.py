"""Gantt charts of a step: one row per (rank, stream), compute coloured by phase and
communication by purpose, idle time as gaps, micro-batch numbers on bars wide enough to hold
them, time in milliseconds.

A 16-stage pipeline stays readable because the default shows one rank per pipeline stage.
Bars narrower than a pixel (pipeline sends of a few microseconds in a step of seconds) are
drawn :data:`MIN_BAR_FRACTION` of the shown span wide so that they stay visible; a time
``window`` zooms into dense charts.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from simulator.report.style import (  # noqa: E402
    PHASE_COLOURS,
    PHASE_LABELS,
    STREAM_COLOURS,
    STREAM_LABELS,
    colour_of,
    stream_rank,
)
from simulator.report.waits import arrows, pacers, slow_pacers, step_waits  # noqa: E402

MIN_LABEL_FRACTION = 0.012  # a bar narrower than this share of the axis gets no number
MIN_BAR_FRACTION = 1 / 1000  # about 1.5 pixels of a 14-inch chart at 130 dpi
# A row with more bars than this is drawn as an image inside an SVG (text and axes stay
# vector): tens of thousands of rectangles make a file browsers open slowly.
RASTERIZE_ABOVE = 2000


def merged_spans(start_ms, end_ms, min_width_ms: float):
    """(starts, widths) in ms of the bars of one colour in one row, each at least
    ``min_width_ms`` wide, with bars that touch or overlap after that widening drawn as one:
    the same pixels, far fewer rectangles (a 16K-GPU step has tens of thousands of sub-pixel
    kernels).

    >>> merged_spans(np.array([0.0, 0.2, 5.0]), np.array([0.1, 0.3, 6.0]), 1.0)
    (array([0., 5.]), array([1.2, 1. ]))
    """
    order = np.argsort(start_ms, kind="stable")
    start = np.asarray(start_ms, dtype=float)[order]
    end = np.maximum(np.asarray(end_ms, dtype=float)[order], start + min_width_ms)
    if len(start) == 0:
        return start, start
    reach = np.maximum.accumulate(end)
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(start)) - 1
    return start[first], reach[last] - start[first]


def default_ranks(frame: pd.DataFrame, stage_of_rank: dict | None) -> list[int]:
    """One rank per pipeline stage (the lowest rank of each), or every rank if unknown; and
    where a stage's ranks were simulated apart (a slow GPU), the one that made the others of
    its stage wait longest at their collectives, if another, beside it."""
    ranks = [int(r) for r in sorted(frame["rank"].unique())]
    if not stage_of_rank:
        return ranks[:16]

    def stage(r: int) -> int:
        return int(stage_of_rank.get(str(r), stage_of_rank.get(r, r)))

    first: dict[int, int] = {}
    for r in ranks:
        first.setdefault(stage(r), r)
    shown = [first[s] for s in sorted(first)]
    if len(ranks) > len(shown):
        held = slow_pacers(frame)
        for s in sorted(first):
            mine = held[held["src_rank"].map(stage) == s]
            if not mine.empty and int(mine.iloc[0]["src_rank"]) not in shown:
                shown.append(int(mine.iloc[0]["src_rank"]))
    return sorted(shown, key=lambda r: (stage(r), r))


def merged_blocks(f: pd.DataFrame) -> pd.DataFrame:
    """Consecutive compute records of one micro-batch's forward (or of its backward: input-
    and weight-gradient interleave layer by layer) joined into one labelled block."""
    f = f.sort_values("start_s")
    family = f["phase"].map(lambda p: "f" if p in ("forward", "recompute") else "b")
    key = (family != family.shift()) | (f["microbatch"] != f["microbatch"].shift())
    group = key.cumsum()
    return f.groupby(group).agg(
        start_s=("start_s", "min"),
        end_s=("end_s", "max"),
        phase=("phase", "first"),
        microbatch=("microbatch", "first"),
    )


def draw_rows(
    ax,
    frame: pd.DataFrame,
    ranks: list[int],
    t_max: float,
    stage_of_rank: dict | None = None,
    window: tuple[float, float] | None = None,
) -> dict[tuple[int, str], int]:
    """Draw the rows of ``ranks`` on ``ax`` (top to bottom), time in ms from 0 to ``t_max`` s
    or over ``window`` = (start, end) s; each (rank, stream) row's height on the axis."""
    t0, t1 = window or (0.0, t_max)
    span = t1 - t0
    min_width_ms = span * MIN_BAR_FRACTION * 1e3
    frame = frame[(frame["end_s"] >= t0) & (frame["start_s"] <= t1)]
    rows = []
    for r in ranks:
        streams = sorted(frame.loc[frame["rank"] == r, "stream"].unique(), key=stream_rank)
        rows += [(r, s) for s in streams]
    labels = []
    for i, (r, stream) in enumerate(rows):
        y = len(rows) - 1 - i
        f = frame[(frame["rank"] == r) & (frame["stream"] == stream)]
        f = f[f["end_s"] > f["start_s"]]
        _draw_bars(ax, f, y, 0.8 if stream == "compute" else 0.55, min_width_ms)
        if stream == "compute" and len(f):
            _label_microbatches(ax, f, y, (t0, t1))
        stage = ""
        if stage_of_rank is not None:
            stage = f" (stage {stage_of_rank.get(str(r), stage_of_rank.get(r, '?'))})"
        labels.append(f"rank {r}{stage} {stream}" if stream == "compute" else stream)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=7)
    ax.set_xlim(t0 * 1e3, t1 * 1e3)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(axis="x", alpha=0.3)
    return {row: len(rows) - 1 - i for i, row in enumerate(rows)}


def draw_waits(ax, frame, ranks, stage_of_rank, window, rows: dict) -> str:
    """Arrows from each pacer to the ranks that waited on it (:mod:`simulator.report.waits`:
    red, a collective's members; grey, a pipeline's neighbours), and a line naming the longest
    total wait ("" when none); waits shorter than a bar's least width get no arrow, but count
    in the totals."""
    t0, t1 = window
    found = step_waits(frame, ranks, stage_of_rank)
    found = found[(found["dst_s"] >= t0) & (found["src_s"] <= t1)]
    wide = found[found["wait_s"] >= (t1 - t0) * MIN_BAR_FRACTION]  # an arrow worth drawing
    for w in arrows(wide).itertuples(index=False):
        src, dst = rows.get((w.src_rank, w.src_stream)), rows.get((w.dst_rank, w.dst_stream))
        if src is None or dst is None:
            continue
        ax.annotate(
            "", xy=(w.dst_s * 1e3, dst), xytext=(w.src_s * 1e3, src),
            arrowprops={
                "arrowstyle": "->", "lw": 0.8, "alpha": 0.8, "shrinkA": 0, "shrinkB": 0,
                "color": "#c0392b" if w.kind == "collective" else "#555555",
            },
        )  # fmt: skip
    if found.empty:
        return ""
    top = pacers(found).iloc[0]
    return (
        f"arrows: who waits on whom; the longest: rank {top.dst_rank} on rank {top.src_rank} "
        f"({top.waits} {top.kind} waits, {top.total_s * 1e3:,.3g} ms)"
    )


def _draw_bars(ax, f: pd.DataFrame, y: float, height: float, min_width_ms: float) -> None:
    """One row's tasks ``f`` as bars at ``y``, coloured by kind, stream and phase; bars
    narrower than ``min_width_ms`` merged with their neighbours."""
    cols = (f[c].to_numpy(dtype=object) for c in ("kind", "stream", "phase"))
    known: dict[tuple, str] = {}  # a few distinct (kind, stream, phase) per row
    colours = [
        known.get(key) or known.setdefault(key, colour_of(*key)) for key in zip(*cols, strict=True)
    ]
    for colour, g in f.groupby(pd.Series(colours, index=f.index, dtype=object)):
        starts, widths = merged_spans(
            g["start_s"].to_numpy() * 1e3, g["end_s"].to_numpy() * 1e3, min_width_ms
        )
        ax.broken_barh(
            list(zip(starts, widths, strict=True)), (y - height / 2, height),
            facecolors=colour, edgecolor="none",
            rasterized=len(starts) > RASTERIZE_ABOVE,
        )  # fmt: skip


def _label_microbatches(ax, f: pd.DataFrame, y: float, window: tuple[float, float]) -> None:
    """Each block of one micro-batch's compute wide enough to read, labelled with its
    number."""
    t0, t1 = window
    span = t1 - t0
    for b in merged_blocks(f[f["microbatch"] >= 0]).itertuples():
        if (min(b.end_s, t1) - max(b.start_s, t0)) / span >= MIN_LABEL_FRACTION:
            mid = (max(b.start_s, t0) + min(b.end_s, t1)) / 2
            ax.text(
                mid * 1e3, y, str(int(b.microbatch)),
                ha="center", va="center", fontsize=6, color="white",
            )  # fmt: skip


def legend_handles(frame: pd.DataFrame) -> list:
    present = set(frame.loc[frame["kind"] == "compute", "phase"].unique())
    phases = [p for p in PHASE_COLOURS if p in present]
    streams = [s for s in STREAM_COLOURS if s in set(frame["stream"].unique())]
    return [Patch(color=PHASE_COLOURS[p], label=PHASE_LABELS[p]) for p in phases] + [
        Patch(color=STREAM_COLOURS[s], label=STREAM_LABELS[s]) for s in streams
    ]


def draw_gantt(
    frame: pd.DataFrame,
    paths: list[str | Path],
    ranks: list[int] | None = None,
    stage_of_rank: dict | None = None,
    title: str = "",
    window: tuple[float, float] | None = None,
) -> list[Path]:
    """Write the Gantt chart of ``frame`` to each of ``paths`` (PNG, SVG, by suffix);
    ``window`` = (start, end) in seconds shows only that part of the step."""
    ranks = ranks or default_ranks(frame, stage_of_rank)
    t_max = float(frame["end_s"].max())
    n_rows = sum(frame.loc[frame["rank"] == r, "stream"].nunique() for r in ranks)
    height = max(2.8, 1.6 + 0.32 * n_rows)
    fig, ax = plt.subplots(figsize=(14, height))
    rows = draw_rows(ax, frame, ranks, t_max, stage_of_rank, window)
    note = draw_waits(ax, frame, ranks, stage_of_rank, window or (0.0, t_max), rows)
    ax.set_xlabel("time (ms)")
    title = title or "one training step"
    if window is not None:
        title += f", {window[0] * 1e3:,.3g} to {window[1] * 1e3:,.3g} ms"
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize=10)
    fig.legend(handles=legend_handles(frame), loc="lower center", ncol=6, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.5 / height, 1, 1))  # room for the legend under the axis
    out = []
    for p in paths:
        fig.savefig(p, dpi=130)
        out.append(Path(p))
    plt.close(fig)
    return out
