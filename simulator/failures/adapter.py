"""The one place the failures package asks the step layer for numbers.

It calls :func:`simulator.api.run` (step time) and :func:`simulator.api.memory_report`
(parameter count for the checkpoint bytes).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from simulator import api
from simulator.failures.model import JobModel, resolve_job

log = logging.getLogger("trainsim.failures")


@dataclass(frozen=True)
class StepInputs:
    """What the job-level model needs from the step simulation."""

    step_time_s: float
    state_bytes: float  # one checkpoint: parameters and optimizer state, all ranks, no copies
    sensitivity: object = None  # api.StepSensitivity, for a fleet (failures.fleet)


def topology(scenario):
    """The scenario's topology, built (:func:`simulator.api.build_topology`): build it once
    and hand it to the calls below (a 16K-GPU fabric takes about as long to build as its
    step takes to simulate)."""
    return api.build_topology(scenario.cluster)


def straggler_link_findings(scenario, topo) -> list:
    """Straggler links that name no link of ``topo``, located by field
    (:func:`simulator.api.straggler_link_findings`)."""
    return api.straggler_link_findings(scenario, topo)


def checkpoint_bytes(scenario, topo=None) -> float:
    """Bytes of one checkpoint: every parameter once, with its optimizer state (master copy and
    moments), at the precision recipe's bytes per parameter; gradients are not saved. ``topo``:
    the scenario's topology, if built (a searched pipeline schedule needs it)."""
    report = api.memory_report(scenario, topo)
    params, _, optimizer = scenario.precision.bytes_per_param(scenario.training.optimizer)
    return report.parameter_count * (params + optimizer)


def step_inputs(scenario, topo=None) -> StepInputs:
    """Step time (s) of the job, with its fixed stragglers (``failures.stragglers.gpus`` and
    ``links``, which the step simulation applies itself), and its checkpoint bytes. ``topo``:
    the scenario's topology, if built (else the step builds its own, and frees it)."""
    fleet = scenario.failures.fleet if scenario.failures is not None else None
    if fleet is None:
        step = api.run(scenario, topo).summary["step_time_s"]
        return StepInputs(float(step), float(checkpoint_bytes(scenario, topo)))
    own = topo is None
    topo = topo or topology(scenario)
    try:
        sens = api.step_sensitivity(scenario, topo, fleet.slow.factor, FLEETS, FLEET_STEPS)
        return StepInputs(sens.step_time_s, float(checkpoint_bytes(scenario, topo)), sens)
    finally:
        if own:
            topo.release()


FLEETS, FLEET_STEPS = 8, 4  # fleets of GPUs drawn for the job's pace, steps drawn for each


class ElasticSteps:
    """``dp -> step time (s)`` of the same job on ``dp`` data-parallel replicas (elastic
    policy), each size simulated once.

    The global batch stays the same number of sequences; each replica takes
    ``ceil(batch / dp)`` of them (rounded up to whole micro-batches), so the replica with the
    most sets the pace. :meth:`compute` simulates several sizes at once, one process per core
    (forked: each inherits the job's built fabric). Every size is simulated: sizes with the
    same micro-batches per replica differ in their gradient collectives, by up to a half when
    the ring spans another node (tests/failures/test_elastic.py).
    """

    def __init__(self, scenario, topo=None) -> None:
        self.scenario = scenario
        self.topo = topo  # the job's fabric, if built: every size runs on it
        self.known: dict[int, float] = {}

    def scenario_at(self, dp: int):
        t, p = self.scenario.training, self.scenario.parallelism
        per_replica = math.ceil(t.global_batch / dp / t.micro_batch) * t.micro_batch
        return self.scenario.model_copy(
            update={
                "parallelism": p.model_copy(update={"dp": dp}),
                "training": t.model_copy(update={"global_batch": per_replica * dp}),
                "cluster": self.scenario.cluster.model_copy(
                    update={"gpus": dp * p.tp * p.pp * p.cp}
                ),
            }
        )

    def __call__(self, dp: int) -> float:
        if dp not in self.known:
            self.compute([dp])
        return self.known[dp]

    def compute(self, sizes) -> None:
        """Simulate the step at each of ``sizes`` not yet known, in parallel."""
        todo = sorted({int(d) for d in sizes} - set(self.known))
        if not todo:
            return
        log.info(
            "simulating the step with %s data-parallel replicas (elastic policy)",
            ", ".join(map(str, todo)),
        )
        scenarios = [self.scenario_at(dp) for dp in todo]
        workers = min(len(todo), os.cpu_count() or 1)
        if workers > 1 and "fork" in mp.get_all_start_methods():
            global _FORKED_TOPOLOGY
            _FORKED_TOPOLOGY = self.topo  # the children inherit it (a graph is not pickled)
            try:
                ctx = mp.get_context("fork")
                init = api.quiet_pool_worker  # no bars of its own; dies with this process
                with ProcessPoolExecutor(workers, mp_context=ctx, initializer=init) as pool:
                    times = list(pool.map(_step_time, scenarios))
            finally:
                _FORKED_TOPOLOGY = None
        else:
            times = [_step_time(s, self.topo) for s in scenarios]
        self.known.update(zip(todo, times, strict=True))


