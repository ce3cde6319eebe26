"""A scenario's plan (:func:`build_plan`), the step's task graph built from it
(:func:`build_step`), and the steps kept for the runs that would build the same graph again
(:class:`StepCache`)."""

from __future__ import annotations

import dataclasses

from simulator.collector import paused_gc
from simulator.model.compute import ComputeModel
from simulator.pipelines import SteadyState, steady_state
from simulator.plan.plan import Plan
from simulator.plan.plan import build_plan as make_plan
from simulator.scenario import Scenario
from simulator.schedule.step import StepGraph
from simulator.schedule.step import build_step as make_step
from simulator.stages.costs import compute_model_of
from simulator.stages.facts import network_facts
from simulator.topology import Topology


def build_plan(scenario: Scenario, topo: Topology | None = None) -> Plan:
    """Every layout decision for ``scenario`` (:mod:`simulator.plan.plan`); with ``topo`` the
    collectives are chosen per group as NCCL would (without it, rings).

    >>> from simulator.api import load
    >>> plan = build_plan(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> plan.micro_batches, sorted(plan.ranks)  # the ranks simulated: one per stage
    (16, [0, 2, 4, 6])
    """
    return make_plan(scenario, network_facts(topo) if topo is not None else None)


def build_step(
    plan: Plan,
    compute_model: ComputeModel | None = None,
    repeat: bool = False,
    steady: SteadyState | None = None,
) -> StepGraph:
    """The TaskGraph of one step of ``plan``; compute durations from ``compute_model``
    (default: the scenario's accelerator, calibrated).

    ``repeat``: where the pipeline has a steady state to repeat
    (:func:`simulator.pipelines.steady_state`, or ``steady`` when given), the graph of only
    its warm-up, two periods and cool-down, for :func:`simulate` to stretch to the full step
    (``StepGraph.steady`` says so). :func:`run` does this unless the scenario says
    ``simulation.repeat_steady_state: false``.

    >>> from simulator.api import build_plan, load
    >>> step = build_step(build_plan(load("scenarios/examples/pipeline-1f1b.yaml")))
    >>> len(step.graph.tasks), step.steady  # 16 micro-batches on 4 stages: too few to repeat
    (9456, None)
    """
    s = plan.scenario
    if compute_model is None:
        cm = compute_model_of(s)
    else:  # the caller's kernel model, with the scenario framework's CPU cost per launch
        fw = s.framework
        cm = compute_model.with_framework(fw)
    pp = s.parallelism.pp
    if repeat and steady is None:
        steady = steady_state(plan.schedule, pp, plan.micro_batches, plan.chunks_per_stage)
    if not repeat:
        steady = None
    with paused_gc():  # millions of small immutable tasks: the collector only costs time
        if steady is None:
            return make_step(plan, cm)
        reduced = make_step(plan.with_micro_batches(steady.reduced), cm)
    return dataclasses.replace(reduced, plan=plan, steady=steady)


class StepCache:
    """Steps built for earlier runs, kept for the runs after that would build the same graph
    (most recent last, at most ``size``).

    A step is a pure function of the plan, the compute model and the steady state it
    repeats; the plan reads the cluster's topology only through
    :class:`~simulator.plan.collective_choice.NetworkFacts` (:func:`build_plan`). So runs
    that differ only in fabric fields that leave those facts alone (oversubscription above
    the first inter-host hop, spine and core counts; not nodes per leaf, which moves that hop)
    build the same graph: a topology study's points pay for the build once. The key is the
    scenario without ``cluster.topology`` and without the fields the build never reads (its
    name and description, ``failures``: stragglers slow a built step afterwards), the GPU
    count, the facts and the steady state; a kept step is handed out with the new run's own
    plan (the same but for those fields). Only the default compute model is cached (a
    caller's model is not a key).

    >>> from simulator.api import load, run
    >>> cache = StepCache(size=1)
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> renamed = load("scenarios/examples/pipeline-1f1b.yaml", ["name=another"])
    >>> a, b = (run(x, steps=cache).metrics.step_time_s for x in (s, renamed))
    >>> cache.hits, a == b  # the second run took the first's graph
    (1, True)
    """

    # read by no part of the step build (the scenario's name reaches the metrics through the
    # new run's own plan)
    UNREAD = {
        "cluster": {"topology"}, "name": True, "description": True, "failures": True,
        "variability": True,
    }  # fmt: skip

    def __init__(self, size: int = 1):
        self.size = size
        self._kept: dict[tuple, StepGraph] = {}
        self.hits = 0

    @staticmethod
    def key(plan: Plan, repeat: bool, steady: SteadyState | None) -> tuple:
        s = plan.scenario
        return (
            s.model_dump_json(round_trip=True, exclude=StepCache.UNREAD),
            s.cluster.num_gpus,
            plan.network,
            repeat,
            steady,
        )

    def build(self, plan: Plan, repeat: bool, steady: SteadyState | None = None) -> StepGraph:
        """:func:`build_step` of ``plan`` (default compute model), or the kept one."""
        key = self.key(plan, repeat, steady)
        step = self._kept.pop(key, None)
        if step is None:
            while self._kept and len(self._kept) >= self.size:  # room first: a large step
                del self._kept[next(iter(self._kept))]  # holds hundreds of MB
            step = build_step(plan, None, repeat, steady)
        else:
            self.hits += 1
            step = dataclasses.replace(step, plan=plan)
        self._kept[key] = step
        while len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]
        return step
