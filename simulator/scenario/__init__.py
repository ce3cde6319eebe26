"""Scenario files: schema, YAML loading with positions, ``--set`` overrides, consistency checks.

The names below are imported on first use (PEP 562), so that ``from simulator.scenario import
ScenarioError`` costs the error class alone, not pydantic and the schema: the command line's
``--version`` and ``--help`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.lazy import lazy_exports

_EXPORTS = {
    "Position": "errors",
    "Problem": "errors",
    "ScenarioError": "errors",
    "load_scenario": "loader",
    "load_scenario_text": "loader",
    "load_topology": "loader",
    "scenario_data": "loader",
    "ClusterConfig": "schema",
    "ModelConfig": "schema",
    "MoEConfig": "schema",
    "ParallelismConfig": "schema",
    "PrecisionConfig": "schema",
    "Scenario": "schema",
    "TrainingConfig": "schema",
}

__all__ = [
    "ClusterConfig",
    "MoEConfig",
    "ModelConfig",
    "ParallelismConfig",
    "Position",
    "PrecisionConfig",
    "Problem",
    "Scenario",
    "ScenarioError",
    "TrainingConfig",
    "load_scenario",
    "load_scenario_text",
    "load_topology",
    "scenario_data",
]

if TYPE_CHECKING:  # what static tools (and import-linter) see
    from simulator.scenario.errors import Position, Problem, ScenarioError
    from simulator.scenario.loader import (
        load_scenario,
        load_scenario_text,
        load_topology,
        scenario_data,
    )
    from simulator.scenario.schema import (
        ClusterConfig,
        ModelConfig,
        MoEConfig,
        ParallelismConfig,
        PrecisionConfig,
        Scenario,
        TrainingConfig,
    )


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
