"""What-if comparison of saved runs: their Gantt charts on one time axis, and labelled bars of
step time, MFU, pipeline bubble, exposed communication and peak memory side by side."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

from simulator.report.gantt import default_ranks, draw_rows, legend_handles  # noqa: E402


def comparison_frame(runs: list[tuple[str, dict]]) -> pd.DataFrame:
    """One row per run: step time, tokens/s, MFU, bubble, exposed communication, peak memory."""
    keys = [
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "bubble_fraction",
        "exposed_comm_fraction",
        "overlap_fraction",
        "peak_memory_bytes",
        "oom",
    ]
    return pd.DataFrame([{"run": name, **{k: s.get(k) for k in keys}} for name, s in runs])


GB = 1e9


def _bars(runs: list[tuple[str, dict, pd.DataFrame]]) -> list[tuple[str, list[float], str]]:
    """(title, values, value format) of each headline bar chart."""
    summaries = [s for _, s, _ in runs]
    return [
        ("step time (ms)", [s["step_time_s"] * 1e3 for s in summaries], "{:,.1f}"),
        ("MFU", [s["mfu"] for s in summaries], "{:.1%}"),
        ("pipeline bubble (of the step)", [s["bubble_fraction"] for s in summaries], "{:.1%}"),
        (
            "exposed communication (of the step)",
            [s["exposed_comm_fraction"] for s in summaries],
            "{:.1%}",
        ),
        ("peak memory per GPU (GB)", [s["peak_memory_bytes"] / GB for s in summaries], "{:,.1f}"),
    ]


def draw_comparison(runs: list[tuple[str, dict, pd.DataFrame]], path: str | Path) -> Path:
    """A legend row, the Gantt chart of every run on a common time axis, then bars of step
    time, MFU, bubble, exposed communication and peak memory, each bar labelled."""
    t_max = max(float(t["end_s"].max()) for _, _, t in runs)
    heights = []
    for _, s, t in runs:
        ranks = default_ranks(t, s.get("stage_of_rank"))
        heights.append(sum(t.loc[t["rank"] == r, "stream"].nunique() for r in ranks))
    bars = _bars(runs)
    fig = plt.figure(figsize=(14, 3.6 + 0.3 * sum(heights) + 0.6 * len(runs)))
    grid = fig.add_gridspec(
        len(runs) + 2, len(bars), height_ratios=[1.2] + [max(h, 2) for h in heights] + [7]
    )
    legend_ax = fig.add_subplot(grid[0, :])  # its own row: the legend covers no chart
    legend_ax.axis("off")
    legend_ax.legend(
        handles=legend_handles(pd.concat([t for _, _, t in runs])),
        loc="center",
        fontsize=7,
        ncol=6,
        frameon=False,
    )
    for i, (name, s, t) in enumerate(runs):
        ax = fig.add_subplot(grid[i + 1, :])
        draw_rows(ax, t, default_ranks(t, s.get("stage_of_rank")), t_max, s.get("stage_of_rank"))
        ax.set_title(
            f"{name}: step {s['step_time_s'] * 1e3:,.1f} ms, MFU {s['mfu']:.1%}",
            fontsize=9,
            loc="left",
        )
        if i == len(runs) - 1:
            ax.set_xlabel("time (ms)")
    names = [n for n, _, _ in runs]
    for k, (label, values, fmt) in enumerate(bars):
        ax = fig.add_subplot(grid[len(runs) + 1, k])
        drawn = ax.bar(range(len(names)), values, color="#4c72b0")
        ax.bar_label(drawn, labels=[fmt.format(v) for v in values], fontsize=7, padding=2)
        ax.set_ylim(0, max(max(values), 1e-12) * 1.2)
        if label.startswith("peak memory"):
            capacity = max(s["memory_capacity_bytes"] for _, s, _ in runs) / GB
            ax.axhline(capacity, color="red", linestyle="--", linewidth=1)
            ax.set_ylim(0, max(capacity, max(values)) * 1.2)
            ax.text(0, capacity, f"HBM {capacity:.0f} GB", color="red", fontsize=7, va="bottom")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        if fmt.endswith("%}"):  # a fraction: the axis in percent, as the bars' labels
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
        ax.set_title(label, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
