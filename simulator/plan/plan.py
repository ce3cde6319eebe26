"""The Plan: every decision about how a scenario's model is laid out on its ranks, made once.

``build_plan(scenario) -> Plan`` is a frozen value that both the memory ledger
(:mod:`simulator.plan.memory`) and the step builder (:mod:`simulator.schedule`) read, so no
quantity is computed in two places: the rank grid and its groups, the sharding, the
micro-batch shape and count, the pipeline schedule and its placement, the simulated ranks,
and per stage the layer chunks, FSDP units, gradient buckets, parameter counts, static
bytes (parameters, gradients, optimizer state after ZeRO) and the pipeline send buffer.

>>> from simulator.scenario import load_scenario
>>> plan = build_plan(load_scenario("scenarios/examples/pipeline-interleaved.yaml"))
>>> plan.schedule.name, plan.grid.pp, plan.chunks_per_stage, plan.stages[0].chunks[1].layers
('interleaved', 4, 2, (16, 17, 18, 19))
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from simulator.model.activations import MicroBatch
from simulator.model.ops import Sharding, model_flops_per_sequence
from simulator.model.params import (
    embedding_params_per_rank,
    head_params_per_rank,
    layer_params_per_rank,
)
from simulator.pipelines import Item, PipelineSchedule, get_schedule, peak_held
from simulator.plan.buckets import Bucket, Key, fsdp_units, gradient_buckets
from simulator.plan.collective_choice import NetworkFacts
from simulator.plan.grid import RankGrid
from simulator.plan.pass_times import pass_times
from simulator.plan.policy import StepPolicy, policy_of
from simulator.scenario.schema import ModelConfig, Scenario


@dataclass(frozen=True)
class ChunkPlan:
    """One model chunk held by a stage: its layers, whether it holds the embedding (first
    model chunk) or the output layer (last), its FSDP units and gradient buckets, and where
    its activations come from and go (``(stage, chunk)``, None at the model's ends)."""

    model_chunk: int
    layers: tuple[int, ...]
    has_embedding: bool
    has_head: bool
    units: tuple[tuple[int, ...], ...]
    buckets: tuple[Bucket, ...]
    prev_hop: tuple[int, int] | None
    next_hop: tuple[int, int] | None


@dataclass(frozen=True)
class StagePlan:
    """Pipeline stage ``stage``: its chunks, its pass order, and its per-rank parameters and
    static bytes. ``dense_params``/``expert_params`` are per rank after TP/EP, before ZeRO;
    ``static_bytes`` are parameters + gradients + optimizer state after ZeRO (B)."""

    stage: int
    chunks: tuple[ChunkPlan, ...]
    order: tuple[Item, ...]
    dense_params: float
    expert_params: float
    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    in_flight: float  # micro-batches' worth of the stage's layers held at its peak

    @property
    def static_bytes(self) -> float:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(x for c in self.chunks for x in c.layers)

    @property
    def is_first(self) -> bool:
        return any(c.has_embedding for c in self.chunks)

    @property
    def is_last(self) -> bool:
        return any(c.has_head for c in self.chunks)


@dataclass(frozen=True)
class Plan:
    """How ``scenario`` runs: see the module docstring. Byte sizes in B, parameters per rank.

    The step builder reads ``model``, ``policy`` and the layout, never ``scenario`` (kept for
    the stages above it: metrics, reports)."""

    scenario: Scenario
    model: ModelConfig
    policy: StepPolicy
    grid: RankGrid
    sharding: Sharding
    micro_batch: MicroBatch
    micro_batches: int  # per pipeline per step (gradient-accumulation steps)
    schedule: PipelineSchedule
    chunks_per_stage: int
    stages: tuple[StagePlan, ...]
    ranks: tuple[int, ...]  # the simulated ranks
    param_bytes_per_param: float
    grad_bytes_per_param: float
    optimizer_bytes_per_param: float
    dense_shard_ranks: int  # ranks a dense parameter's ZeRO shards spread over (DP x CP)
    expert_shard_ranks: int  # the expert-data-parallel group
    tp_message_bytes: float  # one activation tensor at full hidden size (a TP collective)
    send_bytes: float  # one pipeline send: an activation or its gradient
    model_flops_per_step: float
    network: NetworkFacts | None = None
    collectives: dict[str, str] = field(default_factory=dict)  # stream -> forced algorithm

    @property
    def symmetric(self) -> bool:
        return self.scenario.simulation.mode == "symmetric"

    def stage_of(self, rank: int) -> int:
        return self.grid.coord(rank, "pp")

    def params_of(self, key: Key) -> tuple[float, float]:
        """(dense, expert) parameters per rank of a layer, a unit of layers, "emb" or "head"."""
        return params_of_key(self.scenario, key)

    def accumulated_params(self, key: Key) -> float:
        """Parameters of ``key`` whose gradient this rank keeps between micro-batches: its
        shard under ZeRO-2/3 (gradients are reduce-scattered each micro-batch), all of them
        otherwise."""
        dense, expert = self.params_of(key)
        if self.scenario.parallelism.zero >= 2:
            return dense / self.dense_shard_ranks + expert / self.expert_shard_ranks
        return dense + expert

    def with_micro_batches(self, count: int) -> Plan:
        """This plan for ``count`` micro-batches per pipeline (a smaller global batch at the
        same micro-batch): each stage's pass order and in-flight peak again, the rest kept
        (the steady-state shortcut simulates a reduced step this way). ``scenario`` stays the
        one planned from; ``model_flops_per_step`` scales with the batch."""
        p, v = self.grid.pp, self.scenario.parallelism.pipeline.virtual_stages
        stages = []
        for st in self.stages:
            order, in_flight = _stage_order(self.schedule, p, st.stage, count, v, _weights(st))
            stages.append(replace(st, order=order, in_flight=in_flight))
        return replace(
            self,
            micro_batches=count,
            stages=tuple(stages),
            model_flops_per_step=self.model_flops_per_step * count / self.micro_batches,
        )


def params_of_key(s: Scenario, key) -> tuple[float, float]:
    m, p = s.model, s.parallelism
    if key == "head":
        return head_params_per_rank(m, p.tp, p.pp), 0.0
    if key == "emb":
        return embedding_params_per_rank(m, p.tp), 0.0
    if isinstance(key, tuple):
        parts = [layer_params_per_rank(m, x, p.tp, p.ep, p.expert_tp) for x in key]
        return sum(d for d, _ in parts), sum(e for _, e in parts)
    return layer_params_per_rank(m, key, p.tp, p.ep, p.expert_tp)


def grid_of(s: Scenario) -> RankGrid:
    p = s.parallelism
    return RankGrid(dp=s.dp, pp=p.pp, cp=p.cp, tp=p.tp, ep=p.ep, order=tuple(p.order), etp=p.etp)


def micro_batch_of(s: Scenario, param_bytes: float) -> MicroBatch:
    """The micro-batch's shape and what the framework keeps of it; autocast's weight casts
    (read fp32, write bf16: 6 B per parameter) only happen to weights kept in fp32
    (``param_bytes`` >= 4)."""
    tr, fw = s.training, s.framework
    return MicroBatch(
        tr.micro_batch,
        tr.seq_len,
        s.precision.activation_bytes,
        tr.flash_attention,
        swiglu_saved=fw.swiglu_saved,
        eager_norms=fw.eager_norms,
        loss_bytes_per_logit=fw.loss_bytes_per_logit,
        eager_kernels=fw.eager_kernels,
        weight_cast_bytes=6.0 if fw.weight_casts and param_bytes >= 4 else 0.0,
    )


def micro_batches_per_step(s: Scenario) -> int:
    """Micro-batches each pipeline processes per step (:attr:`Scenario.micro_batches`)."""
    return s.micro_batches


def sharding_of(s: Scenario) -> Sharding:
    p = s.parallelism
    return Sharding(tp=p.tp, sp=p.sequence_parallel, cp=p.cp, ep=p.ep, expert_tp=p.expert_tp)


def simulated_ranks(s: Scenario, grid: RankGrid) -> tuple[int, ...]:
    """One rank per stage (symmetric mode) or all of them (full mode)."""
    if s.simulation.mode == "full":
        return tuple(range(grid.size))
    return tuple(grid.rank(tp=0, cp=0, dp=0, pp=r) for r in range(grid.pp))


def zero_sharded(per_param: tuple[float, float, float], stage: int, n: float):
    """(params, grads, optimizer) bytes per parameter on one rank under ZeRO ``stage`` with
    ``n`` ranks sharing (Rajbhandari et al. 2020, sec. 5)."""
    p, g, k = per_param
    return (p / n if stage >= 3 else p, g / n if stage >= 2 else g, k / n if stage >= 1 else k)


def build_plan(s: Scenario, network: NetworkFacts | None = None) -> Plan:
    """Every layout decision for ``s``; ``network`` lets collectives be chosen per group."""
    par, tr = s.parallelism, s.training
    pl = par.pipeline
    schedule = get_schedule(pl.schedule)
    v = pl.virtual_stages
    m = micro_batches_per_step(s)
    per_param = s.precision.bytes_per_param(tr.optimizer)
    dense_n = s.dp * par.cp
    expert_n = max(1, s.dp * par.cp * par.tp // (par.ep * par.etp))
    mb = micro_batch_of(s, per_param[0])
    tokens = mb.b * mb.s / par.cp
    tp_msg = mb.act_bytes * tokens * s.model.hidden
    layers = schedule.chunk_layers(
        s.model.layers, par.pp, v, pl.first_stage_layers, pl.last_stage_layers
    )
    grid = grid_of(s)
    sharding = sharding_of(s)
    send_bytes = tp_msg / (par.tp if par.sequence_parallel else 1)
    if schedule.needs_times:  # ordered by its passes' durations
        stride = grid.rank(tp=0, cp=0, dp=0, pp=1) if par.pp > 1 else 0
        times = pass_times(s, schedule, layers, mb, sharding, send_bytes, stride, network)
        schedule = schedule.with_times(times)
    stages = tuple(
        _stage_plan(s, schedule, layers, r, m, per_param, dense_n, expert_n) for r in range(par.pp)
    )
    return Plan(
        scenario=s,
        model=s.model,
        policy=policy_of(s),
        grid=grid,
        sharding=sharding,
        micro_batch=mb,
        micro_batches=m,
        schedule=schedule,
        chunks_per_stage=schedule.chunks_per_stage(v),
        stages=stages,
        ranks=simulated_ranks(s, grid),
        param_bytes_per_param=per_param[0],
        grad_bytes_per_param=per_param[1],
        optimizer_bytes_per_param=per_param[2],
        dense_shard_ranks=dense_n,
        expert_shard_ranks=expert_n,
        tp_message_bytes=tp_msg,
        send_bytes=send_bytes,
        model_flops_per_step=model_flops_per_sequence(s.model, tr.seq_len) * tr.global_batch,
        network=network,
        collectives=dict(par.collectives or {}),
    )


@lru_cache(maxsize=128)  # a few plans' stages: an order holds ~100 KB of passes
def _stage_order(schedule: PipelineSchedule, p: int, r: int, m: int, v: int, weights: tuple):
    """(stage ``r``'s order of passes, the peak share of its chunks' activations in flight
    with chunk ``c`` weighing ``weights[c]``): pure functions of their arguments, kept for
    the plans after (a sweep's points, a plan search) - a 16-stage interleaved order of 192
    micro-batches is 1,700 passes to list and walk per stage."""
    order = tuple(schedule.order(p, r, m, v))
    return order, peak_held(order, weights.__getitem__)


def _weights(chunks) -> tuple[float, ...]:
    """Each chunk's share of its stage's layers (a stage's or its chunks')."""
    chunks = getattr(chunks, "chunks", chunks)
    stage_layers = sum(len(c.layers) for c in chunks) or 1
    return tuple(len(c.layers) / stage_layers for c in chunks)


def _stage_plan(s, schedule, layers, r, m, per_param, dense_n, expert_n) -> StagePlan:
    par = s.parallelism
    p, v = par.pp, par.pipeline.virtual_stages
    last_chunk = schedule.model_chunks(p, v) - 1
    cap = par.bucket_size / per_param[1] if per_param[1] > 0 else float("inf")
    chunks = []
    dense = expert = 0.0
    for c in range(schedule.chunks_per_stage(v)):
        k = schedule.model_chunk(p, v, r, c)
        ls = layers[(r, c)]
        keys: list = (["head"] if k == last_chunk else []) + list(reversed(ls))
        keys += ["emb"] if k == 0 else []
        for key in keys:
            d, e = params_of_key(s, key)
            dense, expert = dense + d, expert + e
        chunks.append(
            ChunkPlan(
                model_chunk=k,
                layers=ls,
                has_embedding=k == 0,
                has_head=k == last_chunk,
                units=fsdp_units(ls, par.fsdp_unit_layers),
                buckets=gradient_buckets(keys, cap, lambda key: params_of_key(s, key)),
                prev_hop=schedule.prev_hop(p, v, r, c),
                next_hop=schedule.next_hop(p, v, r, c),
            )
        )
    order, in_flight = _stage_order(schedule, p, r, m, v, _weights(chunks))
    dense_b = zero_sharded(per_param, par.zero, dense_n)
    expert_b = zero_sharded(per_param, par.zero, expert_n)
    return StagePlan(
        stage=r,
        chunks=tuple(chunks),
        order=order,
        dense_params=dense,
        expert_params=expert,
        param_bytes=dense * dense_b[0] + expert * expert_b[0],
        grad_bytes=dense * dense_b[1] + expert * expert_b[1],
        optimizer_bytes=dense * dense_b[2] + expert * expert_b[2],
        in_flight=in_flight,
    )
