"""``trainsim``: the command line. Parses arguments, calls :mod:`simulator.api`, prints.

Results go to stdout, logs to stderr. Exit codes: 0 ok, 2 bad input (the message names
file:line:col and the field, or the option), 1 a failure of the program itself, 3 an
out-of-memory run under ``run --fail-on-oom``. Output paths are checked before simulating.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from simulator import cli_catalog, cli_network
from simulator.cli_args import Format as Format
from simulator.cli_args import (
    FormatOpt,
    ProgressOpt,
    ScenarioArg,
    SetOpt,
    StepsOpt,
)
from simulator.cli_common import GB, api, checked, fail, load
from simulator.cli_options import (
    LINKS_DEFAULT_MAX_GPUS,
    check_out_dir,
    check_out_file,
    parse_ranks,
    parse_window,
    track_links,
)
from simulator.failures.commands import register as register_goodput
from simulator.scenario import ScenarioError
from simulator.sweep import commands as sweep_commands
from simulator.sweep import plan_command

log = logging.getLogger("trainsim")


app = typer.Typer(
    name="trainsim",
    help="Discrete-event simulator of large-language-model training clusters.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help and errors: no rich import on --help's path
)


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
    s = load(scenario, set_)
    report = api.memory_report(s)
    for caveat in report.caveats:
        log.warning("%s", caveat)
    if format is Format.json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    frame = api.memory_frame(report)
    tensors = frame[["params", "grads", "optimizer", "activations", "buffers"]].sum(axis=1)
    outside = frame["runtime"] + frame["nccl"]  # outside the allocator
    frame["reserve"] = frame["total"] - outside - tensors  # the allocator's
    columns = ["rank_kind", "params", "grads", "optimizer", "activations", "buffers"]
    if (frame["reserve"] > 0).any():
        columns.append("reserve")
    shown = frame[[*columns, "runtime", "nccl", "total", "capacity"]].copy()
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


def _check_stragglers(s, topo, path: Path, overrides) -> None:
    """Straggler links must be links of the topology: exit 2 at the field's line if not."""
    findings = api.straggler_link_findings(s, topo)
    if findings:
        from simulator.scenario.located import located_error

        fail(located_error(path, overrides, findings))


RunOutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Write summary.json, the trace table and the memory timeline here."),
]
FailOnOomOpt = Annotated[
    bool, typer.Option("--fail-on-oom", help="Exit 3 when a rank runs out of memory.")
]
LinksOpt = Annotated[
    bool | None,
    typer.Option(
        "--links/--no-links",
        help="With --out: track every link's load for links.parquet and links.png "
        f"(default: on up to {LINKS_DEFAULT_MAX_GPUS:,} GPUs; it slows a larger step "
        "about 2x).",
        show_default=False,
    ),
]


@app.command()
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    format: FormatOpt = Format.table,
    out: RunOutOpt = None,
    fail_on_oom: FailOnOomOpt = False,
    links: LinksOpt = None,
    progress: ProgressOpt = None,
    steps: StepsOpt = 0,
) -> None:
    """Simulate one steady-state training step: step time, MFU, bubble, overlap, memory.

    An out-of-memory step is still simulated and reported (exit 0), with a warning on stderr;
    ``--fail-on-oom`` makes it exit 3."""
    from simulator.cli_progress import Stages
    from simulator.report.run_report import oom_message

    checked(check_out_dir, out)
    s = load(scenario, set_)
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
    result = _simulate(s, scenario, set_, stages, track, steps)
    if out is not None:
        with stages.stage(f"writing the report to {out}") as stage:
            written = api.write_run(result, out, on_file=stage.item)
        log.info("wrote %s", ", ".join(str(p) for p in written))
    summary = result.summary
    if summary["oom"]:
        typer.echo(oom_message(summary, s.cluster.accelerator.name), err=True)
    _print_run(summary, s.name or scenario.name, format)
    if summary["oom"] and fail_on_oom:
        raise typer.Exit(3)


def _simulate(s, scenario: Path, set_, stages, track: bool, steps: int):
    """``s`` run on its topology, built once for the warnings and the run (a 16K-GPU fabric
    takes longer to build than its step takes to simulate) and released after (its graph's
    reference cycles); an infeasible plan exits 2."""
    try:
        with stages.stage("building the topology"):
            topo = api.build_topology(s.cluster)
        with topo:
            _check_stragglers(s, topo, scenario, set_)
            for warning in api.topology_warnings(s, topo):
                log.warning("%s", warning)
            with stages.stage(f"simulating the step on {s.num_gpus:,} GPUs"):
                return api.run(s, topo, track_links=track, samples=steps)
    except api.InfeasibleError as exc:  # anything else is a bug: exit 1, see main()
        typer.echo(f"error: {scenario}: {exc}", err=True)
        raise typer.Exit(2) from None


def _print_run(summary: dict, name: str, format: Format) -> None:
    if format is Format.json:
        typer.echo(json.dumps(summary, indent=2, default=float))
        return
    from simulator.report.run_report import headline_rows

    typer.echo(name)
    for label, value in headline_rows(summary):
        typer.echo(f"  {label:<26} {value}")


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
    from simulator.report.run_report import gantt_headline, load_run

    path = out or run_dir / "gantt.png"
    checked(check_out_file, path, "--out")
    shown = checked(parse_ranks, ranks) if ranks else None
    span = checked(parse_window, window)
    try:
        summary, trace, _ = load_run(run_dir)
    except (OSError, ValueError) as exc:
        fail(f"{run_dir}: {exc}")
    simulated = sorted(int(r) for r in trace["rank"].unique())
    for r in shown or []:
        if r not in simulated:
            fail(
                f"--ranks: rank {r} was not simulated; this run simulated ranks "
                f"{', '.join(map(str, simulated))}"
            )
    end = float(trace["end_s"].max()) if len(trace) else 0.0
    if span is not None and span[0] >= end:
        fail(f"--window {window}: starts after the step ends (at {end:.6g} s): nothing to draw")
    name = str(summary.get("scenario") or run_dir.name)
    try:
        title = gantt_headline(summary, name)
    except (KeyError, TypeError, ValueError):  # a summary without the metrics: the name
        title = name
    draw_gantt(trace, [path], shown, summary.get("stage_of_rank"), title, window=span)
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

    checked(check_out_file, out, "--out")

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
            fail(str(exc))


cli_network.register(app)  # trainsim topology, collective
cli_catalog.register(app)  # trainsim validate, calibrate, check, models, costs, accelerators
register_goodput(app)
sweep_commands.register(app)  # trainsim sweep (simulator/sweep/commands.py)
plan_command.register(app)  # trainsim plan (simulator/sweep/plan_command.py)


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
