"""The per-rank memory ledger as a report: each kind of rank's parameters, gradients,
optimizer state, activations and buffers, the model's size and the largest that fits."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from simulator.model.params import count_params
from simulator.pipelines import get_schedule
from simulator.plan.memory import (
    RankMemory,
    distinct_rank_kinds,
    ledger_caveats,
    max_params_model_states,
    memory_ledger,
)
from simulator.plan.plan import Plan
from simulator.plan.plan import build_plan as make_plan
from simulator.scenario import Scenario
from simulator.stages.facts import network_facts
from simulator.topology import Topology, build_topology


@dataclass(frozen=True)
class MemoryReport:
    """Memory of each distinct kind of rank, with the model's size and the largest that fits.

    >>> from simulator.api import load, memory_report
    >>> report = memory_report(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> report.parameter_count, report.fits, report.ranks[0].total / 1e9  # GB on stage 0
    (6662266880, True, 23.550436096)
    """

    parameter_count: int
    active_parameter_count: int
    ranks: tuple[RankMemory, ...]
    max_params_model_states: float
    caveats: tuple[str, ...] = ()  # where the simulated peak may exceed the ledger's

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
            "caveats": list(self.caveats),
        }


def _ledger_input(scenario: Scenario, topo: Topology | None) -> Scenario | Plan:
    """What the ledger reads: the scenario, or for a schedule ordered by its passes'
    durations (ZB-1p, ZB-2p) its plan on the cluster's network, as ``run`` plans it."""
    if get_schedule(scenario.parallelism.pipeline.schedule).needs_times:
        return make_plan(scenario, network_facts(topo or build_topology(scenario.cluster)))
    return scenario


def memory_report(scenario: Scenario, topo: Topology | None = None) -> MemoryReport:
    """Per-rank memory breakdown of ``scenario`` (see :mod:`simulator.plan.memory`). A
    pipeline schedule searched for its passes' durations (ZB-1p, ZB-2p) is searched with the
    cluster's network, as ``run`` does, so that both hold the same order (``topo``: the
    scenario's topology if already built).

    >>> from simulator.api import load
    >>> report = memory_report(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> report.fits, [r.rank_kind for r in report.ranks]
    (True, ['stage 0', 'stage 1', 'stage 2', 'stage 3'])
    """
    counts = count_params(scenario.model)
    plan = _ledger_input(scenario, topo)
    return MemoryReport(
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        ranks=tuple(distinct_rank_kinds(memory_ledger(plan))),
        max_params_model_states=max_params_model_states(scenario),
        caveats=tuple(ledger_caveats(scenario)),
    )


def memory_frame(report: MemoryReport) -> pd.DataFrame:
    """One row per kind of rank; byte columns in bytes.

    >>> from simulator.api import load
    >>> frame = memory_frame(memory_report(load("scenarios/examples/pipeline-1f1b.yaml")))
    >>> frame["rank_kind"].tolist(), frame.columns[1:4].tolist()
    (['stage 0', 'stage 1', 'stage 2', 'stage 3'], ['params', 'grads', 'optimizer'])
    """
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
        "runtime",
        "nccl",
        "reserve_fraction",
        "total",
        "capacity",
        "fits",
        "in_flight_micro_batches",
        "param_count",
        "stages",
    ]
    return pd.DataFrame(rows, columns=columns)


def ledger_peak(scenario: Scenario, topo: Topology | None = None) -> tuple[float, float, str]:
    """(the largest rank's memory-ledger total, its HBM, which ranks) in bytes: the ledger
    alone, without the report's caveats and parameter counts. A schedule ordered by its
    passes' durations is planned on ``topo`` (built if not given), as ``run`` plans it.

    >>> from simulator.api import load
    >>> ledger_peak(load("scenarios/examples/pipeline-1f1b.yaml"))  # 23.6 GB of 80, stage 0
    (23550436096.0, 80000000000.0, 'stage 0')
    """
    plan = _ledger_input(scenario, topo)
    ranks = distinct_rank_kinds(memory_ledger(plan))
    worst = max(ranks, key=lambda r: r.total)
    return worst.total, worst.capacity, worst.rank_kind
