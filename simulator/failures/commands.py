"""``trainsim goodput``: the job over days - interruptions, checkpoints, restarts, ETTR.

Registered on the CLI's app by :func:`register`; bad input exits 2 with file:line:col.
"""

from __future__ import annotations

import json
import logging
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_options import OptionError, check_out_dir
from simulator.infeasible import InfeasibleError
from simulator.scenario import Position, ScenarioError

# numpy, the step layer and the Monte Carlo are imported inside the command, so that
# registering it costs ``trainsim --help`` nothing.

log = logging.getLogger("trainsim.failures")
SWEEP_POINTS = 12


class Format(StrEnum):
    table = "table"
    json = "json"


def parse_interval_range(spec: str) -> list[float]:
    """``"5min:4h"`` -> 12 intervals (s) evenly spaced in log between them; ``"A:B:N"`` -> N.

    >>> [round(x) for x in parse_interval_range("10min:40min:3")]
    [600, 1200, 2400]
    """
    import numpy as np

    from simulator.units import parse_quantity

    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"--sweep-checkpoint-interval reads A:B[:N], e.g. 5min:4h (got {spec!r})")
    lo, hi = (parse_quantity(p.strip(), "time") for p in parts[:2])
    from simulator import limits

    try:
        n = int(parts[2]) if len(parts) == 3 else SWEEP_POINTS
    except ValueError:
        raise ValueError(f"--sweep-checkpoint-interval {spec}: N must be a whole number") from None
    too_many = limits.beyond("interval_points", n, f"--sweep-checkpoint-interval {spec}")
    if too_many:
        raise ValueError(too_many)
    if not (0 < lo < hi and math.isfinite(hi)) or n < 2:
        raise ValueError(f"--sweep-checkpoint-interval needs 0 < A < B and N >= 2 (got {spec!r})")
    return list(np.geomspace(lo, hi, n))


def _exit_bad_input(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _load(path: Path, overrides: list[str]):
    from simulator import api
    from simulator.scenario.failures import check_failures
    from simulator.scenario.located import located_error

    try:
        scenario = api.load(path, overrides)
    except ScenarioError as exc:
        _exit_bad_input(str(exc))
    if scenario.failures is None:
        _exit_bad_input(
            str(ScenarioError.single(Position(str(path)), "failures", "no failures: section"))
        )
    findings = check_failures(scenario)
    if findings:
        _exit_bad_input(str(located_error(path, overrides, findings)))
    return scenario


def _check_counts(days: float, seeds: int) -> None:
    """Days and seeds within :mod:`simulator.limits` (exit 2 naming the flag if not)."""
    from simulator import limits

    if not math.isfinite(days):
        _exit_bad_input(f"--days {days}: give a finite number of days")
    for message in (
        limits.beyond("days", days, f"--days {days:g}"),
        limits.beyond("seeds", seeds, f"--seeds {seeds}"),
    ):
        if message:
            _exit_bad_input(message)


def parse_seeds(value: str) -> int | None:
    """``--seeds``: a whole number of seeds, or ``auto`` (None: until ``--ci`` is met)."""
    if value.strip().lower() == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--seeds {value}: give a whole number or auto") from None
    if n < 1:
        raise ValueError(f"--seeds {value}: at least 1")
    return n


DaysOpt = Annotated[float, typer.Option("--days", min=0.001, help="Wall-clock days.")]
SeedsOpt = Annotated[
    str,
    typer.Option(
        "--seeds",
        help="Random seeds, or auto: seeds in tens (at least 20) until the 95% confidence "
        "interval of the mean ETTR is within --ci on each side.",
    ),
]
CiOpt = Annotated[
    float, typer.Option("--ci", min=1e-6, max=1.0, help="With --seeds auto: the ETTR interval.")
]
GoodputSetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="Override a field (repeatable).")
]
GoodputFormatOpt = Annotated[Format, typer.Option("--format", help="table or json.")]
GoodputOutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Write the timeline, the ETTR distribution (PNG, Parquet)."),
]
IntervalSweepOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep-checkpoint-interval",
        help="A:B[:N]: ETTR against N (12) intervals from A to B, e.g. 5min:4h.",
    ),
]
KeySweepOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep",
        help="KEY=V1,V2,...: ETTR against one field of failures: (e.g. "
        "failures.spares=0,16,64), the same seeds at every value.",
    ),
]


