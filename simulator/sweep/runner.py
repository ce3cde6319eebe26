"""Run a sweep: resolve every point, skip what the store already holds, simulate the rest on a
backend, and write one row per point.

Resuming is by scenario hash: a point whose resolved scenario was simulated before (in this
sweep or any earlier one writing to the same folder) is not simulated again, so re-running a
finished sweep simulates nothing. Identical scenarios within one sweep are simulated once.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from simulator.scenario import ScenarioError
from simulator.sweep import columns
from simulator.sweep.backends import run_local, run_ray
from simulator.sweep.spec import SweepSpec
from simulator.sweep.store import read_results, results_by_hash, write_results
from simulator.sweep.worker import Task, scenario_hash, unresolved_hash

log = logging.getLogger("trainsim.sweep")
FLUSH_EVERY_S = 10.0  # rewrite results.parquet at most this often while points finish

Backend = Callable[[list[Task]], Iterator[dict]]


@dataclass(frozen=True)
class ResolvedPoint:
    """A point with its scenario hash; ``reason`` is set (and ``task`` None) if infeasible."""

    index: int
    values: dict[str, Any]
    scenario_hash: str
    task: Task | None
    reason: str = ""


def resolve_points(
    spec: SweepSpec, points: list[tuple[int, dict[str, Any]]]
) -> list[ResolvedPoint]:
    """Build each point's scenario; a ScenarioError makes the point infeasible with the
    loader's message (file:line:col or the ``--set`` override, and the field)."""
    out = []
    for index, values in points:
        try:
            scenario = spec.scenario(values)
        except ScenarioError as exc:
            h = unresolved_hash(str(spec.base_path), spec.overrides(values))
            out.append(ResolvedPoint(index, values, h, None, str(exc)))
            continue
        h = scenario_hash(scenario)
        out.append(ResolvedPoint(index, values, h, Task(h, scenario)))
    return out


def make_backend(name: str, workers: int | None = None, address: str | None = None) -> Backend:
    """``local`` (process pool, the default) or ``ray``."""
    if name == "local":
        return lambda tasks: run_local(tasks, workers)
    if name == "ray":
        return lambda tasks: run_ray(tasks, address, workers)
    raise ValueError(f"unknown backend {name!r}: local or ray")


def assemble(
    resolved: list[ResolvedPoint],
    keys: list[str],
    results: dict[str, dict],
    base_values: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """One row per point whose result is known: point, base flag, each swept value (as a
    number in SI units, and as written: :mod:`simulator.sweep.columns`), the result with its
    stream utilisation spread into columns. ``base_values`` are the swept keys' values as the
    base scenario writes them (the base row's text; its numbers come from its scenario)."""
    rows = []
    for p in resolved:
        row: dict[str, Any] = {"point": p.index, "base": p.index < 0}
        for k in keys:
            written = p.values.get(k) if p.index >= 0 else (base_values or {}).get(k)
            got = columns.resolved_value(p.task.scenario, k) if p.task is not None else None
            row[k] = columns.numeric(got, written)
            row[columns.text_column(k)] = columns.text(written if written is not None else got)
        if p.task is None:
            row.update(scenario_hash=p.scenario_hash, status="infeasible", reason=p.reason)
            row["warnings"] = []
        elif p.scenario_hash in results:
            row.update(results[p.scenario_hash])
        else:
            continue
        rows.append(columns.utilisation_columns(row))
    frame = pd.DataFrame(rows)
    if not frame.empty and "warnings" in frame:
        frame["warnings"] = frame["warnings"].map(lambda w: list(w) if w is not None else [])
    return frame


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    backend: Backend | None = None,
    retry_errors: bool = False,
    progress: bool = True,
    extra_points: list[tuple[int, dict[str, Any]]] | None = None,
) -> pd.DataFrame:
    """Run every point of ``spec`` (plus the base scenario as point -1) and return the rows,
    also written to ``out_dir/results.parquet``.

    ``retry_errors`` simulates again the stored points whose status is ``error``.
    ``extra_points`` adds (index, values) points beyond the spec's (used by plan search).
    """
    backend = backend or make_backend("local")
    keys = spec.keys
    points = [(-1, {})] + [(p.index, p.values) for p in spec.points()] + (extra_points or [])
    resolved = resolve_points(spec, points)
    base_values = {k: spec.base_value(k) for k in keys}
    stored, stored_keys = read_results(out_dir)
    results = results_by_hash(stored, stored_keys)
    if retry_errors:
        results = {h: r for h, r in results.items() if r.get("status") != "error"}
    todo: dict[str, Task] = {}
    for p in resolved:
        if p.task is not None and p.scenario_hash not in results:
            todo.setdefault(p.scenario_hash, p.task)
    infeasible = sum(p.task is None for p in resolved if p.index >= 0)
    base_infeasible = any(p.task is None for p in resolved if p.index < 0)
    log.info(
        "%s: %d points (%d infeasible) and the base scenario%s; %d scenarios already "
        "simulated, %d to simulate (the base included)",
        spec.name,
        len(resolved) - 1,
        infeasible,
        " (infeasible)" if base_infeasible else "",
        len({p.scenario_hash for p in resolved if p.task}) - len(todo),
        len(todo),
    )
    last_flush = time.monotonic()
    bar = tqdm(total=len(todo), desc=spec.name, unit="pt", file=sys.stderr, disable=not progress)
    try:
        if todo:
            for row in backend(list(todo.values())):
                results[row["scenario_hash"]] = row
                bar.update(1)
                if time.monotonic() - last_flush > FLUSH_EVERY_S:
                    write_results(assemble(resolved, keys, results, base_values), keys, out_dir)
                    last_flush = time.monotonic()
    finally:
        bar.close()
        frame = assemble(resolved, keys, results, base_values)
        write_results(frame, keys, out_dir)
    return frame
