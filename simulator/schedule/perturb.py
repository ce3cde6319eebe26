"""Perturbations of a step: the seam where stragglers and degraded links enter.

A perturbation changes a built step without rebuilding it: :class:`SlowCompute` stretches
every compute task of one rank (a GPU at a thermal or power cap, a slow host),
:class:`SlowLink` lowers one directed link's bandwidth (a degraded NIC or cable). Compute
changes apply to the TaskGraph here; link changes are the engine's, applied where the network
is built (``simulator.api.simulate``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.infeasible import InfeasibleError
from simulator.schedule.step import StepGraph


@dataclass(frozen=True)
class SlowCompute:
    """``rank``'s compute tasks take ``factor`` times as long (factor >= 1 for a straggler;
    a power cap at a fraction f of peak is factor 1/f).

    >>> SlowCompute(rank=3, factor=1.25)  # what failures.stragglers.gpus[] becomes
    SlowCompute(rank=3, factor=1.25)
    """

    rank: int
    factor: float

    def __post_init__(self):
        if not self.factor > 0:
            raise InfeasibleError(f"SlowCompute factor must be > 0, got {self.factor}")


@dataclass(frozen=True)
class SlowLink:
    """The directed link ``src -> dst`` (topology node ids) runs at ``fraction`` of its
    bandwidth, 0 < fraction <= 1 (a dead link would need rerouting, not modelled here).

    >>> SlowLink(0, "nvswitch0", 0.5)  # GPU 0's link up to its NVSwitch at half speed
    SlowLink(src=0, dst='nvswitch0', fraction=0.5)
    """

    src: object
    dst: object
    fraction: float

    def __post_init__(self):
        if not 0 < self.fraction <= 1:
            raise InfeasibleError(f"SlowLink fraction must be in (0, 1], got {self.fraction}")


Perturbation = SlowCompute | SlowLink


def perturb(step: StepGraph, perturbations: list[Perturbation] | tuple = ()) -> StepGraph:
    """``step`` with each :class:`SlowCompute` applied (link perturbations pass through to the
    engine). ValueError if a slowed rank is not simulated (use ``simulation.mode: full``).

    In symmetric mode a simulated rank stands for its stage's whole symmetry class, so slowing
    it slows that stage in every replica; ``simulator.api.run`` switches to full mode to slow
    one GPU alone.

    >>> from simulator.api import build_plan, build_step, build_topology, load, simulate
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> topo = build_topology(s.cluster)
    >>> step = build_step(build_plan(s, topo))
    >>> slowed = perturb(step, [SlowCompute(rank=0, factor=2.0)])  # stage 0 twice as slow
    >>> [round(float(simulate(g, topo).frame["end_s"].max()), 4) for g in (step, slowed)]
    [0.4473, 0.6859]
    """
    slow: dict[int, float] = {}
    for p in perturbations:
        if isinstance(p, SlowCompute):
            if p.rank not in step.stage_of:
                raise InfeasibleError(
                    f"rank {p.rank} is not simulated (symmetric mode simulates "
                    f"{len(step.stage_of)} ranks); set simulation.mode: full to slow one rank"
                )
            slow[p.rank] = slow.get(p.rank, 1.0) * p.factor
    if not slow:
        return step
    tasks = [
        t._replace(duration_s=t.duration_s * slow[t.rank])
        if t.kind == "compute" and t.rank in slow
        else t
        for t in step.graph.tasks
    ]
    graph = dataclasses.replace(step.graph, tasks=tasks)
    return dataclasses.replace(step, graph=graph)
