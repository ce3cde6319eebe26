"""The sweep's only door into :mod:`simulator.api`: load a scenario, simulate one step.

Kept to a few functions so that a change of the api's shape (staged functions, a frozen
``StepMetrics`` with ``as_dict()``) is one edit here.
"""

from __future__ import annotations

from pathlib import Path

from simulator import api
from simulator.plan.topology_warnings import topology_warnings
from simulator.scenario import Scenario
from simulator.topology import build_topology


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """A validated scenario (ScenarioError, with file:line:col, if not)."""
    return api.load_scenario(path, overrides)


def simulate(scenario: Scenario) -> tuple[dict, list[str]]:
    """Simulate one step of ``scenario``: the metrics of ``trainsim run --format json`` and the
    warnings about the study's topology (:func:`topology_warnings`)."""
    topo = build_topology(scenario.cluster)
    warnings = topology_warnings(scenario, topo)
    return api.run(scenario, topo=topo).summary, warnings


def memory_report(scenario: Scenario):
    """The per-rank memory ledger (:func:`simulator.api.memory_report`)."""
    return api.memory_report(scenario)
