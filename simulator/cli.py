"""``trainsim``: the command line. Parses arguments, calls :mod:`simulator.api`, prints.

Results go to stdout, logs to stderr. Exit codes: 0 ok, 2 bad input (the message names
file:line:col and the field, or the option), 1 a failure of the program itself, 3 an
out-of-memory run under ``run --fail-on-oom``. Output paths are checked before simulating.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_args import Format as Format
from simulator.cli_args import (
    FormatOpt,
    ProgressOpt,
    ScenarioArg,
    SetOpt,
    StepsOpt,
    TopoSetOpt,
)
from simulator.cli_options import (
    LINKS_DEFAULT_MAX_GPUS,
    OptionError,
    check_out_dir,
    check_out_file,
    parse_ranks,
    parse_window,
    track_links,
)
from simulator.failures.commands import register as register_goodput
from simulator.scenario import ScenarioError
from simulator.sweep import commands as sweep_commands

log = logging.getLogger("trainsim")


class _OnFirstUse:
    """A module imported when one of its names is first read: ``trainsim --version`` and
    ``--help`` then cost the Python start and typer (about 0.1 s), not numpy, pandas,
    networkx and the engine (about 0.7 s)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


api = _OnFirstUse("simulator.api")

app = typer.Typer(
    name="trainsim",
    help="Discrete-event simulator of large-language-model training clusters.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help and errors: no rich import on --help's path
)


def _fail(message: str | Exception) -> None:
    """Exit 2 with ``message`` (a ScenarioError's names the file, line and field)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _checked(check, *args):
    """Run an option check from :mod:`simulator.cli_options`; a bad option exits 2."""
    try:
        return check(*args)
    except OptionError as exc:
        _fail(str(exc))


def _load(path: Path, overrides: list[str] | None):
    try:
        return api.load(path, overrides or [])
    except ScenarioError as exc:
        _fail(exc)


GB = 1e9


@app.command()
def memory(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    format: FormatOpt = Format.table,
    max_params: Annotated[
        bool,
        typer.Option(
            "--max-params", help="Also print the largest model whose model states fit (slide 28)."
        ),
    ] = False,
) -> None:
    """Per-GPU memory of each kind of rank: parameters, gradients, optimizer, activations."""
    s = _load(scenario, set_)
    report = api.memory_report(s)
    for caveat in report.caveats:
        log.warning("%s", caveat)
    if format is Format.json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    frame = api.memory_frame(report)
    tensors = frame[["params", "grads", "optimizer", "activations", "buffers"]].sum(axis=1)
    frame["reserve"] = frame["total"] - frame["runtime"] - tensors  # the allocator's
    columns = ["rank_kind", "params", "grads", "optimizer", "activations", "buffers"]
    if (frame["reserve"] > 0).any():
        columns.append("reserve")
    shown = frame[[*columns, "runtime", "total", "capacity"]].copy()
    for col in shown.columns[1:]:
        shown[col] = (shown[col] / GB).map(lambda v: f"{v:,.2f}")
    shown["fits"] = frame["fits"].map({True: "yes", False: "OOM"})
    typer.echo(
        f"{s.name or scenario.name}: {report.parameter_count / 1e9:,.2f}B parameters"
        + (
            f" ({report.active_parameter_count / 1e9:,.2f}B active)"
            if report.active_parameter_count != report.parameter_count
            else ""
        )
        + f", {s.num_gpus} x {s.cluster.accelerator.name}"
    )
    typer.echo("memory per GPU in GB (1e9 bytes)")
    typer.echo(shown.to_string(index=False))
    if max_params:
        typer.echo(
            f"largest model whose model states fit: "
            f"{report.max_params_model_states / 1e9:,.2f}B parameters"
        )


TopologyOpt = Annotated[Path, typer.Option("--topology", help="Topology YAML (topologies/).")]
AccelOpt = Annotated[
    str,
    typer.Option(
        "--accelerator", help="Accelerator whose NVLink rate applies where the file gives none."
    ),
]


def _topology(path: Path, accelerator: str, overrides: list[str] | None):
    try:
        return api.topology_from_file(path, accelerator, overrides or [])
    except ScenarioError as exc:
        _fail(exc)
    except (KeyError, ValueError) as exc:
        typer.echo(f"error: {path}: {exc.args[0] if exc.args else exc}", err=True)
        raise typer.Exit(2) from None


def _built_shape(meta: dict) -> str:
    """ " AxBxC": the torus shape built, beside the file's name (which --set may contradict)."""
    shape = meta.get("shape")
    return " " + "x".join(map(str, shape)) if shape else ""


