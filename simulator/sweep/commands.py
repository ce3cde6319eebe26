"""``trainsim sweep``, registered on the CLI's typer app by :func:`register`, and the options
and helpers it shares with ``trainsim plan`` (:mod:`simulator.sweep.plan_command`). Results to
stdout, progress and logs to stderr, exit 2 for bad input."""

from __future__ import annotations

import json
import logging
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_options import OptionError, check_out_dir, safe_name
from simulator.scenario import ScenarioError

log = logging.getLogger("trainsim.sweep")


class Format(StrEnum):
    table = "table"
    json = "json"


class BackendName(StrEnum):
    local = "local"
    ray = "ray"


FormatOpt = Annotated[Format, typer.Option("--format", help="table or json.")]
BackendOpt = Annotated[BackendName, typer.Option("--backend", help="local (process pool) or ray.")]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Processes (local, capped at the core count) or CPUs "
        "of a local Ray; default: the core count.",
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address", help="Ray cluster to join ('auto' or host:port); none starts a local Ray."
    ),
]
ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Progress bar on stderr (default: when stderr is a terminal).",
        show_default=False,
    ),
]


def _stdout_for_results_only():
    """While points run, anything printed (Ray's driver relays its raylet's messages with
    ``print``) goes to stderr: stdout holds the results alone, so ``--format json`` parses."""
    import sys
    from contextlib import redirect_stdout

    return redirect_stdout(sys.stderr)


def _progress(flag: bool | None) -> bool:
    """The progress flag, or when it is not given: whether stderr is a terminal."""
    import sys

    return flag if flag is not None else sys.stderr.isatty()


def _bad_input(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


RetryOpt = Annotated[bool, typer.Option("--retry-errors", help="Simulate stored error rows again.")]
FreshOpt = Annotated[
    bool,
    typer.Option(
        "--fresh",
        help="Simulate every point again: the folder's results.parquet is moved to "
        "results.previous.parquet first (by default a run resumes: stored points are kept).",
    ),
]


def _check_out(out: Path | None, fresh: bool = False) -> None:
    """An output folder that cannot be written, or whose results file is not one a sweep
    wrote, fails now, not after every point ran (and the file is left untouched). With
    ``fresh``, a results file of ours is moved aside, so every point is simulated again."""
    from simulator.sweep.store import StoreError, check_store, set_aside

    try:
        check_out_dir(out)
        if out is not None:
            check_store(out)
            if fresh:
                set_aside(out)
    except (OptionError, StoreError) as exc:
        _bad_input(str(exc))


def _backend(backend: BackendName, workers: int | None, address: str | None):
    from simulator.sweep.runner import make_backend

    if address is not None and backend is not BackendName.ray:
        _bad_input("--address needs --backend ray")
    if backend is BackendName.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            _bad_input("the Ray backend needs ray: pip install 'trainsim[ray]'")
    return make_backend(backend.value, workers, address)


def _log_warnings(frame) -> None:
    if "warnings" not in frame:
        return
    counts = Counter(w for ws in frame["warnings"] for w in ws)
    for text, n in counts.items():
        log.warning("%d point%s: %s", n, "s" if n > 1 else "", text)


SweepOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Folder for results.parquet, deltas.csv and the pictures "
        "(default reports/sweeps/NAME).",
    ),
]


def sweep(
    spec: Annotated[Path, typer.Argument(help="Sweep spec YAML.", show_default=False)],
    backend: BackendOpt = BackendName.local,
    workers: WorkersOpt = None,
    address: AddressOpt = None,
    out: SweepOutOpt = None,
    format: FormatOpt = Format.table,
    retry_errors: RetryOpt = False,
    fresh: FreshOpt = False,
    progress: ProgressOpt = None,
) -> None:
    """Run a what-if study: every point of a spec (grid, zip, samples), resumable."""
    from simulator.sweep.backends import BackendError
    from simulator.sweep.runner import run_sweep
    from simulator.sweep.spec import load_spec
    from simulator.sweep.tables import deltas_table, format_table, points_table

    try:
        loaded = load_spec(spec)
    except ScenarioError as exc:
        _bad_input(str(exc))
    out_dir = out or Path("reports") / "sweeps" / safe_name(loaded.name)
    _check_out(out_dir, fresh)
    run_backend = _backend(backend, workers, address)
    try:
        with _stdout_for_results_only():
            frame = run_sweep(loaded, out_dir, run_backend, retry_errors, _progress(progress))
    except BackendError as exc:
        _bad_input(str(exc))
    keys = loaded.keys
    deltas = deltas_table(frame, keys)
    deltas.to_csv(out_dir / "deltas.csv", index=False)
    _draw(frame, loaded, out_dir)
    _log_warnings(frame)
    log.info("wrote %s", out_dir / "results.parquet")
    if format is Format.json:
        _print_json(frame, loaded.name, out_dir)
        return
    typer.echo(f"{loaded.name}: {len(frame) - 1} points, base {loaded.base_path}")
    typer.echo(format_table(points_table(frame, keys), keys))
    typer.echo("")
    typer.echo("against the base scenario (pt -1):")
    typer.echo(format_table(deltas.drop(columns=["status"]), keys))


def _draw(frame, loaded, out_dir: Path) -> None:
    """The spec's plots (or the default set for its keys); one that cannot be drawn is
    named in a warning."""
    from simulator.sweep import plots

    keys = loaded.keys
    wanted = [p.model_dump() for p in loaded.model.plots] or plots.default_plots(keys)
    for plot in wanted:
        try:
            log.info("wrote %s", plots.draw(frame, plot, out_dir, loaded.name, keys))
        except plots.PlotError as exc:
            log.warning("not drawn: %s of %s by %s: %s", plot["kind"], plot.get("metric"),
                        plot["x"], exc)  # fmt: skip


def _print_json(frame, name: str, out_dir: Path) -> None:
    from simulator.sweep.tables import json_records

    rows = json_records(frame.sort_values("point").drop(columns=["sim_time_s"], errors="ignore"))
    results = str(out_dir / "results.parquet")
    data = {"name": name, "results": results, "rows": rows}
    typer.echo(json.dumps(data, indent=2, default=_jsonable, allow_nan=False))


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# objectives the CLI adds beyond the search's own (goodput, from the failure model)
EXTRA_OBJECTIVES: dict = {}


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to the ``trainsim`` app."""
    app.command()(sweep)
