"""Build the TaskGraph of one steady-state training step from a :class:`~simulator.plan.Plan`.

Each simulated rank runs its pipeline stage's order (from the plan's schedule) expanded into
compute tasks, with durations from the compute model, and communication tasks on streams
``tp``, ``cp``, ``ep``, ``dp``, ``pp_fwd`` and ``pp_bwd`` (:mod:`simulator.schedule.passes`,
:mod:`simulator.schedule.layer_tasks`, :mod:`simulator.schedule.data_parallel`):

- tensor parallel: an all-reduce after the attention and after the MLP, forward and backward;
  with sequence parallelism an all-gather before and a reduce-scatter after each instead;
- context parallel: the local K/V go round the CP ring while the local attention block
  computes; backward reduce-scatters dK/dV;
- expert parallel: dispatch and combine all-to-alls around the routed experts;
- pipeline: each chunk's output activation (its input gradient going back) is a send to the
  next chunk's stage; the receiver's pass depends on it;
- data parallel: DDP all-reduces gradient buckets as the last micro-batch's backward produces
  them; ZeRO-1/2 reduce-scatter them and all-gather the updated parameters at the start of
  the step; ZeRO-3 all-gathers each unit before its forward and backward and reduce-scatters
  its gradient after every micro-batch (FSDP's default);
- recompute: full recompute re-runs each layer's forward before its backward, selective the
  attention core;
- the optimizer step (memory-bound) after the last gradient communication.

Symmetric mode simulates one rank per pipeline stage; the other groups' identical collectives
ride along as copies so the network sees all of them. Full mode simulates every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.compute import ComputeModel
from simulator.pipelines import SteadyState, passes
from simulator.plan.plan import Plan
from simulator.schedule import data_parallel as dp
from simulator.schedule.builder import GraphBuilder
from simulator.schedule.passes import RankState, gather_updated_params, run_item
from simulator.schedule.taskgraph import TaskGraph


@dataclass(frozen=True)
class StepGraph:
    """The TaskGraph of one step and what its metrics need: the plan, the simulated ranks,
    their static memory (parameters + gradients + optimizer state, B) and stages.

    With ``steady`` set the graph holds only ``steady.reduced`` of the plan's micro-batches
    (warm-up, two periods, cool-down), for the engine to repeat the periods
    (:mod:`simulator.engine.steady_state`)."""

    graph: TaskGraph
    plan: Plan
    static_memory: dict[int, float]
    stage_of: dict[int, int]
    steady: SteadyState | None = None
    compute_model: ComputeModel | None = None  # the kernel durations' (its clock: energy)

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.plan.ranks


def _rank_state(plan: Plan, rank: int) -> RankState:
    stage = plan.stages[plan.stage_of(rank)]
    unit_of = {layer: unit for ch in stage.chunks for unit in ch.units for layer in unit}
    last_w = {c: j for kind, c, j in passes(stage.order) if kind == "W"}
    return RankState(rank, stage, unit_of, last_w)


def build_step(plan: Plan, cm: ComputeModel) -> StepGraph:
    """The TaskGraph of one training step of ``plan`` with compute durations from ``cm``."""
    b = GraphBuilder(plan, cm)
    for rank in plan.ranks:
        st = _rank_state(plan, rank)
        if plan.policy.zero in (1, 2):
            gather_updated_params(b, st)
        for item in st.stage.order:
            run_item(b, st, item)
        dp.optimizer(b, rank, st.stage.stage, st.dp_tasks)
    graph = b.finish()
    stage_of = {rank: plan.stage_of(rank) for rank in plan.ranks}
    static = {rank: plan.stages[stage_of[rank]].static_bytes for rank in plan.ranks}
    return StepGraph(graph, plan, static, stage_of, compute_model=cm)
