"""Pipeline schedules, one module each, found by name through a registry.

A schedule is pure combinatorics (stages, micro-batches, chunks; the searched ZB-1p and ZB-2p
also take each stage's pass durations, as numbers, from the plan); it knows nothing of models,
SimPy or scenarios, so the scenario validates ``parallelism.pipeline.schedule`` against this
registry and the plan derives placement and in-flight memory from it.

>>> from simulator.pipelines import get_schedule, schedule_names
>>> schedule_names()[:5]
('1f1b', 'dualpipe', 'flexible-interleaved', 'gpipe', 'interleaved')
>>> schedule_names()[5:]
('zb-1p', 'zb-2p', 'zb-h1', 'zb-h2', 'zb-v')
>>> get_schedule("1f1b").order(p=2, r=0, m=2, v=1)
[('F', 0, 0), ('F', 0, 1), ('B', 0, 0), ('W', 0, 0), ('B', 0, 1), ('W', 0, 1)]
"""

from __future__ import annotations

from simulator.infeasible import InfeasibleError
from simulator.pipelines.base import (
    Item,
    Overlapped,
    Pass,
    PipelineSchedule,
    SteadyState,
    passes,
    peak_held,
    steady_state,
)
from simulator.pipelines.dualpipe import DualPipe
from simulator.pipelines.flexible_interleaved import FlexibleInterleaved
from simulator.pipelines.gpipe import GPipe
from simulator.pipelines.interleaved import Interleaved
from simulator.pipelines.one_f_one_b import OneFOneB
from simulator.pipelines.zb_auto import PassTimes, ZBAuto
from simulator.pipelines.zb_h1 import ZBH1
from simulator.pipelines.zb_h2 import ZBH2
from simulator.pipelines.zb_v import ZBV

_REGISTRY: dict[str, PipelineSchedule] = {}


def register(schedule: PipelineSchedule) -> PipelineSchedule:
    """Make ``schedule`` available under its ``name``."""
    _REGISTRY[schedule.name] = schedule
    return schedule


for _s in (
    GPipe(),
    OneFOneB(),
    Interleaved(),
    FlexibleInterleaved(),
    ZBH1(),
    ZBH2(),
    ZBAuto("zb-1p", 1),
    ZBAuto("zb-2p", 2),
    ZBV(),
    DualPipe(),
):
    register(_s)


def schedule_names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get_schedule(name: str) -> PipelineSchedule:
    """The schedule called ``name``; ValueError listing the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InfeasibleError(
            f"unknown pipeline schedule {name!r}; known: {', '.join(schedule_names())}"
        ) from None


__all__ = [
    "Item",
    "Overlapped",
    "Pass",
    "PassTimes",
    "PipelineSchedule",
    "SteadyState",
    "get_schedule",
    "passes",
    "peak_held",
    "register",
    "schedule_names",
    "steady_state",
]
