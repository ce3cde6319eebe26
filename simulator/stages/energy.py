"""Power and energy of a simulated step: each simulated GPU's power over time, the step's
energy, joules per token, and the cluster's and the facility's draw.

A GPU task's draw is the power model's (:mod:`simulator.model.power`) at the step's clock for
its tensor activity: its FLOP rate over the device's best GEMM rate at that clock (a large
GEMM 1, a memory-bound kernel 0). Between compute tasks, and while only communication runs,
a GPU draws its static power: NCCL's kernels' own draw is not published (a lower bound). The
cluster is the simulated ranks' mean times the GPU count (symmetric ranks draw alike); the
facility's draw is the cluster's times the PUE (``cluster.pue``). The CPU, NICs, switches and
cooling beyond the PUE are not counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from simulator.model.compute import ComputeModel
from simulator.model.power import PowerModel, power_model_of
from simulator.scenario import Scenario


@dataclass(frozen=True)
class StepEnergy:
    """A step's power and energy (W, J): ``clock`` the compute-bound kernels' clock relative
    to boost; per GPU the mean and the highest draw; the cluster's energy per step and per
    token; the cluster's and the facility's mean draw.

    >>> from simulator.api import load, run
    >>> e = run(load("scenarios/examples/pipeline-1f1b.yaml")).energy  # 8 H100 at their 700 W limit
    >>> round(e.clock, 3), round(e.power_per_gpu_w), round(e.joules_per_token, 4)
    (0.931, 531, 0.058)
    """

    clock: float
    power_limit_w: float
    power_per_gpu_w: float
    peak_power_per_gpu_w: float
    energy_per_step_j: float
    joules_per_token: float
    cluster_power_w: float
    facility_power_w: float

    def as_dict(self) -> dict:
        return asdict(self)


def power_timeline(
    trace: pd.DataFrame, model: PowerModel, clock: float, best_rate: float, step_s: float
) -> pd.DataFrame:
    """Per simulated rank its draw over ``[0, step_s]``: rows (rank, start_s, end_s, watts),
    one per compute task and one per gap between them (the static draw). ``best_rate`` is the
    device's best GEMM rate at the boost clock (FLOP/s)."""
    parts = []
    for rank, f in trace[trace["kind"] == "compute"].groupby("rank", sort=True):
        f = f[f["end_s"] > f["start_s"]].sort_values("start_s")
        start, end = f["start_s"].to_numpy(), f["end_s"].to_numpy()
        rate = f["flops"].to_numpy() / (end - start)
        activity = np.clip(rate / (best_rate * clock), 0.0, 1.0)
        watts = model.static_w + clock**3 * np.array([model.dynamic_w(u) for u in activity])
        gap_start = np.r_[0.0, end]
        gap_end = np.r_[start, step_s]
        keep = gap_end > gap_start
        parts.append(
            pd.DataFrame(
                {
                    "rank": int(rank),
                    "start_s": np.r_[start, gap_start[keep]],
                    "end_s": np.r_[end, gap_end[keep]],
                    "watts": np.r_[watts, np.full(int(keep.sum()), model.static_w)],
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=["rank", "start_s", "end_s", "watts"])
    return pd.concat(parts).sort_values(["rank", "start_s"], kind="stable").reset_index(drop=True)


def step_energy(
    trace: pd.DataFrame, scenario: Scenario, cm: ComputeModel, step_s: float
) -> tuple[StepEnergy, pd.DataFrame] | None:
    """The step's :class:`StepEnergy` and :func:`power_timeline`; None without a power model
    for the scenario's accelerator."""
    acc = scenario.cluster.accelerator
    model = power_model_of(acc)
    if model is None or step_s <= 0:
        return None
    best_rate = acc.peak(scenario.precision.compute_dtype) * cm.gemm.e_max
    timeline = power_timeline(trace, model, cm.sustained, best_rate, step_s)
    joules = (timeline["end_s"] - timeline["start_s"]) * timeline["watts"]
    per_rank = joules.groupby(timeline["rank"]).sum()
    per_gpu_w = float(per_rank.mean()) / step_s
    cluster_w = per_gpu_w * scenario.num_gpus
    tokens = scenario.training.global_batch * scenario.training.seq_len
    energy = StepEnergy(
        clock=cm.sustained,
        power_limit_w=model.limit_w,
        power_per_gpu_w=per_gpu_w,
        peak_power_per_gpu_w=float(timeline["watts"].max()),
        energy_per_step_j=cluster_w * step_s,
        joules_per_token=cluster_w * step_s / tokens,
        cluster_power_w=cluster_w,
        facility_power_w=cluster_w * scenario.cluster.pue,
    )
    return energy, timeline
