"""What runs for one point, in whatever process a backend chooses: simulate, classify, flatten.

A point's result is a flat dict (one future parquet row, without the point's own columns):
``status`` is ``ok``, ``oom`` (simulated, but the peak memory exceeds HBM), ``infeasible``
(the scenario cannot be built or placed: the message says why) or ``error`` (the simulator
failed; the message is the exception). Nested metrics (per-rank peaks, stream utilisation)
become JSON strings so that every row has the same flat columns.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.infeasible import InfeasibleError
from simulator.scenario import Scenario
from simulator.sweep import adapter

STATUSES = ("ok", "oom", "infeasible", "error")


@dataclass(frozen=True)
class Task:
    """One scenario to simulate, named by its hash."""

    scenario_hash: str
    scenario: Scenario


PACKAGE = Path(__file__).resolve().parents[1]
CODE_SUFFIXES = (".py", ".csv", ".json", ".yaml", ".yml", ".txt")


@lru_cache(maxsize=1)
def code_id() -> str:
    """SHA-256 (first 16 hex digits) of the simulator's own files (its modules and the data it
    reads: calibration tables), by path and content: another version of the code, another id
    (about 6 ms, once per process)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
            digest.update(path.relative_to(PACKAGE).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def scenario_hash(scenario: Scenario) -> str:
    """SHA-256 (first 16 hex digits) of the resolved scenario's canonical JSON, every default
    filled in, so two spellings of the same run share a hash, and of the code that simulates
    it (:func:`code_id`): a results file resumed by another version of the simulator has its
    points simulated again, not read back."""
    text = code_id() + scenario.model_dump_json(round_trip=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def unresolved_hash(base: str, overrides: list[str]) -> str:
    """A hash for a point that has no resolved scenario (it is infeasible), with the code's
    id (:func:`scenario_hash`)."""
    text = code_id() + json.dumps({"base": base, "overrides": overrides}, sort_keys=True)
    return "x" + hashlib.sha256(text.encode()).hexdigest()[:15]


def flatten_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """Scalars as they are; dicts and lists as JSON text (columns stay the same per row)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, dict | list | tuple):
            out[key] = json.dumps(value, default=float, sort_keys=True)
        elif hasattr(value, "item"):  # numpy scalars
            out[key] = value.item()
        else:
            out[key] = value
    return out


def simulate_task(task: Task) -> dict[str, Any]:
    """Simulate ``task`` and return its result row (never raises for a bad point)."""
    start = time.perf_counter()
    row: dict[str, Any] = {"scenario_hash": task.scenario_hash, "warnings": []}
    try:
        summary, warnings = adapter.simulate(task.scenario)
    except InfeasibleError as exc:  # as `trainsim run`: a scenario the simulator refuses
        row.update(status="infeasible", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a crashing point is a row, the sweep goes on
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
    else:
        row.update(flatten_summary(summary))
        row["warnings"] = list(warnings)
        if summary.get("oom"):
            row.update(
                status="oom",
                reason=f"peak memory {summary['peak_memory_bytes'] / 1e9:,.1f} GB exceeds the "
                f"{summary['memory_capacity_bytes'] / 1e9:,.1f} GB of HBM",
            )
        else:
            row.update(status="ok", reason="")
    row["sim_time_s"] = time.perf_counter() - start
    return row
