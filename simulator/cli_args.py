"""The command line's shared argument and option types (typer annotations)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class Format(StrEnum):
    table = "table"
    json = "json"


ScenarioArg = Annotated[Path, typer.Argument(help="Scenario YAML file.", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a field: --set parallelism.tp=4 (repeatable)."),
]
TopoSetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a field of the topology file: --set nodes=32, --set node.gpus=4 "
        "(repeatable).",
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", help="table or json.")]
ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Progress on stderr (default: when stderr is a terminal).",
        show_default=False,
    ),
]


StepsOpt = Annotated[
    int,
    typer.Option(
        "--steps",
        min=0,
        max=10_000,
        help="Draw this many steps under the scenario's variability (GPU speed spread, "
        "kernel and collective jitter) from the one simulated: p50/p90/p99 and the GPU the "
        "others waited on; steps.csv with --out.",
    ),
]
