"""A small job model for tests: one cause, no spares, blocking checkpoints."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.failures.model import JobModel

BASE = JobModel(
    step_time_s=10.0,
    gpus=64,
    nodes=8,
    dp=8,
    gpus_per_node=8,
    gpus_per_replica=8,
    tokens_per_step=1e6,
    cause_names=("crash",),
    cause_rate_s=np.array([1.0 / 36000.0]),
    cause_shape=np.array([1.0]),
    cause_nodes_out=np.array([0]),
    cause_detect_s=np.array([0.0]),
    maintenance_rate_s=0.0,
    maintenance_periodic=True,
    maintenance_duration_s=0.0,
    spares=0,
    repair_law="fixed",
    repair_mean_s=3600.0,
    repair_sigma=1.0,
    restart_fixed_s=600.0,
    init_per_rank_s=0.0,
    interval_s=3600.0,
    pause_s=60.0,
    drain_s=0.0,
    policy="restart_on_spares",
)


def job(**changes) -> JobModel:
    """BASE with ``changes``; array fields may be given as lists."""
    for key in ("cause_rate_s", "cause_shape", "cause_nodes_out", "cause_detect_s"):
        if key in changes:
            changes[key] = np.asarray(changes[key])
    return replace(BASE, **changes)
