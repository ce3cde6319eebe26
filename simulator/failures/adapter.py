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


def checkpoint_bytes(scenario) -> float:
    """Bytes of one checkpoint: every parameter once, with its optimizer state (master copy and
    moments), at the precision recipe's bytes per parameter; gradients are not saved."""
    report = api.memory_report(scenario)
    params, _, optimizer = scenario.precision.bytes_per_param(scenario.training.optimizer)
    return report.parameter_count * (params + optimizer)


def step_inputs(scenario) -> StepInputs:
    """Step time (s) of the job, with its fixed stragglers (``failures.stragglers.gpus`` and
    ``links``, which the step simulation applies itself), and its checkpoint bytes."""
    step = api.run(scenario).summary["step_time_s"]
    return StepInputs(float(step), float(checkpoint_bytes(scenario)))


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


def component_counts(scenario) -> dict[str, int]:
    """Switches and links (cables: two directed edges each) of the topology, for
    ``per: switch|link`` causes without a ``count``."""
    causes = scenario.failures.all_causes().values()
    if not any(c.per in ("switch", "link") and c.count is None for c in causes):
        return {}
    if scenario.cluster.topology is None:
        return {}
    from simulator.topology import build_topology
    from simulator.topology.summary import summary

    info = summary(build_topology(scenario.cluster))
    return {"switch": int(sum(info["switches"].values())), "link": int(info["links"]) // 2}


def job_model(scenario, inputs: StepInputs | None = None) -> JobModel:
    """The resolved :class:`JobModel` of ``scenario`` (step simulation run if not given)."""
    inputs = inputs or step_inputs(scenario)
    elastic = scenario.failures.policy == "elastic"
    return resolve_job(
        scenario,
        inputs.step_time_s,
        inputs.state_bytes,
        component_counts(scenario),
        step_time_for(scenario) if elastic else None,
    )