def goodput(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML with a failures: section.")],
    days: DaysOpt = 54.0,
    seeds: SeedsOpt = "100",
    ci: CiOpt = 0.005,
    set_: GoodputSetOpt = None,
    format: GoodputFormatOpt = Format.table,
    out: GoodputOutOpt = None,
    sweep: IntervalSweepOpt = None,
    key_sweep: KeySweepOpt = None,
) -> None:
    """Effective training time over days of failures, checkpoints and restarts (Monte Carlo)."""
    from simulator.units import UnitError

    overrides = set_ or []
    try:
        check_out_dir(out)
        count = parse_seeds(seeds)
    except (OptionError, ValueError) as exc:
        _exit_bad_input(str(exc))
    _check_counts(days, count or 1)  # auto: bounded by the limit itself
    s = _load(scenario, overrides)
    try:
        intervals = parse_interval_range(sweep) if sweep is not None else None
    except (ValueError, UnitError) as exc:
        _exit_bad_input(str(exc))
    if key_sweep is not None:
        _key_sweep(scenario, s, overrides, key_sweep, days, count, ci, format, out)
        return
    model, _ = _job_model(scenario, s, overrides, days, count, intervals, sweep)
    name = s.name or scenario.stem
    _run_goodput(model, name, days, count, ci, intervals, format, out)


def _run_goodput(model, name: str, days: float, count, ci: float, intervals, format, out):
    """The Monte Carlo of ``model`` over ``count`` seeds (None: until the ETTR is known within
    ``ci``), its summary printed (a table or JSON) and with ``out`` written."""
    from simulator.failures.montecarlo import (
        simulate_seeds,
        simulate_until,
        summarise,
        sweep_intervals,
    )

    record = 0 if out else None
    if count is None:
        result = simulate_until(model, days, ci, record_seed=record)
        log.info("%d seeds: ETTR known within %.4f", len(result.per_seed), ci)
    else:
        result = simulate_seeds(model, days, count, record_seed=record)
    summary = summarise(result)
    n = len(result.per_seed)
    table = sweep_intervals(model, intervals, days, n) if intervals else None
    if out is not None:
        from simulator.failures.report import write_goodput

        written = write_goodput(result, summary, out, name, table)
        log.info("wrote %s", ", ".join(str(p) for p in written))
    if format is Format.json:
        shown = dict(summary)
        if table is not None:
            shown["checkpoint_interval_sweep"] = table.to_dict("records")
        typer.echo(json.dumps(shown, indent=2))
        return
    warning = low_ettr_warning(summary)
    if warning:
        log.warning("%s", warning)
    _print_table(name, summary, table, result.model.slowdown)