@app.command()
def topology(
    file: Annotated[Path, typer.Argument(help="Topology YAML.", show_default=False)],
    accelerator: AccelOpt = "H100-SXM",
    set_: TopoSetOpt = None,
    draw: Annotated[
        Path | None,
        typer.Option("--draw", help="Write a PNG: the graph if small, a per-level summary if not."),
    ] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Devices, links per level, and bisection bandwidth of a topology."""
    _checked(check_out_file, draw, "--draw")
    topo = _topology(file, accelerator, set_)
    info, levels = api.topology_report(topo)
    if draw is not None:
        from simulator.topology.draw import draw_topology

        draw_topology(topo, draw)
        log.info("wrote %s", draw)
    if format is Format.json:
        typer.echo(json.dumps({**info, "levels": levels.to_dict("records")}, indent=2, default=str))
        return
    typer.echo(
        f"{info['name']} ({info['kind']}{_built_shape(info)}): {info['devices']:,} devices on "
        f"{info['hosts']:,} hosts, {info['links']:,} directed links"
    )
    switches = ", ".join(f"{v:,} {k}" for k, v in info["switches"].items()) or "none"
    typer.echo(f"switches: {switches}; NICs: {info['nics']:,}")
    if info.get("kind") == "fat_tree":
        typer.echo(api.fabric_line(info))
    typer.echo(f"bisection bandwidth: {info['bisection_Bps'] / 1e12:,.2f} TB/s per direction")
    shown = levels.copy()
    shown["link_GBps"] = shown["link_Bps"].map(
        lambda v: f"{v / 1e9:,.1f}" if isinstance(v, float) else v
    )
    shown["total_TBps"] = (shown["total_Bps"] / 1e12).map(lambda v: f"{v:,.2f}")
    typer.echo(
        shown[["level", "links", "link_GBps", "total_TBps", "efficiency"]].to_string(index=False)
    )


@app.command()
def collective(
    topology: TopologyOpt,
    op: Annotated[
        str,
        typer.Option(
            "--op",
            help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, send_recv",
        ),
    ] = "all_reduce",
    ranks: Annotated[
        int | None,
        typer.Option("--ranks", min=2, help="Ranks (the first N devices, 2 or more); default all."),
    ] = None,
    algo: Annotated[
        str | None,
        typer.Option(
            "--algo",
            help="ring, tree, direct, halving_doubling, hierarchical, "
            "torus, nvls, or auto (NCCL's choice by size: NVLS, ring or tree); default ring "
            "(direct for all_to_all).",
        ),
    ] = None,
    sizes: Annotated[
        str, typer.Option("--sizes", help="MIN:MAX[:FACTOR] or one size, e.g. 1MiB:8GiB.")
    ] = "1MiB:8GiB",
    groups: Annotated[
        int,
        typer.Option(
            "--groups", min=1, help="Identical groups running at once (next device blocks)."
        ),
    ] = 1,
    accelerator: AccelOpt = "H100-SXM",
    set_: TopoSetOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Time one collective over a topology for a range of sizes, like nccl-tests."""
    try:
        size_list = api.parse_sizes(sizes)
    except ValueError as exc:
        _fail(f"--sizes {sizes}: {exc}")
    topo = _topology(topology, accelerator, set_)
    try:
        table = api.collective_table(topo, op, ranks, algo, size_list, groups)
    except ValueError as exc:
        _fail(str(exc))
    if format is Format.json:
        typer.echo(table.to_json(orient="records", indent=2))
        return
    shown = table.copy()
    shown["size"] = shown["size_bytes"].map(_human_bytes)
    shown["time_us"] = (shown["time_s"] * 1e6).map(lambda v: f"{v:,.1f}")
    shown["algbw_GBps"] = (shown["algbw_Bps"] / 1e9).map(lambda v: f"{v:,.2f}")
    shown["busbw_GBps"] = (shown["busbw_Bps"] / 1e9).map(lambda v: f"{v:,.2f}")
    n = ranks or topo.num_devices
    shape = _built_shape(topo.meta)
    name = f"{topo.name} ({topo.meta['kind']}{shape})" if shape else topo.name
    chosen = table["algorithm"].unique()
    how = f"algorithm {chosen[0]}" if len(chosen) == 1 else "algorithm chosen per size"
    typer.echo(
        f"{op} over {n} ranks of {name}, {how}"
        + ("" if algo else " (the default; --algo chooses)")
        + (f", {groups} groups at once" if groups > 1 else "")
    )
    columns = ["size", "time_us", "algbw_GBps", "busbw_GBps", "protocol"]
    if len(chosen) > 1:
        columns.insert(4, "algorithm")
    typer.echo(shown[columns].to_string(index=False))


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if n == int(n) else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _check_stragglers(s, topo, path: Path, overrides) -> None:
    """Straggler links must be links of the topology: exit 2 at the field's line if not."""
    findings = api.straggler_link_findings(s, topo)
    if findings:
        from simulator.scenario.located import located_error

        _fail(located_error(path, overrides, findings))


@app.command()
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    format: FormatOpt = Format.table,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write summary.json, the trace table and the memory timeline here."
        ),
    ] = None,
    fail_on_oom: Annotated[
        bool,
        typer.Option("--fail-on-oom", help="Exit 3 when a rank runs out of memory."),
    ] = False,
    links: Annotated[
        bool | None,
        typer.Option(
            "--links/--no-links",
            help="With --out: track every link's load for links.parquet and links.png "
            f"(default: on up to {LINKS_DEFAULT_MAX_GPUS:,} GPUs; it slows a larger step "
            "about 2x).",
            show_default=False,
        ),
    ] = None,
    progress: ProgressOpt = None,
    steps: StepsOpt = 0,
) -> None:
    """Simulate one steady-state training step: step time, MFU, bubble, overlap, memory.

    An out-of-memory step is still simulated and reported (exit 0), with a warning on stderr;
    ``--fail-on-oom`` makes it exit 3."""
    from simulator.cli_progress import Stages
    from simulator.report.run_report import oom_message

    _checked(check_out_dir, out)
    s = _load(scenario, set_)
    track, note = track_links(s.num_gpus, out is not None, links)
    if note:
        log.info("%s", note)
    log.info(
        "simulating %s on %d %ss (%s mode)",
        s.name or scenario.name,
        s.num_gpus,
        s.cluster.accelerator.kind.upper(),
        s.simulation.mode,
    )
    stages = Stages(3 if out is not None else 2, enabled=progress)
    try:
        # built once, for the warnings and the run (a 16K-GPU fabric takes longer to build
        # than its step takes to simulate); released after (its graph's reference cycles)
        with stages.stage("building the topology"):
            topo = api.build_topology(s.cluster)
        with topo:
            _check_stragglers(s, topo, scenario, set_)
            for warning in api.topology_warnings(s, topo):
                log.warning("%s", warning)
            with stages.stage(f"simulating the step on {s.num_gpus:,} GPUs"):
                result = api.run(s, topo, track_links=track, samples=steps)
    except api.InfeasibleError as exc:  # anything else is a bug: exit 1, see main()
        typer.echo(f"error: {scenario}: {exc}", err=True)
        raise typer.Exit(2) from None
    if out is not None:
        with stages.stage(f"writing the report to {out}") as stage:
            written = api.write_run(result, out, on_file=stage.item)
        log.info("wrote %s", ", ".join(str(p) for p in written))
    summary = result.summary
    if summary["oom"]:
        typer.echo(oom_message(summary, s.cluster.accelerator.name), err=True)
    if format is Format.json:
        typer.echo(json.dumps(summary, indent=2, default=float))
    else:
        from simulator.report.run_report import headline_rows

        typer.echo(f"{s.name or scenario.name}")
        for name, value in headline_rows(summary):
            typer.echo(f"  {name:<26} {value}")
    if summary["oom"] and fail_on_oom:
        raise typer.Exit(3)