_FORKED_TOPOLOGY = None  # the job's built fabric, for the forked children of compute()


def _step_time(scenario, topo=None) -> float:
    topo = topo if topo is not None else _FORKED_TOPOLOGY
    return float(api.run(scenario, topo).summary["step_time_s"])


def step_time_for(scenario, topo=None) -> ElasticSteps:
    """``dp -> step time (s)`` for the elastic policy (:class:`ElasticSteps`), on ``topo``
    when it is built and kept alive while the sizes are simulated."""
    return ElasticSteps(scenario, topo)


def prefetch_elastic(model: JobModel, days: float, seeds: int) -> None:
    """Simulate, in parallel and once each, the step of every data-parallel size the elastic
    policy reaches in ``seeds`` seeds of ``days``.

    Which sizes a seed reaches does not depend on the step time (failures, repairs and
    recoveries are timed by their own laws; the step time only prices the training between
    them), so one cheap pass of the Monte Carlo with the full job's step time everywhere
    finds them all."""
    steps = model.step_time_for
    if not isinstance(steps, ElasticSteps):
        return
    sizes: set[int] = set()

    def record(dp: int) -> float:
        sizes.add(dp)
        return model.step_time_s

    from simulator.failures.montecarlo import simulate_seeds

    simulate_seeds(replace(model, step_time_for=record), days, seeds)
    steps.compute(sizes)


def component_counts(scenario, topo=None) -> dict[str, int]:
    """Switches and links (cables: two directed edges each) of the topology, for
    ``per: switch|link`` causes without a ``count``; ``topo``: the scenario's, if built."""
    causes = scenario.failures.all_causes().values()
    if not any(c.per in ("switch", "link") and c.count is None for c in causes):
        return {}
    if scenario.cluster.topology is None:
        return {}
    from simulator.topology.summary import summary

    info = summary(topo or topology(scenario))
    return {"switch": int(sum(info["switches"].values())), "link": int(info["links"]) // 2}


def job_model(scenario, inputs: StepInputs | None = None, topo=None) -> JobModel:
    """The resolved :class:`JobModel` of ``scenario`` (step simulation run if not given);
    ``topo``: the scenario's topology, if built."""
    inputs = inputs or step_inputs(scenario, topo)
    elastic = scenario.failures.policy == "elastic"
    model = resolve_job(
        scenario,
        inputs.step_time_s,
        inputs.state_bytes,
        component_counts(scenario, topo),
        step_time_for(scenario, topo) if elastic else None,
    )
    fleet = scenario.failures.fleet
    if fleet is None:
        return model
    from simulator.failures.fleet import with_fleet

    sens = inputs.sensitivity
    if sens is None:  # inputs made without the fleet's numbers: the step simulated again
        sens = step_inputs(scenario, topo).sensitivity
    return with_fleet(model, fleet, sens.slow_costs, sens.speeds)