def _key_sweep(scenario, s, overrides, text, days, seeds, ci, format, out) -> None:
    """``--sweep KEY=V1,V2``: the job model at each value, its goodput; a table, or JSON,
    and with ``--out`` goodput-sweep.csv and goodput-sweep.png."""
    from simulator.failures.key_sweep import needs_step, parse_sweep, sweep_rows
    from simulator.failures.report import draw_key_sweep

    try:
        key, values = parse_sweep(text)
    except ValueError as exc:
        _exit_bad_input(str(exc))
    models, inputs = [], None
    for value in values:
        point = [*overrides, f"{key}={value}"]
        sv = _load(scenario, point)
        model, made = _job_model(scenario, sv, point, days, seeds, None, None, inputs)
        inputs = None if needs_step(key) else made
        models.append(model)
    table = sweep_rows(models, key, values, days, seeds, ci)
    name = s.name or scenario.stem
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "goodput-sweep.csv", index=False)
        draw_key_sweep(table, key, out / "goodput-sweep.png", f"{name}: ETTR against {key}")
        log.info("wrote %s and %s", out / "goodput-sweep.csv", out / "goodput-sweep.png")
    if format is Format.json:
        typer.echo(json.dumps(table.to_dict("records"), indent=2))
        return
    typer.echo(f"{name}: ETTR against {key} ({days:g} days, the same seeds at every value)")
    for row in table.to_dict("records"):
        lost = ", ".join(
            f"{k[:-2]} {row[k]:,.1f} h" for k in ("waiting_h", "degraded_h", "lost_work_h")
        )
        typer.echo(
            f"  {str(row[key]):>10}  ETTR {row['ettr_mean']:.4f} +- {row['ettr_ci95']:.4f} "
            f"({row['seeds']} seeds); {lost}"
        )


def _job_model(
    scenario: Path, s, overrides, days: float, seeds: int | None, intervals, sweep, inputs=None
):
    """The job model of ``s`` and its step's inputs: its step simulated (and re-timed for a
    fleet) unless ``inputs`` are given, its failures checked against it; bad input exits 2
    at the file's line."""
    from simulator import limits
    from simulator.failures import adapter
    from simulator.scenario.failures import check_failures
    from simulator.scenario.located import located_error

    log.info(
        "simulating one step of %s on %d %ss",
        s.name or scenario.name,
        s.num_gpus,
        s.cluster.accelerator.kind.upper(),
    )
    try:
        topo = adapter.topology(s)  # built once: the step, the checkpoint, the part counts
    except InfeasibleError as exc:
        _exit_bad_input(f"{scenario}: {exc}")
    with topo:  # released at the end (its graph's reference cycles)
        findings = adapter.straggler_link_findings(s, topo)
        if findings:
            _exit_bad_input(str(located_error(scenario, overrides, findings)))
        try:
            inputs = inputs or adapter.step_inputs(s, topo)
        except InfeasibleError as exc:
            _exit_bad_input(f"{scenario}: {exc}")
        findings = check_failures(s, inputs.step_time_s)
        if findings:
            _exit_bad_input(str(located_error(scenario, overrides, findings)))
        if intervals and min(intervals) < inputs.step_time_s:
            _exit_bad_input(
                f"--sweep-checkpoint-interval {sweep}: the shortest interval "
                f"({min(intervals):.3g} s) is below one step ({inputs.step_time_s:.3g} s): "
                "a checkpoint comes after whole steps"
            )
        try:
            model = adapter.job_model(s, inputs, topo)
        except InfeasibleError as exc:
            _exit_bad_input(f"{scenario}: {exc}")
        events = (model.unplanned_rate_s + model.maintenance_rate_s) * days * 86400.0
        too_many = limits.beyond(
            "events_per_seed", events, f"{days:g} days at this job's rates (interruptions)"
        )
        if too_many:
            _exit_bad_input(f"{scenario}: failures: {too_many}")
        shown = seeds or "auto"
        if seeds and events * seeds > 2e6:  # about 50-100 us each: say what is coming
            log.info(
                "about %s interruptions to simulate (%d seeds x %s), a minute or more",
                f"{events * seeds:,.0f}", seeds, f"{events:,.0f}",
            )  # fmt: skip
        log.info("%s seeds of %g days", shown, days)
        adapter.prefetch_elastic(model, days, seeds or 10)  # each DP size reached, in parallel
    return model, inputs


def _hours(v: float) -> str:
    return f"{v:,.1f} h"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f} min" if seconds < 2 * 86400 else f"{seconds / 86400:,.1f} d"


