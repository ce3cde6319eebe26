"""``trainsim``: the command line. Parses arguments, calls :mod:`simulator.api`, prints.

Results go to stdout, logs to stderr. Exit codes: 0 ok, 2 bad input (the message names
file:line:col and the field), 1 a failure of the program itself.
"""

from __future__ import annotations

import json
import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from simulator import api
from simulator.hardware import CATALOG
from simulator.scenario import ScenarioError
from simulator.scenario.model_catalog import MODEL_CATALOG
from simulator.scenario.schema import ModelConfig

log = logging.getLogger("trainsim")

app = typer.Typer(
    name="trainsim",
    help="Discrete-event simulator of large-language-model training clusters.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class Format(StrEnum):
    table = "table"
    json = "json"


ScenarioArg = Annotated[Path, typer.Argument(help="Scenario YAML file.", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: --set parallelism.tp=4 (repeatable)."),
]
FormatOpt = Annotated[Format, typer.Option("--format", help="table or json.")]


def _fail_bad_input(exc: ScenarioError) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


def _load(path: Path, overrides: list[str] | None):
    try:
        return api.load(path, overrides or [])
    except ScenarioError as exc:
        _fail_bad_input(exc)


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
    if format is Format.json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    frame = api.memory_frame(report)
    shown = frame[
        ["rank_kind", "params", "grads", "optimizer", "activations", "buffers", "total", "capacity"]
    ].copy()
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
def accelerators(format: FormatOpt = Format.json) -> None:
    """The accelerator catalog (SI units: FLOP/s, bytes, B/s)."""
    typer.echo(json.dumps([a.model_dump() for a in CATALOG.values()], indent=2))


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
        sys.exit(1)


if __name__ == "__main__":
    main()
