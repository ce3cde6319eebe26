"""The one place the failures package asks the step layer for numbers.

Today it calls :func:`simulator.api.run` (step time) and :func:`simulator.api.memory_report`
(parameter count for the checkpoint bytes); the staged API (issue 9) will replace both calls.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import cache

from simulator import api
from simulator.failures.model import JobModel, resolve_job

log = logging.getLogger("trainsim.failures")


@dataclass(frozen=True)
class StepInputs:
    """What the job-level model needs from the step simulation."""

    step_time_s: float
    state_bytes: float  # one checkpoint: parameters and optimizer state, all ranks, no copies


def topology(scenario):
    """The scenario's topology, built (:func:`simulator.api.build_topology`): build it once
    and hand it to the calls below (a 16K-GPU fabric takes about as long to build as its
    step takes to simulate)."""
    return api.build_topology(scenario.cluster)


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
    step = api.run(scenario, topo).summary["step_time_s"]
    return StepInputs(float(step), float(checkpoint_bytes(scenario, topo)))


def step_time_for(scenario):
    """``dp -> step time (s)`` of the same job on ``dp`` data-parallel replicas (elastic policy).

    The global batch stays the same number of sequences; each replica takes
    ``ceil(batch / dp)`` of them (rounded up to whole micro-batches), so the replica with the
    most sets the pace. Results are cached per ``dp``.
    """
    t, p = scenario.training, scenario.parallelism
    model_parallel = p.tp * p.pp * p.cp

    @cache
    def at(dp: int) -> float:
        per_replica = math.ceil(t.global_batch / dp / t.micro_batch) * t.micro_batch
        smaller = scenario.model_copy(
            update={
                "parallelism": p.model_copy(update={"dp": dp}),
                "training": t.model_copy(update={"global_batch": per_replica * dp}),
                "cluster": scenario.cluster.model_copy(update={"gpus": dp * model_parallel}),
            }
        )
        log.info("simulating the step with %d data-parallel replicas", dp)
        return float(api.run(smaller).summary["step_time_s"])

    return at


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
    return resolve_job(
        scenario,
        inputs.step_time_s,
        inputs.state_bytes,
        component_counts(scenario, topo),
        step_time_for(scenario) if elastic else None,
    )