@app.command()
def gantt(
    run_dir: Annotated[Path, typer.Argument(help="A folder written by run --out.")],
    ranks: Annotated[
        str | None,
        typer.Option("--ranks", help="Comma-separated ranks to show (default: one per stage)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Image to write (default RUN_DIR/gantt.png).")
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Show only START:END of the step, in seconds or with units (0.1:0.2, 5ms:8ms).",
        ),
    ] = None,
) -> None:
    """Redraw the Gantt chart of a saved run."""
    from simulator.report.gantt import draw_gantt
    from simulator.report.run_report import load_run

    path = out or run_dir / "gantt.png"
    _checked(check_out_file, path, "--out")
    shown = _checked(parse_ranks, ranks) if ranks else None
    span = _checked(parse_window, window)
    try:
        summary, trace, _ = load_run(run_dir)
    except (OSError, ValueError) as exc:
        _fail(f"{run_dir}: {exc}")
    simulated = sorted(int(r) for r in trace["rank"].unique())
    for r in shown or []:
        if r not in simulated:
            _fail(
                f"--ranks: rank {r} was not simulated; this run simulated ranks "
                f"{', '.join(map(str, simulated))}"
            )
    end = float(trace["end_s"].max()) if len(trace) else 0.0
    if span is not None and span[0] >= end:
        _fail(f"--window {window}: starts after the step ends (at {end:.6g} s): nothing to draw")
    draw_gantt(
        trace,
        [path],
        shown,
        summary.get("stage_of_rank"),
        str(summary.get("scenario") or run_dir.name),
        window=span,
    )
    typer.echo(str(path))


