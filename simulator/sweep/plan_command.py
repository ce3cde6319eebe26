"""``trainsim plan``: search the parallel plans of a scenario (:mod:`simulator.sweep.search`),
print the ranked ones with why the pick wins, and write them as scenario files."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_options import safe_name
from simulator.scenario import ScenarioError
from simulator.sweep.commands import (
    EXTRA_OBJECTIVES,
    AddressOpt,
    BackendName,
    BackendOpt,
    Format,
    FormatOpt,
    FreshOpt,
    ProgressOpt,
    WorkersOpt,
    _backend,
    _bad_input,
    _check_out,
    _jsonable,
    _progress,
    _stdout_for_results_only,
    log,
)

GpusOpt = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="GPUs to plan for, one count or several (256,512,1024); default: the scenario's.",
    ),
]
TopOpt = Annotated[
    int, typer.Option("--top", min=1, help="Plans to rank by full simulation (at least).")
]
BudgetOpt = Annotated[
    int, typer.Option("--budget", min=1, help="Candidates to simulate cheaply, at most.")
]
FixOpt = Annotated[
    list[str] | None,
    typer.Option("--fix", help="Pin a knob: KEY=VALUE, or KEY for the scenario's value."),
]
VaryOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--vary",
        help="Open a knob the search keeps (sequence_parallel, bucket_size): KEY or KEY=V1,V2.",
    ),
]
HeadroomOpt = Annotated[
    str, typer.Option("--memory-headroom", help="Memory a plan must leave free (e.g. 2GB).")
]
ObjectiveOpt = Annotated[
    str, typer.Option("--objective", help="step-time, tokens-per-s, mfu or goodput.")
]
PlanOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Folder for plan-1.yaml..., results.parquet and candidates.csv (default "
        "reports/plans/NAME).",
    ),
]


def plan(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario YAML (model, cluster, batch).", show_default=False)
    ],
    gpus: GpusOpt = None,
    top: TopOpt = 5,
    budget: BudgetOpt = 64,
    fix: FixOpt = None,
    vary: VaryOpt = None,
    memory_headroom: HeadroomOpt = "2GB",
    objective: ObjectiveOpt = "step-time",
    backend: BackendOpt = BackendName.local,
    workers: WorkersOpt = None,
    address: AddressOpt = None,
    out: PlanOutOpt = None,
    format: FormatOpt = Format.table,
    fresh: FreshOpt = False,
    progress: ProgressOpt = None,
) -> None:
    """Search parallel plans: bound every DP/TP/PP/CP/EP/ZeRO/schedule/micro-batch/recompute
    candidate, simulate cheaply those that could win, rank the best by full simulation, and
    write them as scenario files."""
    from simulator.sweep.explain import write_plans

    base, options = _options(scenario, gpus, top, budget, fix, vary, memory_headroom, objective)
    if out is None:  # the scenario's name as one folder name
        out = Path("reports") / "plans" / safe_name(base.name or scenario.stem)
    _check_out(out, fresh)
    result = _search(scenario, options, backend, workers, address, out, progress)
    out.mkdir(parents=True, exist_ok=True)
    result.candidate_frame().to_csv(out / "candidates.csv", index=False)
    written = write_plans(result, out, top)
    for path in written:
        log.info("wrote %s", path)
    ranked = _with_runs(result, written)
    if format is Format.json:
        _print_json(result, ranked, written)
    else:
        _print_table(result, ranked, written, scenario)
    if ranked.empty or not (ranked["status"] == "ok").any():
        _bad_input(result.nothing_fits())  # the job cannot be laid out on this cluster


def _options(scenario, gpus, top, budget, fix, vary, memory_headroom, objective):
    """(the base scenario, the search's options) from the command's; bad input exits 2."""
    from simulator.sweep import adapter
    from simulator.sweep.objectives import OBJECTIVES
    from simulator.sweep.search import SearchOptions

    factories = {**OBJECTIVES, **EXTRA_OBJECTIVES}
    if objective not in factories:
        _bad_input(f"--objective {objective}: one of {', '.join(factories)}")
    try:
        base = adapter.load_scenario(scenario)
    except ScenarioError as exc:
        _bad_input(str(exc))
    if objective == "goodput" and base.failures is None:
        _bad_input(
            f"--objective goodput: {scenario} has no failures: section (the failure model "
            "that goodput is measured with; e.g. failures: {preset: llama3-table5})"
        )
    options = SearchOptions(
        gpus=_gpu_counts(gpus),
        fixes=tuple(fix or ()),
        varies=tuple(vary or ()),
        top=top,
        budget=budget,
        headroom=_headroom(memory_headroom),
        objective=factories[objective](),
    )
    return base, options


def _search(scenario, options, backend, workers, address, out, progress):
    """The search on the chosen backend (one Ray session for all its rounds); its errors
    exit 2."""
    from simulator.sweep.backends import BackendError, ray_session
    from simulator.sweep.search import search_plans
    from simulator.sweep.space import SpaceError

    run_backend = _backend(backend, workers, address)
    session = ray_session(address, workers) if backend is BackendName.ray else nullcontext()
    try:
        with session, _stdout_for_results_only():
            return search_plans(scenario, options, run_backend, out, _progress(progress))
    except (BackendError, ScenarioError, SpaceError) as exc:
        _bad_input(str(exc))


def _with_runs(result, written: list[Path]):
    """The ranked plans with each one's ``--set`` line and written file."""
    from simulator.sweep.explain import set_line

    ranked = result.ranked
    if ranked.empty:
        return ranked
    return ranked.assign(
        set=[set_line(result, r) for _, r in ranked.iterrows()],
        file=[str(p) for p in written] + [""] * (len(ranked) - len(written)),
    )


def _print_json(result, ranked, written: list[Path]) -> None:
    from simulator.sweep.explain import why

    data = result.as_dict()
    data["ranked"] = ranked.to_dict("records") if not ranked.empty else []
    data["written"] = [str(p) for p in written]
    data["why"] = why(result)
    typer.echo(json.dumps(data, indent=2, default=_jsonable))


def _print_table(result, ranked, written: list[Path], scenario: Path) -> None:
    from simulator.sweep.explain import why
    from simulator.sweep.plan_result import rejection_summary
    from simulator.sweep.tables import format_table

    typer.echo(result.headline())
    if ranked.empty:
        typer.echo(result.nothing_fits())
    else:
        shown = ranked.drop(columns=["utilisation", "warnings", "set", "file", "reason"])
        typer.echo(format_table(shown))
        typer.echo("")
        for line in why(result):
            typer.echo(line)
        typer.echo("")
        typer.echo("to run them:")
        for (_, r), path in zip(ranked.iterrows(), written, strict=False):
            typer.echo(f"  #{r['rank']}: trainsim run {path}")
            typer.echo(f"      = trainsim run {scenario} {r['set']}")
    typer.echo("")
    typer.echo("screened out or not ranked:")
    typer.echo(rejection_summary(result.candidate_frame()).to_string(index=False))


def _gpu_counts(text: str | None) -> tuple[int | None, ...]:
    """``--gpus 256,512,1024`` (or one count) as a tuple; bad input exits 2."""
    if text is None:
        return (None,)
    out = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            _bad_input(f"--gpus {text}: {part.strip()!r} is not a whole number of GPUs")
        if n < 1:
            _bad_input(f"--gpus {text}: {n} GPUs")
        out.append(n)
    return tuple(dict.fromkeys(out))


def _headroom(text: str) -> float:
    from simulator.units import parse_quantity

    try:
        value = float(parse_quantity(text, "bytes"))
    except (ValueError, TypeError) as exc:
        _bad_input(f"--memory-headroom {text}: {exc}")
    if value < 0:
        _bad_input(f"--memory-headroom {text}: must not be negative")
    return value


def register(app: typer.Typer) -> None:
    """Add ``plan`` to the ``trainsim`` app."""
    app.command()(plan)
