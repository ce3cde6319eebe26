"""The headline metrics of a simulated step (:func:`step_metrics`), with the NCCL buffers of
its simulated ranks (:func:`nccl_of`)."""

from __future__ import annotations

import pandas as pd

from simulator import metrics
from simulator.plan.nccl_memory import nccl_bytes
from simulator.plan.plan import Plan
from simulator.schedule.step import StepGraph
from simulator.stages.simulation import Simulation


def nccl_of(plan: Plan) -> dict[int, float]:
    """Each simulated rank's NCCL buffers (B; :mod:`simulator.plan.nccl_memory`)."""
    return {r: nccl_bytes(plan, r) for r in plan.ranks}


def step_metrics(
    sim: Simulation,
    step: StepGraph,
    timeline: pd.DataFrame | None = None,
    nccl: dict[int, float] | None = None,
) -> metrics.StepMetrics:
    """The headline metrics of a simulated step (:class:`simulator.metrics.StepMetrics`);
    ``timeline`` is its memory timeline and ``nccl`` its ranks' NCCL buffers
    (:func:`nccl_of`) when the caller has them already.

    The staged run, each stage a value to look at (what :func:`run` does in one call):

    >>> from simulator.api import build_plan, build_step, build_topology, load, simulate
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> topo = build_topology(s.cluster)
    >>> step = build_step(build_plan(s, topo))
    >>> m = step_metrics(simulate(step, topo), step)
    >>> round(m.bubble_fraction, 3)  # 1F1B's (p - 1) / (m + p - 1) = 3 / 19
    0.158
    """
    s = step.plan.scenario
    acc = s.cluster.accelerator
    facts = metrics.StepFacts(
        scenario=s.name,
        num_gpus=s.num_gpus,
        tokens_per_step=s.training.global_batch * s.training.seq_len,
        model_flops_per_step=step.plan.model_flops_per_step,
        peak_flops_per_s=acc.peak(s.precision.compute_dtype),
        hbm_bytes=acc.hbm_bytes,
        overlapping_steps=step.plan.schedule.overlapping_steps,
        static_memory=step.static_memory,
        stage_of=step.stage_of,
        runtime_bytes=s.framework.runtime_bytes,
        allocator_reserve=s.framework.allocator_reserve,
        nccl_bytes=nccl_of(step.plan) if nccl is None else nccl,
    )
    return metrics.step_metrics(
        sim.frame, sim.memory_events, facts, sim.stats.rerates, timeline=timeline
    )