@app.command()
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="Folders written by run --out.")],
    out: Annotated[Path, typer.Option("--out", help="Image to write.")] = Path("compare.png"),
    format: FormatOpt = Format.table,
) -> None:
    """Compare saved runs: Gantt charts on one time axis, and step time, MFU, bubble, exposed
    communication and peak memory side by side."""
    from simulator.report.compare import comparison_frame, draw_comparison
    from simulator.report.run_report import load_run

    _checked(check_out_file, out, "--out")

    runs = []
    try:
        for d in run_dirs:
            summary, trace, _ = load_run(d)
            runs.append((d.name, summary, trace))
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    draw_comparison(runs, out)
    log.info("wrote %s", out)
    table = comparison_frame([(n, s) for n, s, _ in runs])
    if format is Format.json:
        typer.echo(table.to_json(orient="records", indent=2))
        return
    shown = table.copy()  # the terminal's units: s, tokens/s, percentages, GB

    def fmt(spec: str, scale: float = 1.0):  # "-" where an older run's summary lacks a key
        return lambda v: "-" if v is None or v != v else f"{v / scale:{spec}}"

    for col in shown.columns:
        if col.endswith("fraction") or col in ("mfu", "hfu"):
            shown[col] = shown[col].map(fmt(".1%"))
    if "step_time_s" in shown:
        shown["step_time_s"] = shown["step_time_s"].map(fmt(".4g"))
    if "tokens_per_s" in shown:
        shown["tokens_per_s"] = shown["tokens_per_s"].map(fmt(",.0f"))
    if "peak_memory_bytes" in shown:
        gb = shown.pop("peak_memory_bytes").map(fmt(",.1f", GB))
        shown.insert(len(shown.columns) - 1, "peak_memory_GB", gb)
    if "oom" in shown:
        shown["oom"] = shown["oom"].map({True: "OOM", False: ""})
    typer.echo(shown.to_string(index=False))


@app.command()
def validate(
    format: FormatOpt = Format.table,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            help="megatron, megatron_table2, nccl, nccl_time, zero_bubble, throughput, llama3, "
            "zero, korthikanti, layer_timing, nvidia_h100, nvidia_gb200, moe_folding, deepep, "
            "moe_recipes (repeatable; default all).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Processes simulating rows side by side (default: one per usable core).",
        ),
    ] = None,
) -> None:
    """Reproduce published results: per row the published value, ours, and the error."""
    from simulator.validation import UnknownGroup, summary_frame
    from simulator.validation import validate as run_validation

    try:
        frame = run_validation(group, workers)
    except UnknownGroup as exc:
        typer.echo(f"error: --group: {exc}", err=True)
        raise typer.Exit(2) from None
    if format is Format.json:
        typer.echo(
            json.dumps(
                {
                    "rows": frame.to_dict("records"),
                    "groups": summary_frame(frame).to_dict("records"),
                },
                indent=2,
                default=float,
            )
        )
        return
    shown = frame.copy()
    for col in ("published", "simulated"):
        shown[col] = shown[col].map(lambda v: f"{v:,.4g}")
    shown["error"] = shown["error"].map(lambda v: f"{v:+.2%}")
    shown["tolerance"] = shown["tolerance"].map(lambda v: f"{v:.0%}" if v else "printed")
    shown["within"] = [
        ("yes" if w else ("expected miss" if e else "NO"))
        for w, e in zip(frame["within"], frame["expected_miss"], strict=True)
    ]
    typer.echo(shown.drop(columns=["expected_miss"]).to_string(index=False))
    for row in frame[(~frame["within"]) & (frame["expected_miss"] != "")].itertuples():
        typer.echo(f"expected miss, {row.row}: {row.expected_miss}")
    typer.echo("")
    summary = summary_frame(frame)
    for col in ("median_abs_error", "worst_abs_error"):
        summary[col] = summary[col].map(lambda v: f"{v:.2%}")
    typer.echo(summary.to_string(index=False))
    if not (frame["within"] | (frame["expected_miss"] != "")).all():
        raise typer.Exit(1)


