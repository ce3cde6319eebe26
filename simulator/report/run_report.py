"""The run report: every file ``trainsim run --out DIR`` writes, and reading them back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simulator.report.gantt import default_ranks, draw_gantt
from simulator.report.perfetto import write_chrome_trace, write_rank_traces
from simulator.report.plots import draw_links, draw_memory


def write_report(
    summary: dict,
    trace: pd.DataFrame,
    memory: pd.DataFrame,
    links: pd.DataFrame | None,
    out: str | Path,
    title: str = "",
) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = title or str(summary.get("scenario") or "run")
    stages = summary.get("stage_of_rank")
    paths = [out / "summary.json"]
    paths[0].write_text(json.dumps(summary, indent=2, default=float))
    try:
        trace.to_parquet(out / "trace.parquet", index=False)
        paths.append(out / "trace.parquet")
    except ImportError:
        trace.to_csv(out / "trace.csv", index=False)
        paths.append(out / "trace.csv")
    memory.to_csv(out / "memory.csv", index=False)
    paths.append(out / "memory.csv")
    paths.append(write_chrome_trace(trace, out / "trace.json", stages))
    paths += write_rank_traces(trace, out / "hta", summary.get("num_gpus", 1))
    shown = default_ranks(trace, stages)
    paths += draw_gantt(trace, [out / "gantt.png", out / "gantt.svg"], shown, stages, title)
    paths.append(
        draw_memory(
            memory, summary["memory_capacity_bytes"], out / "memory.png", shown, f"{title}: memory"
        )
    )
    if links is not None and len(links):
        links.to_csv(out / "links.csv", index=False)
        paths.append(out / "links.csv")
        paths.append(draw_links(links, out / "links.png", f"{title}: busiest links"))
    paths.append(write_markdown(summary, out, title, has_links=links is not None and len(links)))
    return paths


def headline_rows(summary: dict) -> list[tuple[str, str]]:
    """The run's headline metrics as (label, formatted value), for the CLI and summary.md."""
    gb = 1e9
    return [
        ("step time", f"{summary['step_time_s']:.4g} s"),
        *(
            [
                (
                    "straggler slowdown",
                    f"{summary['straggler_slowdown']:.3f}x the healthy "
                    f"{summary['healthy_step_time_s']:.4g} s",
                )
            ]
            if "straggler_slowdown" in summary
            else []
        ),
        ("tokens/s", f"{summary['tokens_per_s']:,.0f}"),
        ("MFU / HFU", f"{summary['mfu']:.1%} / {summary['hfu']:.1%}"),
        ("model TFLOP/s per GPU", f"{summary['model_tflops_per_gpu']:.1f}"),
        ("pipeline bubble", f"{summary['bubble_fraction']:.1%} of the step"),
        ("waiting at the step's end", f"{summary['sync_wait_fraction']:.1%} of the step"),
        ("exposed communication", f"{summary['exposed_comm_fraction']:.1%} of the step"),
        ("communication overlapped", f"{summary['overlap_fraction']:.1%}"),
        (
            "peak memory",
            f"{summary['peak_memory_bytes'] / gb:.1f} GB of "
            f"{summary['memory_capacity_bytes'] / gb:.0f} GB"
            + ("  OUT OF MEMORY" if summary["oom"] else ""),
        ),
        (
            "simulated",
            f"{summary['simulated_ranks']} rank{'s' if summary['simulated_ranks'] != 1 else ''}"
            f" of {summary['num_gpus']:,}, "
            f"{summary['tasks']:,} tasks",
        ),
        (
            "stream utilisation",
            ", ".join(f"{k} {v:.0%}" for k, v in sorted(summary["utilisation"].items())),
        ),
    ]


def write_markdown(summary: dict, out: Path, title: str, has_links: bool) -> Path:
    rows = headline_rows(summary)
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += [
        "",
        "## One step",
        "",
        "![Gantt chart](gantt.png)",
        "",
        "## Memory",
        "",
        "![Memory over the step](memory.png)",
        "",
    ]
    if has_links:
        lines += ["## Busiest links", "", "![Link utilisation](links.png)", ""]
    lines += [
        "Open `trace.json` in https://ui.perfetto.dev; `hta/` holds one trace per rank "
        "for Holistic Trace Analysis.",
        "",
    ]
    path = out / "summary.md"
    path.write_text("\n".join(lines))
    return path


def load_run(folder: str | Path) -> tuple[dict, pd.DataFrame, pd.DataFrame | None]:
    """Read back (summary, trace, memory) from a folder ``write_report`` wrote."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text())
    if (folder / "trace.parquet").exists():
        trace = pd.read_parquet(folder / "trace.parquet")
    else:
        trace = pd.read_csv(folder / "trace.csv")
    memory = pd.read_csv(folder / "memory.csv") if (folder / "memory.csv").exists() else None
    return summary, trace, memory
