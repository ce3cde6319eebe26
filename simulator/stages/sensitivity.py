"""What the job-level model reads of the step beyond its time: one slow GPU's cost at each
pipeline stage and the step's spread over fleets of GPUs (:func:`step_sensitivity`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.scenario import Scenario
from simulator.stages.step_metrics import step_metrics
from simulator.stages.step_run import simulated
from simulator.stages.stragglers import _placed, scenario_perturbations
from simulator.stages.variability import fleet_speeds, retimable_step, slow_gpu_costs
from simulator.topology import Topology


@dataclass(frozen=True)
class StepSensitivity:
    """What the job-level model reads of the step beyond its time: ``slow_costs``, the
    step's multiplier with one GPU ``slow_factor`` times slower at each pipeline stage, and
    ``speeds``, the step-time multiplier of each of ``fleets`` draws of the scenario's
    variability (a new set of GPUs each; :mod:`simulator.stages.variability`); see
    :func:`step_sensitivity` for an example."""

    step_time_s: float
    slow_factor: float
    slow_costs: np.ndarray
    speeds: np.ndarray


def step_sensitivity(
    scenario: Scenario, topo: Topology, slow_factor: float, fleets: int = 8, steps: int = 4
) -> StepSensitivity:
    """:class:`StepSensitivity` of ``scenario`` from one simulated step, re-timed (with the
    scenario's stragglers placed as :func:`run` places them).

    >>> from simulator.api import build_topology, load
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> costs = step_sensitivity(s, build_topology(s.cluster), 1.5, fleets=2).slow_costs
    >>> [round(float(c), 2) for c in costs]  # a 1.5x slow GPU costs most in the last stage
    [1.21, 1.22, 1.24, 1.38]
    """
    scenario, perturbations = _placed(scenario, scenario_perturbations(scenario))
    step, sim = simulated(scenario, topo, None, False, perturbations)
    base = step_metrics(sim, step).step_time_s
    r = retimable_step(step, sim.task_times)  # the dependency graph, built once for both
    costs = slow_gpu_costs(step, r, slow_factor)
    speeds = fleet_speeds(step, r, base, scenario.variability, fleets, steps, scenario.seed)
    return StepSensitivity(base, slow_factor, costs, speeds)
