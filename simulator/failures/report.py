"""Files of ``trainsim goodput --out DIR``: the job's timeline, the ETTR distribution, the
checkpoint-interval curve (pictures and Parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from simulator.failures.montecarlo import DAY_S, GoodputResult  # noqa: E402

COLOURS = {
    "training": "#4c9f50",
    "checkpoint": "#3b75af",
    "lost": "#ef8636",
    "detection": "#c53a32",
    "waiting": "#8d69b8",
    "restart": "#e9a3c9",
    "maintenance": "#7f7f7f",
}


def split_by_day(timeline: pd.DataFrame) -> pd.DataFrame:
    """Segments cut at midnights: columns day, start_h, end_h (hours into the day), state."""
    rows = []
    for start, end, state in timeline[["start_s", "end_s", "state"]].itertuples(index=False):
        while end > start:
            day = int(start // DAY_S)
            cut = min(end, (day + 1) * DAY_S)
            rows.append((day, (start - day * DAY_S) / 3600, (cut - day * DAY_S) / 3600, state))
            start = cut
    return pd.DataFrame(rows, columns=["day", "start_h", "end_h", "state"])


def draw_timeline(timeline: pd.DataFrame, path: Path, title: str) -> None:
    """One row per day (hours across): training, checkpoints, lost work and downtime."""
    days = split_by_day(timeline)
    n_days = int(days["day"].max()) + 1 if len(days) else 1
    fig, ax = plt.subplots(figsize=(11, 1.5 + 0.16 * n_days))
    for state, colour in COLOURS.items():
        part = days[days["state"] == state]
        for day, group in part.groupby("day"):
            spans = list(zip(group["start_h"], group["end_h"] - group["start_h"], strict=True))
            ax.broken_barh(spans, (day - 0.4, 0.8), facecolors=colour, linewidth=0)
        ax.bar(0, 0, color=colour, label=state)
    ax.set_xlim(0, 24)
    ax.set_ylim(n_days - 0.5, -0.5)
    ax.set_xticks(range(0, 25, 2))
    ax.set_xlabel("hour of day")
    ax.set_ylabel("day")
    ax.set_title(title)
    ax.legend(
        ncol=len(COLOURS),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.6 / n_days - 0.08),
        frameon=False,
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def draw_ettr(per_seed: pd.DataFrame, path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(per_seed["ettr"], bins=min(30, max(5, len(per_seed) // 3)), color="#4c9f50")
    mean = per_seed["ettr"].mean()
    ax.axvline(mean, color="k", linestyle="--", label=f"mean {mean:.3f}")
    ax.set_xlabel("effective training time ratio")
    ax.set_ylabel("seeds")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def draw_sweep(sweep: pd.DataFrame, optimum: dict, path: Path, title: str) -> None:
    """ETTR (mean and 5-95% band over seeds) against the interval, Young and Daly marked."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    x = sweep["effective_interval_s"] / 60
    ax.fill_between(
        x, sweep["ettr_p5"], sweep["ettr_p95"], color="#4c9f50", alpha=0.2, label="5-95% of seeds"
    )
    ax.plot(x, sweep["ettr_mean"], "o-", color="#4c9f50", label="mean")
    for name, style in (("young", ":"), ("daly", "--")):
        if optimum.get(name):
            ax.axvline(
                optimum[name] / 60,
                color="k",
                linestyle=style,
                label=f"{name.capitalize()} {optimum[name] / 60:.1f} min",
            )
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 5, 10, 20, 30, 60, 120, 240, 480) if x.min() <= t <= x.max()]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("checkpoint interval (min of training)")
    ax.set_ylabel("ETTR")
    ax.legend(fontsize=8)
    _save(fig, ax, path, title)


def draw_key_sweep(table: pd.DataFrame, key: str, path: Path, title: str) -> None:
    """ETTR against one swept failures field (``goodput --sweep``), with each point's 95%
    interval of the mean."""
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(table))
    ax.errorbar(x, table["ettr_mean"], yerr=table["ettr_ci95"], marker="o", capsize=4)
    ax.set_xticks(list(x), [str(v) for v in table[key]])
    ax.set_xlabel(key)
    ax.set_ylabel("ETTR (mean, 95% interval)")
    ax.grid(alpha=0.3)
    _save(fig, ax, path, title)


def _save(fig, ax, path: Path, title: str) -> None:
    """Title, layout, PNG at 120 dpi, figure closed: the end of every goodput picture."""
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_goodput(
    result: GoodputResult,
    summary: dict,
    out: Path,
    title: str,
    sweep: pd.DataFrame | None = None,
) -> list[Path]:
    """Write summary.json, timeline.parquet/.png, ettr.parquet/.png, by_cause.parquet and,
    with a sweep, checkpoint_interval.parquet/.png into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.json"]
    written[0].write_text(json.dumps(summary, indent=2, default=_plain))
    if result.timeline is not None:
        result.timeline.to_parquet(out / "timeline.parquet", index=False)
        draw_timeline(result.timeline, out / "timeline.png", title)
        written += [out / "timeline.parquet", out / "timeline.png"]
    result.per_seed.to_parquet(out / "ettr.parquet", index=False)
    result.by_cause.to_parquet(out / "by_cause.parquet", index=False)
    draw_ettr(result.per_seed, out / "ettr.png", title)
    written += [out / "ettr.parquet", out / "by_cause.parquet", out / "ettr.png"]
    if sweep is not None:
        sweep.to_parquet(out / "checkpoint_interval.parquet", index=False)
        optimum = summary["optimal_checkpoint_interval_s"]
        draw_sweep(sweep, optimum, out / "checkpoint_interval.png", title)
        written += [out / "checkpoint_interval.parquet", out / "checkpoint_interval.png"]
    return written


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")
