"""Composition root: the only module that wires scenario, model and plan together.

The CLI and notebooks call these functions; each returns plain data or a pandas DataFrame.

>>> from simulator import api
>>> report = api.memory_report(api.load_scenario("scenarios/examples/llama3-8b-fsdp.yaml"))
>>> report.fits
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simulator.model.params import count_params
from simulator.plan.memory import (
    RankMemory,
    distinct_rank_kinds,
    max_params_model_states,
    memory_ledger,
)
from simulator.scenario import Scenario, load_scenario

__all__ = ["MemoryReport", "load_scenario", "memory_frame", "memory_report"]


@dataclass(frozen=True)
class MemoryReport:
    """Memory of each distinct kind of rank, with the model's size and the largest that fits."""

    parameter_count: int
    active_parameter_count: int
    ranks: tuple[RankMemory, ...]
    max_params_model_states: float

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.ranks)

    def as_dict(self) -> dict:
        return {
            "parameter_count": self.parameter_count,
            "active_parameter_count": self.active_parameter_count,
            "fits": self.fits,
            "max_params_model_states": self.max_params_model_states,
            "ranks": [r.as_dict() for r in self.ranks],
        }


def memory_report(scenario: Scenario) -> MemoryReport:
    """Per-rank memory breakdown of ``scenario`` (see :mod:`simulator.plan.memory`)."""
    counts = count_params(scenario.model)
    return MemoryReport(
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        ranks=tuple(distinct_rank_kinds(memory_ledger(scenario))),
        max_params_model_states=max_params_model_states(scenario),
    )


def memory_frame(report: MemoryReport) -> pd.DataFrame:
    """One row per kind of rank; byte columns in bytes."""
    rows = []
    for r in report.ranks:
        d = r.as_dict()
        d["stages"] = ",".join(map(str, r.stages))
        rows.append(d)
    columns = [
        "rank_kind",
        "params",
        "grads",
        "optimizer",
        "activations",
        "buffers",
        "total",
        "capacity",
        "fits",
        "in_flight_micro_batches",
        "param_count",
        "stages",
    ]
    return pd.DataFrame(rows, columns=columns)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load a scenario file (alias of :func:`simulator.scenario.load_scenario`)."""
    return load_scenario(path, overrides)