@app.command()
def calibrate(
    out: Annotated[Path, typer.Option("--out", help="Folder to write.")],
    peak: Annotated[
        str, typer.Option("--peak", help="The GPU's dense bf16 peak, e.g. '989 TFLOP/s'.")
    ],
    hbm: Annotated[str, typer.Option("--hbm", help="Its HBM bandwidth, e.g. '3.35 TB/s'.")],
    repeats: int = 10,
    warmup: int = 3,
) -> None:
    """Measure GEMM, copy, GeLU and fused AdamW kernels with PyTorch on this GPU; write a
    calibration folder that an accelerator can name (``calibration: DIR``); print the fitted
    efficiencies."""
    from simulator.calibrate import CalibrationUnavailable, run_microbenchmarks, torch_timer
    from simulator.model.calibration import CalibrationError, device_fits
    from simulator.units import UnitError, parse_quantity

    try:
        peak_flops = parse_quantity(peak, "flops_rate")
        hbm_bps = parse_quantity(hbm, "bandwidth")
        timer, meta = torch_timer(repeats, warmup)
    except (UnitError, CalibrationUnavailable) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    run_microbenchmarks(out, timer, meta)
    try:
        gemm, mem = device_fits(str(out), peak_flops, hbm_bps)
    except CalibrationError as exc:  # e.g. copies faster than the --hbm given
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"wrote {out}: GEMM e_max {gemm.e_max:.2f}, x {gemm.x_half:.0f}, "
        f"RMS log error {gemm.rms_log_error:.1%}; HBM efficiency: copies {mem.e_mem:.2f}, "
        f"GeLU {mem.efficiency(2.0):.2f}, fused AdamW {mem.optimizer:.2f}"
    )


@app.command()
def check(scenario: ScenarioArg, set_: SetOpt = None) -> None:
    """Validate a scenario and print it with every default filled in, as JSON."""
    s = _load(scenario, set_)
    typer.echo(s.model_dump_json(indent=2))


@app.command()
def models(format: FormatOpt = Format.table) -> None:
    """The model catalog: names usable as ``model: NAME`` and their parameter counts."""
    from simulator.model.params import count_params

    rows = []
    from simulator.scenario.model_catalog import MODEL_CATALOG
    from simulator.scenario.schema import ModelConfig

    for name in sorted(MODEL_CATALOG):
        m = ModelConfig(name=name)
        c = count_params(m)
        rows.append(
            {
                "name": name,
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "kv_heads": m.n_kv_heads,
                "experts": m.moe.experts if m.moe else 0,
                "params": c.total,
                "active_params": c.active,
            }
        )
    if format is Format.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame["params"] = (frame["params"] / 1e9).map(lambda v: f"{v:,.2f}B")
    frame["active_params"] = (frame["active_params"] / 1e9).map(lambda v: f"{v:,.2f}B")
    typer.echo(frame.to_string(index=False))


