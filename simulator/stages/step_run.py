"""A scenario's step built and simulated, its steady state tried and retried
(:func:`simulated`): the run's core, for :func:`simulator.api.run` and the job model's
sensitivities."""

from __future__ import annotations

import logging

from simulator.engine.steady_state import SHIFT_DIFFERS
from simulator.pipelines import SteadyState
from simulator.schedule.perturb import perturb
from simulator.schedule.step import StepGraph
from simulator.stages.simulation import simulate
from simulator.stages.steady import NotRepeating, _steady_state_retries
from simulator.stages.step_build import build_plan, build_step

log = logging.getLogger("simulator.api")  # the run's diagnostics, under the api's name


def simulated(scenario, topo, compute_model, track_links, perturbations, steps=None):
    """The step of ``scenario`` built and simulated: (StepGraph, Simulation); a steady state
    that does not repeat is tried longer, then given up for every micro-batch."""
    plan = build_plan(scenario, topo)
    repeat = scenario.simulation.repeat_steady_state and not track_links

    def built(repeat: bool, steady: SteadyState | None = None) -> StepGraph:
        if steps is None or compute_model is not None:
            return build_step(plan, compute_model, repeat, steady)
        return steps.build(plan, repeat, steady)

    step = perturb(built(repeat), perturbations)
    retries: list[SteadyState] | None = None  # after the first state: the ones worth trying
    while True:
        try:
            return step, simulate(step, topo, perturbations, track_links)
        except NotRepeating as why:
            if retries is None:
                first = step.steady
                retries = _steady_state_retries(plan, first, str(why))
            elif not str(why).startswith(SHIFT_DIFFERS):  # a longer period will not help
                retries = [r for r in retries if r.period == first.period]
            longer = retries.pop(0) if retries else None
            log.debug(  # an internal diagnostic: the result is the same either way
                "%s: the steady state does not repeat (%s); %s",
                scenario.name or "scenario",
                why,
                f"trying a {longer.head}-micro-batch warm-up and a period of {longer.period}"
                if longer
                else "simulating all",
            )
            step = perturb(built(longer is not None, longer), perturbations)