# What to change when a loss dominates (the warning under a low ETTR).
ADVICE = {
    "lost_work": "checkpoint more often (failures.checkpoint.interval; the optimum is printed "
    "above) or asynchronously (failures.checkpoint.mode: async)",
    "waiting": "keep more hot spares (failures.spares) or repair faster (failures.repair.mean)",
    "restart": "restart faster (failures.restart.scheduling, process_start; the checkpoint "
    "load reads at cluster.storage's bandwidth)",
    "detection": "detect and diagnose faster (failures.detection: heartbeat_timeout, "
    "watchdog_timeout, diagnosis)",
    "checkpoint": "checkpoint asynchronously (failures.checkpoint.mode: async), less often, "
    "or to faster storage (cluster.storage)",
    "maintenance": "shorten planned maintenance (failures.maintenance.duration)",
    "degraded": "replace slow GPUs (failures.stragglers; failures.fleet.slow.evict and its "
    "threshold for slow nodes) or keep spares for the elastic policy",
}
LOW_ETTR = 0.8  # Llama 3 and MegaScale report above 0.9 at 10-16K GPUs


def low_ettr_warning(summary: dict) -> str | None:
    """A sentence naming the largest loss and what to change, when ETTR is below
    :data:`LOW_ETTR`; None otherwise."""
    if summary["ettr_mean"] >= LOW_ETTR:
        return None
    lost = summary["lost_hours_by_category"]
    worst = max(lost, key=lost.get)
    wall = summary["days"] * 24.0
    return (
        f"ETTR {summary['ettr_mean']:.3f} is low (published 10K-16K-GPU jobs report above "
        f"0.9): {worst} takes {lost[worst]:,.1f} h of the {wall:,.0f} h "
        f"({lost[worst] / wall:.0%}); to reduce it, {ADVICE.get(worst, 'see its settings')}"
    )


def _print_table(name: str, summary: dict, table, slowdown: float = 1.0) -> None:
    d = summary
    opt = d["optimal_checkpoint_interval_s"]
    wall = d["days"] * 24.0
    lines = [
        f"{name}: {d['seeds']} seeds of {d['days']:g} days ({wall:,.0f} h of wall clock)",
        f"  step time                  {d['step_time_s']:.3f} s"
        + (
            f" ({d['step_time_s'] * slowdown:.3f} s on average with random stragglers, "
            f"x{slowdown:.3f}: ETTR counts it as lost time)"
            if slowdown > 1.0
            else ""
        ),
    ]
    if d["interruptions_mean"]:
        mtti = f" (MTTI {d['mtti_hours']:.2f} h)" if d["mtti_hours"] else ""
        lines.append(
            f"  interruptions              {d['interruptions_mean']:.1f}: "
            f"{d['unplanned_interruptions_mean']:.1f} unplanned{mtti}, "
            f"{d['planned_interruptions_mean']:.1f} planned"
        )
    else:
        lines.append("  interruptions              0")
    lines += [
        f"  ETTR                       {d['ettr_mean']:.3f} +- {d['ettr_ci95']:.3f} (95% CI of "
        f"the mean; seeds 5%: {d['ettr_p5']:.3f}, 95%: {d['ettr_p95']:.3f}); productive "
        "training time / wall clock",
        f"  goodput                    {d['goodput_tokens_per_s']:,.0f} tokens/s",
        f"  hot spares                 {d['spares']:,} nodes"
        + (
            " (auto: the 99th percentile of nodes away for repair at once)"
            if d["spares_auto"]
            else ""
        ),  # fmt: skip
    ]
    asked = d["checkpoint_interval_requested_s"]
    simulated = d["checkpoint_interval_s"]
    given = f"{_minutes(asked)} as given" if asked is not None else "Daly's optimum"
    lines.append(
        f"  checkpoint interval        {given}, {_minutes(simulated)} as simulated "
        f"(whole steps of {d['step_time_s'] * slowdown:.3f} s)"
    )
    if opt["young"]:
        lines.append(
            f"  optimum (Young / Daly)     {_minutes(opt['young'])} / {_minutes(opt['daly'])}"
            + (" (the asynchronous drain's length: no shorter)" if opt["drain_bound"] else "")
        )
    lines += _fleet_lines(d.get("fleet")) + _loss_lines(d, wall)
    if table is not None:
        lines.append("  ETTR against the checkpoint interval (as asked -> as simulated)")
        best = table["ettr_mean"].idxmax()
        for i, row in table.iterrows():
            mark = _marks(row["effective_interval_s"], table, opt, i == best)
            asked, used = _minutes(row["interval_s"]), _minutes(row["effective_interval_s"])
            lines.append(
                f"    {asked:>10} -> {used:>10}"
                f"  {row['ettr_mean']:.4f}  [{row['ettr_p5']:.4f}, {row['ettr_p95']:.4f}]{mark}"
            )
    typer.echo("\n".join(lines))


