"""The run's memory timeline on its devices and its busiest links over time."""

from __future__ import annotations

import pandas as pd

from simulator import metrics
from simulator.plan.memory import (
    device_bytes,
)


def _on_device(memory: pd.DataFrame, framework, nccl: dict[int, float]) -> pd.DataFrame:
    """The timeline of live tensors as device memory in use, the way the peak is reported:
    the allocator's reserve over the tensors, plus the runtime's own memory and each rank's
    NCCL buffers (``nccl``, B)."""
    out = memory.copy()
    outside = framework.runtime_bytes + out["rank"].map(nccl).fillna(0.0)
    for col in ("bytes", "static_bytes"):
        out[col] = device_bytes(out[col], outside, framework.allocator_reserve)
    return out


def _link_report(sim, step_time: float):
    """Load over time of the most utilised link of each level and direction, from a
    :class:`simulator.api.Simulation` run with link tracking."""
    from simulator.report.plots import most_utilised_per_level

    model = sim.network
    names = [f"{u}->{v}" for u, v in model.links.edges]
    mean = pd.Series(sim.stats.link_bytes / (model.links.capacity * step_time), index=names)
    index = {name: i for i, name in enumerate(names)}
    chosen = [index[n] for n in most_utilised_per_level(mean, per_level=1)]
    links = metrics.link_utilisation(
        sim.stats.link_samples,
        sim.stats.link_bytes,
        model.links.capacity,
        names,
        step_time,
        chosen=chosen,
    )
    busiest = {
        name: float(((f["end_s"] - f["start_s"]) * f["utilisation"]).sum() / step_time)
        for name, f in links.groupby("link", sort=False)
    }
    return links, busiest
