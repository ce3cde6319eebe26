"""The run report: every file ``trainsim run --out DIR`` writes, and reading them back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from simulator.report.gantt import default_ranks, draw_gantt
from simulator.report.perfetto import write_chrome_trace, write_rank_traces
from simulator.report.plots import draw_links, draw_memory, draw_power

# A Gantt chart of more records than this is written as PNG only: its SVG would hold tens of
# thousands of rectangles (rasterized anyway, gantt.RASTERIZE_ABOVE); `trainsim gantt DIR
# --window A:B` draws any part of it as SVG.
SVG_MAX_RECORDS = 20_000


def write_report(
    summary: dict,
    trace: pd.DataFrame,
    memory: pd.DataFrame,
    links: pd.DataFrame | None,
    out: str | Path,
    title: str = "",
    on_file=None,
    power: pd.DataFrame | None = None,
    steps: pd.DataFrame | None = None,
) -> list[Path]:
    """Write every file of the run report into ``out``; the paths, in a fixed order
    (``steps``: the drawn steps of ``run --steps N``, as steps.csv).

    The pictures are drawn in a forked process while this one writes the tables and traces
    (two cores: the 16K-GPU report in about half the serial time); where fork is not
    available, one after the other. ``on_file(path)`` is called as each file is done (the
    CLI's progress line).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = title or str(summary.get("scenario") or "run")
    has_links = links is not None and len(links) > 0
    shown = default_ranks(trace, summary.get("stage_of_rank"))  # once, for every picture
    pictures = _pictures(summary, trace, memory, links if has_links else None, out, title, shown)
    note = on_file or (lambda path: None)
    with _Forked(pictures) as drawn:
        paths = [out / "summary.json"]
        paths[0].write_text(json.dumps(summary, indent=2, default=float))
        note(paths[0])
        tables = _tables(summary, trace, memory, links if has_links else None, out, power)
        if steps is not None:
            tables.append(lambda: _csv(steps, out / "steps.csv"))
        for write in tables:
            paths.append(write())
            note(paths[-1])
        paths.append(write_markdown(summary, out, title, has_links=has_links))
        note(paths[-1])
        # the small pictures here, while the child still draws the Gantt chart
        small = _small_pictures(
            summary, memory, links if has_links else None, out, title, shown, power
        )
        for draw in small:
            paths.append(draw())
            note(paths[-1])
    for path in drawn.paths:
        note(path)
    return paths[:1] + drawn.paths + paths[1:]


def _tables(summary, trace, memory, links, out: Path, power=None) -> list:
    """The data files, each as a function that writes it and returns its path (or paths)."""
    stages = summary.get("stage_of_rank")

    def trace_table() -> Path:
        try:
            trace.to_parquet(out / "trace.parquet", index=False)
            return out / "trace.parquet"
        except ImportError:
            trace.to_csv(out / "trace.csv", index=False)
            return out / "trace.csv"

    def memory_table() -> Path:
        memory.to_csv(out / "memory.csv", index=False)
        return out / "memory.csv"

    def links_table() -> Path:
        links.to_parquet(out / "links.parquet", index=False)
        return out / "links.parquet"

    def rank_traces() -> Path:
        write_rank_traces(trace, out / "hta", summary.get("num_gpus", 1))
        return out / "hta"

    out_fns = [
        trace_table,
        memory_table,
        lambda: write_chrome_trace(trace, out / "trace.json", stages, power),
        rank_traces,
    ]
    if links is not None:
        out_fns.append(links_table)
    if power is not None:
        out_fns.append(lambda: _csv(power, out / "power.csv"))
    return out_fns


def _csv(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False)
    return path


def gantt_headline(summary: dict, title: str) -> str:
    """The Gantt chart's title: the run's name, step time, MFU and bubble."""
    return (
        f"{title}: step {summary['step_time_s']:.4g} s, MFU {summary['mfu']:.1%}, "
        f"bubble {summary['bubble_fraction']:.1%}"
    )


def _pictures(summary, trace, memory, links, out: Path, title: str, shown: list[int]):
    """A function drawing gantt.png (and gantt.svg for a small trace); their paths."""
    stages = summary.get("stage_of_rank")

    def draw() -> list[Path]:
        headline = gantt_headline(summary, title)
        charts = [out / "gantt.png"]
        if len(trace) <= SVG_MAX_RECORDS:
            charts.append(out / "gantt.svg")
        return draw_gantt(trace, charts, shown, stages, headline)

    return draw


def _small_pictures(summary, memory, links, out: Path, title: str, shown, power=None) -> list:
    """memory.png, links.png and power.png, each as a function that draws it and returns its
    path."""
    stages = summary.get("stage_of_rank")
    capacity = summary["memory_capacity_bytes"]
    out_fns = [
        lambda: draw_memory(
            memory, capacity, out / "memory.png", shown, f"{title}: memory", stages
        )  # fmt: skip
    ]
    if links is not None:
        out_fns.append(lambda: draw_links(links, out / "links.png", f"{title}: busiest links"))
    if power is not None:
        limit = summary["power_limit_w"]
        path = out / "power.png"
        out_fns.append(lambda: draw_power(power, limit, path, shown, f"{title}: power"))
    return out_fns


class _Forked:
    """Run ``draw`` in a forked child while the ``with`` body runs here; ``.paths`` after.

    The child inherits ``draw`` and its data by fork (nothing is pickled but the returned
    paths). Without fork, or when the child fails, ``draw`` runs here after the body."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.paths: list[Path] = []
        self._child = None
        self._conn = None

    def __enter__(self):
        import multiprocessing as mp

        if "fork" in mp.get_all_start_methods():
            ctx = mp.get_context("fork")
            self._conn, child_end = ctx.Pipe(duplex=False)
            self._child = ctx.Process(target=_draw_in_child, args=(self.draw, child_end))
            self._child.start()
            child_end.close()
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if self._child is None:
            if kind is None:
                self.paths = self.draw()
            return
        try:
            got = None
            if kind is None:
                try:
                    got = self._conn.recv()
                except EOFError:  # the child died without a word
                    got = None
            self._child.join()
            if kind is None:
                self.paths = got if isinstance(got, list) else self.draw()
        finally:
            if self._child.is_alive():
                self._child.terminate()
                self._child.join()
            self._conn.close()


def _draw_in_child(draw, conn) -> None:
    try:
        conn.send(draw())
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which draws again
        conn.send(repr(exc))
    finally:
        conn.close()


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
        *_variability_rows(summary),
        ("tokens/s", f"{summary['tokens_per_s']:,.0f}"),
        *_energy_rows(summary),
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


def oom_message(summary: dict, accelerator: str) -> str:
    """The warning of a step that does not fit (stderr)."""
    return (
        f"OUT OF MEMORY: peak {summary['peak_memory_bytes'] / 1e9:.1f} GB per GPU exceeds "
        f"the {summary['memory_capacity_bytes'] / 1e9:.0f} GB of a {accelerator} (see "
        "`trainsim memory`)"
    )


def _variability_rows(summary: dict) -> list[tuple[str, str]]:
    """The drawn steps' distribution (``run --steps N``)."""
    v = summary.get("variability")
    if v is None:
        return []
    paced = ", ".join(str(r) for r in v["pacing_ranks"][:6]) or "none"
    more = f" and {len(v['pacing_ranks']) - 6} more" if len(v["pacing_ranks"]) > 6 else ""
    return [
        (
            f"step time, {v['samples']} steps",
            f"p50 {v['step_time_p50_s']:.4g} s, p90 {v['step_time_p90_s']:.4g} s, p99 "
            f"{v['step_time_p99_s']:.4g} s; mean {v['variability_cost']:+.2%} against "
            f"{v['variability_free_step_time_s']:.4g} s without variability",
        ),
        ("paced by GPU", paced + more),
    ]


def _energy_rows(summary: dict) -> list[tuple[str, str]]:
    """Power and energy lines, where the device has a power model."""
    if "clock" not in summary:
        return []
    return [
        (
            "power per GPU",
            f"{summary['power_per_gpu_w']:.0f} W mean, {summary['peak_power_per_gpu_w']:.0f} W "
            f"peak; GEMM clock {summary['clock']:.3f} of boost at a "
            f"{summary['power_limit_w']:.0f} W limit",
        ),
        (
            "energy",
            f"{summary['joules_per_token']:.3g} J/token; cluster "
            f"{summary['cluster_power_w'] / 1e3:,.1f} kW, facility "
            f"{summary['facility_power_w'] / 1e3:,.1f} kW",
        ),
    ]