def _loss_lines(d: dict, wall: float) -> list[str]:
    """Lost hours by category with their intervals, and interruptions by cause."""
    ci = d["lost_hours_ci95_by_category"]
    lines = ["  lost time (mean per seed, +- its 95% CI)"]
    lines += [
        f"    {k:<24} {_hours(v):>10} +- {ci[k]:,.1f} h"
        for k, v in d["lost_hours_by_category"].items()
    ]
    total = sum(d["lost_hours_by_category"].values())
    lines.append(
        f"    {'total':<24} {_hours(total)} of {wall:,.0f} h ({total / wall:.1%}; "
        f"1 - ETTR = {1 - d['ettr_mean']:.1%})"
    )
    lines.append("  interruptions by cause (mean)")
    for k, v in sorted(d["interruptions_by_cause"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {k:<24} {v:.1f}")
    return lines


def _fleet_lines(f: dict | None) -> list[str]:
    """The node-level model's settings (``failures.fleet``) as simulated: its defaults shown."""
    if f is None:
        return []
    never = "never" if f["retire_after"] is None else f"after {f['retire_after']} failures"
    costs = f["slow_cost_by_stage"]
    evict = (
        f"evicted after {f['slow_delay_s'] / 60:.0f} min when the step is "
        f">= {f['slow_threshold']:.3g}x"
        if f["slow_evict"]
        else "never evicted"
    )
    return [
        f"  fleet                      node MTBF {f['node_mtbf_days']:,.0f} d; lemons "
        f"{f['lemon_fraction']:.0%} at {f['lemon_multiplier']:g}x, retired {never}; "
        f"{f['standbys']} warm standbys, pool wait {f['pool_wait_s'] / 60:.0f} min",
        f"  repair                     automatic {f['auto_s'] / 3600:g} h, manual "
        f"{f['manual_s'] / 86400:g} d for {f['escalate']:.0%}; unfixed "
        f"{f['unfixed_auto']:.0%} / {f['unfixed_manual']:.0%}; misdiagnosis "
        f"{f['misdiagnosis']:.0%}",
        f"  slow nodes                 {f['slow_rate_s'] * 7 * 86400:.3g} per node-week, step "
        f"x{min(costs):.3f}-{max(costs):.3f} by stage; {evict}",
    ]


def _marks(x: float, table, opt: dict, best: bool) -> str:
    """Mark the grid point nearest (in log) to each optimum, and the simulated best."""
    marks = ["best"] if best else []
    import numpy as np

    grid = np.log(table["effective_interval_s"].to_numpy())
    for name in ("young", "daly"):
        if opt.get(name):
            nearest = grid[np.argmin(np.abs(grid - math.log(opt[name])))]
            if math.isclose(nearest, math.log(x)):
                marks.append(f"<- {name.capitalize()} {opt[name] / 60:.1f} min")
    return ("  " + "  ".join(marks)) if marks else ""


def register(app: typer.Typer) -> None:
    """Add ``goodput`` to the ``trainsim`` app."""
    app.command("goodput")(goodput)
