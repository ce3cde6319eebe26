"""Scenario files: schema, YAML loading with positions, ``--set`` overrides, consistency checks."""

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

__all__ = [
    "ClusterConfig",
    "ModelConfig",
    "MoEConfig",
    "ParallelismConfig",
    "Position",
    "PrecisionConfig",
    "Problem",
    "Scenario",
    "ScenarioError",
    "TrainingConfig",
    "load_scenario",
    "load_scenario_text",
    "scenario_data",
    "load_topology",
]