@app.command()
def costs(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    layer: Annotated[int, typer.Option("--layer", help="Layer index (default 0).")] = 0,
    format: FormatOpt = Format.table,
) -> None:
    """One layer's kernels for one micro-batch on one rank, per pass (forward, input gradient,
    weight gradient, recompute): FLOPs, bytes, time and whether compute or memory bounds each,
    to hold against a profiler trace."""
    s = _load(scenario, set_)
    try:
        frame = api.layer_costs(s, layer)
    except ValueError as exc:
        typer.echo(f"error: --layer: {exc}", err=True)
        raise typer.Exit(2) from None
    if format is Format.json:
        typer.echo(frame.to_json(orient="records", indent=2))
        return
    shown = frame.assign(
        GFLOP=frame["flops"] / 1e9, MB=frame["bytes"] / 1e6, us=frame["seconds"] * 1e6
    )[["pass", "op", "kind", "GFLOP", "MB", "us", "bound"]]
    typer.echo(f"{s.name or scenario.name}: layer {layer}, one micro-batch on one rank")
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    totals = frame.groupby("pass", sort=False)["seconds"].sum() * 1e6
    typer.echo("per pass (us): " + ", ".join(f"{k} {v:,.1f}" for k, v in totals.items()))
    for note in api.costs_notes(s, frame):
        typer.echo(note)


@app.command()
def accelerators(format: FormatOpt = Format.json) -> None:
    """The accelerator catalog (SI units in json: FLOP/s, bytes, B/s; the table in TFLOP/s,
    GB and GB/s)."""
    from simulator.hardware import CATALOG

    entries = [a.model_dump() for a in CATALOG.values()]
    if format is Format.json:
        typer.echo(json.dumps(entries, indent=2))
        return
    import pandas as pd

    rows = [
        {
            "name": a["name"],
            "kind": a["kind"],
            "architecture": a["architecture"],
            "bf16 TFLOP/s": a["peak_flops_per_s"].get("bf16", float("nan")) / 1e12,
            "fp8 TFLOP/s": a["peak_flops_per_s"].get("fp8", float("nan")) / 1e12,
            "HBM GB": a["hbm_bytes"] / 1e9,
            "HBM GB/s": a["hbm_bandwidth_Bps"] / 1e9,
            "scale-up GB/s": a["scale_up_bandwidth_Bps"] / 1e9,
        }
        for a in entries
    ]
    frame = pd.DataFrame(rows)
    for col in frame.columns[3:]:  # the numbers; "-": the accelerator has no such format
        frame[col] = frame[col].map(lambda v: "-" if v != v else f"{v:,.0f}")
    # a long run's compute-bound rate / the burst's, and GEMMs against the calibrated H200's
    frame["sustained"] = [f"{a['sustained_compute']:.3f}" for a in entries]
    frame["matmul"] = [f"{a['matmul_efficiency']:.3f}" for a in entries]
    typer.echo(frame.to_string(index=False))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"trainsim {version('trainsim')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("trainsim (not installed)")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    raise_limits: Annotated[
        float | None,
        typer.Option(
            "--raise-limits",
            help="Multiply every resource bound (seeds, days, sweep points, interruptions "
            "per seed: simulator/limits.py) by this factor.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Discrete-event simulator of large-language-model training clusters."""
    if raise_limits is not None:
        from simulator import limits

        try:
            limits.raise_limits(raise_limits)
        except ValueError as exc:
            _fail(str(exc))


register_goodput(app)
sweep_commands.register(app)  # trainsim sweep, trainsim plan (simulator/sweep/commands.py)


def _goodput_objective():
    """``trainsim plan --objective goodput``: the step over the failure model's expected ETTR
    (:mod:`simulator.failures.objective`), found once per GPU count (it does not depend on the
    layout, and on the step time only through the interval's rounding to whole steps)."""
    from simulator.failures.objective import expected_ettr
    from simulator.sweep.objectives import Objective

    ettr: dict[int, float] = {}

    def cost(step_s: float, scenario) -> float:
        key = id(scenario)
        if key not in ettr:
            ettr[key] = expected_ettr(scenario, step_s)
        return step_s / ettr[key]

    return Objective("goodput", cost, "step_time_s")


sweep_commands.EXTRA_OBJECTIVES["goodput"] = _goodput_objective


def main() -> None:
    """Console entry point: run the app, mapping unexpected errors to exit code 1."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        app()
    except ScenarioError as exc:  # raised outside the commands' own handling
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:  # noqa: BLE001 - the contract: 1 for a failure of the program
        log.exception("internal error: %s", exc)
        typer.echo(
            "This is a bug in trainsim, not a problem with your input: please report it with "
            "the command line and the scenario files.",
            err=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
