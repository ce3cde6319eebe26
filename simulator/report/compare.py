"""What-if comparison of saved runs: their Gantt charts on one time axis, and bars of step
time, MFU and exposed communication side by side."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

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


def draw_comparison(runs: list[tuple[str, dict, pd.DataFrame]], path: str | Path) -> Path:
    """Gantt charts of every run on a common time axis, then the headline bars."""
    t_max = max(float(t["end_s"].max()) for _, _, t in runs)
    heights = []
    for _, s, t in runs:
        ranks = default_ranks(t, s.get("stage_of_rank"))
        heights.append(sum(t.loc[t["rank"] == r, "stream"].nunique() for r in ranks))
    fig = plt.figure(figsize=(14, 2.5 + 0.3 * sum(heights) + 0.6 * len(runs)))
    grid = fig.add_gridspec(len(runs) + 1, 3, height_ratios=[max(h, 2) for h in heights] + [6])
    for i, (name, s, t) in enumerate(runs):
        ax = fig.add_subplot(grid[i, :])
        draw_rows(ax, t, default_ranks(t, s.get("stage_of_rank")), t_max, s.get("stage_of_rank"))
        ax.set_title(
            f"{name}: step {s['step_time_s'] * 1e3:,.1f} ms, MFU {s['mfu']:.1%}",
            fontsize=9,
            loc="left",
        )
        if i == len(runs) - 1:
            ax.set_xlabel("time (ms)")
    names = [n for n, _, _ in runs]
    bars = [
        ("step time (ms)", [s["step_time_s"] * 1e3 for _, s, _ in runs]),
        ("MFU", [s["mfu"] for _, s, _ in runs]),
        ("exposed communication", [s["exposed_comm_fraction"] for _, s, _ in runs]),
    ]
    for k, (label, values) in enumerate(bars):
        ax = fig.add_subplot(grid[len(runs), k])
        ax.bar(range(len(names)), values, color="#4c72b0")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=7)
        ax.set_title(label, fontsize=9)
    fig.legend(
        handles=legend_handles(pd.concat([t for _, _, t in runs])),
        loc="upper right",
        fontsize=7,
        ncol=2,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
