"""A lower bound on a step's simulated time, from the same kernel costs the step is built of.

The plan search (:mod:`simulator.sweep.search`) drops a candidate without simulating it only
when this bound says it cannot beat a plan already simulated, so the bound must never exceed
the simulated step. It is the longest of three chains that no schedule can shorten:

- **a stage's compute** (``busy``): every micro-batch's forward, input-gradient and
  weight-gradient work on the stage's layers (with the recompute its policy re-runs, the
  embedding on the first model chunk, the output layer and loss on the last), each kernel at
  the compute model's duration (:func:`~simulator.schedule.costs.layer_cost`, MoE experts at
  their load imbalance), plus the tensor-parallel collectives that sit between a layer's
  kernels (the compute waits for them: Megatron's f/g operators), each at least
  ``(t - 1) / t`` of its message over the fastest a GPU can receive (its links' summed
  capacity), and in an MoE layer the dispatch and combine all-to-alls the routed experts sit
  between (each at least the ``(e - 1) / e`` of its tokens a rank receives from the other
  ``e - 1`` of its expert-parallel group, over that same capacity, and at least the share
  from members on other hosts over the host's network links into the GPU, its own NIC: PXN
  relays at the sender, so a message from another host enters through the receiver's NIC).
  Left out, so the bound stays below: context-parallel traffic (which may hide under
  compute), DeepEP's routed exchange (its bytes depend on where the tokens go), expert-TP
  gathers, recompute's collectives, pipeline sends, the data-parallel synchronisation and the
  optimizer step, and every contention;
- **the fill** before it: the first micro-batch's forward through every model chunk below the
  stage's first (it cannot start earlier);
- **the drain** after it: the last micro-batch's input-gradient pass through every model chunk
  below, and stage 0's weight gradient of it where W is a pass of its own.

Fill and drain apply to the schedules whose micro-batches all enter at the first stage and
whose steps do not overlap (GPipe, 1F1B, the interleaved ones, ZB-H1); the others (ZB-H2,
ZB-1p, ZB-2p and ZB-V overlap consecutive steps, whose step time is a stage's own span, or fold
the pipeline; DualPipe feeds both ends
and overlaps a forward with a backward) get the busiest stage alone, and DualPipe's busy time
leaves the tensor-parallel and expert collectives out of the compute chain (its pairs run one
pass's collectives under the other's compute) and counts each micro-batch on one of a stage's
two chunks (half go each way); its expert all-to-alls still run one at a time on the rank's
expert stream, so a stage is busy at least as long as they take.

For 1F1B over equal stages the bound is the textbook step ``(m + p - 1)(f + b)``: the fill
``(p - 1) f`` and drain ``(p - 1) b`` around the last stage's ``m (f + b)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.pipelines import get_schedule
from simulator.plan.grid import RankGrid
from simulator.plan.plan import grid_of, micro_batch_of, micro_batches_per_step, sharding_of
from simulator.scenario.schema import Scenario
from simulator.schedule.costs import (
    Block,
    embedding_block,
    head_block,
    layer_cost,
    routed_tokens_bytes,
)
from simulator.stages.costs import compute_model_of

# Schedules whose micro-batches all enter at stage 0 and whose steps end together.
FILLED = frozenset({"gpipe", "1f1b", "interleaved", "flexible-interleaved", "zb-h1"})


@dataclass(frozen=True)
class StepBound:
    """The bound (s) and its parts: each stage's busy time (s), which chain set it."""

    seconds: float
    busy_s: tuple[float, ...]
    limit: str  # "compute" (a stage's busy time), "fill" or "drain"

    @property
    def busiest_stage(self) -> int:
        return max(range(len(self.busy_s)), key=self.busy_s.__getitem__)


def _tp_collectives(s: Scenario, moe_layer: bool, backward: bool) -> int:
    """TP collectives a layer's compute waits for in one pass: the attention block's (an
    all-gather and a reduce-scatter with sequence parallelism, an all-reduce without) and a
    dense MLP's; none in a backward whose all-reduce runs asynchronously
    (:func:`~simulator.schedule.layer_tasks.async_tp`'s conditions)."""
    par = s.parallelism
    if par.tp == 1:
        return 0
    if backward and (
        s.framework.tp_async_allreduce
        and not par.sequence_parallel
        and par.cp == 1
        and par.zero < 3
        and not moe_layer
        and s.parallelism.pipeline.schedule not in ("zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v")
    ):
        return 0
    per_block = 2 if par.sequence_parallel else 1
    return per_block * (1 if moe_layer else 2)


@dataclass(frozen=True)
class Reach:
    """What one GPU can receive per second: over all its links (``ingress_Bps``, B/s), and
    from other hosts through its host's network links into it (``off_host_Bps``, B/s; None
    where no other host can reach it but through another device, as on a torus), with
    ``per_host`` GPUs a host (ranks sit on devices in order, so rank r is on host r //
    per_host; 0: unknown)."""

    ingress_Bps: float | None = None
    off_host_Bps: float | None = None
    per_host: int = 0


def _away(s: Scenario, per_host: int) -> int:
    """The fewest members of an expert-parallel group on hosts other than the rank's own,
    over the groups of rank 0's pipeline stages."""
    return _away_in(grid_of(s), per_host)


@lru_cache(maxsize=4096)
def _away_in(grid: RankGrid, per_host: int) -> int:
    return min(
        sum(1 for r in grid.ep_group(rank) if r // per_host != rank // per_host)
        for rank in grid.group(0, "pp")
    )


def _expert_exchange_s(s: Scenario, mb, sh, reach: Reach) -> float:
    """Seconds an MoE layer's pass waits at least for its dispatch and combine all-to-alls,
    sized as the step builder sizes them (:func:`~simulator.schedule.costs.routed_tokens_bytes`):
    ``(e - 1) / e`` of them come from the other ranks of its group through all its links, and
    the share of the members on other hosts through its network links (:class:`Reach`). None
    under DeepEP or without expert parallelism."""
    par, moe = s.parallelism, s.model.moe
    e = par.ep
    if not reach.ingress_Bps or moe is None or e == 1 or par.moe_dispatcher == "deepep":
        return 0.0
    size, local = routed_tokens_bytes(s.model, mb, sh)
    size = size / par.tp if local else size
    one = (e - 1) / e * size / reach.ingress_Bps
    if reach.off_host_Bps and reach.per_host:
        one = max(one, _away(s, reach.per_host) / e * size / reach.off_host_Bps)
    return 2 * one


def _recomputed_s(cost, blk, recompute: str) -> float:
    """Seconds of forward a layer's backward runs again under ``recompute``."""
    if cost.modules is not None:
        return cost.modules.f
    return {"full": blk.f, "selective": cost.core.f}.get(recompute, 0.0)


def step_lower_bound(s: Scenario, reach: Reach | float | None = None) -> StepBound:
    """The lower bound (module doc) on ``s``'s simulated step time. ``reach``: what a GPU can
    receive per second (:class:`Reach`, or its ``ingress_Bps`` alone, B/s); None leaves the
    tensor-parallel and expert collectives out."""
    reach = reach if isinstance(reach, Reach) else Reach(reach)
    par = s.parallelism
    schedule = get_schedule(par.pipeline.schedule)
    p, v = par.pp, par.pipeline.virtual_stages
    c = schedule.chunks_per_stage(v)
    mb_count = micro_batches_per_step(s)
    f_k, b_k, w_k, x_k = _chunk_times(s, schedule, reach)
    busy = []
    # DualPipe sends half the micro-batches each way, each through one of a stage's chunks;
    # its expert all-to-alls hide under the other pass's compute, but run one at a time on
    # the rank's expert stream: the busier of the two streams bounds the stage
    overlapped = schedule.name == "dualpipe"
    share = 0.5 if overlapped else 1.0
    for r in range(p):
        ks = [schedule.model_chunk(p, v, r, j) for j in range(c)]
        compute = share * mb_count * sum(f_k[k] + b_k[k] + w_k[k] for k in ks)
        experts = share * mb_count * sum(x_k[k] for k in ks) if overlapped else 0.0
        busy.append(max(compute, experts))
    best, limit = max(busy), "compute"
    if schedule.name in FILLED and not schedule.overlapping_steps and p > 1:
        split = schedule.split_backward
        # Megatron's asynchronous TP all-reduce lets a layer's input gradient go on before its
        # weight gradient: the drain below then waits for B alone
        async_tp = not split and _tp_collectives(s, False, True) == 0 and par.tp > 1
        for r in range(p):
            first = schedule.model_chunk(p, v, r, 0)
            fill = sum(f_k[k] for k in range(first))
            if fill + busy[r] > best:
                best, limit = fill + busy[r], "fill"
            below = range(first)
            if split:  # F and B of every micro-batch, then B down the chunks and stage 0's W
                ks = [schedule.model_chunk(p, v, r, j) for j in range(c)]
                own = mb_count * sum(f_k[k] + b_k[k] for k in ks)
                drain = sum(b_k[k] for k in below) + (w_k[0] if first > 0 else 0.0)
            else:
                own = busy[r]
                drain = sum(b_k[k] + (0.0 if async_tp else w_k[k]) for k in below)
            if fill + own + drain > best:
                best, limit = fill + own + drain, "drain"
    return StepBound(best, tuple(busy), limit)


def _chunk_times(s: Scenario, schedule, reach: Reach) -> tuple[dict, dict, dict, dict]:
    """Per model chunk: the forward, input-gradient and weight-gradient seconds of one
    micro-batch (its layers' kernels with the collectives they wait for, and the embedding
    or the output layer on the end chunks), and its expert all-to-alls' (forward and
    backward, at least: :func:`_expert_exchange_s`)."""
    par, m = s.parallelism, s.model
    p, v = par.pp, par.pipeline.virtual_stages
    per_param = s.precision.bytes_per_param(s.training.optimizer)
    mb, sh = micro_batch_of(s, per_param[0]), sharding_of(s)
    cm = compute_model_of(s)  # the step's clock under its power limit, as the run's
    layers = schedule.chunk_layers(
        m.layers, p, v, par.pipeline.first_stage_layers, par.pipeline.last_stage_layers
    )
    tokens = mb.b * mb.s / par.cp
    message = mb.act_bytes * tokens * m.hidden
    ingress_Bps = reach.ingress_Bps
    one_tp = (par.tp - 1) / par.tp * message / ingress_Bps if ingress_Bps else 0.0
    overlapped = schedule.name == "dualpipe"
    per_layer: dict[bool, tuple[float, float, float]] = {}
    exchange: dict[bool, float] = {}

    def layer_times(layer: int) -> tuple[float, float, float]:
        moe = m.is_moe_layer(layer)
        if moe not in per_layer:
            cost = layer_cost(m, layer, mb, sh, par.recompute, cm)
            blk = cost.attn_local + cost.attn_remote + cost.ffn
            if cost.experts is not None:
                blk = blk + cost.experts
            again = _recomputed_s(cost, blk, par.recompute)
            tp_f = 0.0 if overlapped else _tp_collectives(s, moe, False) * one_tp
            tp_b = 0.0 if overlapped else _tp_collectives(s, moe, True) * one_tp
            a2a = _expert_exchange_s(s, mb, sh, reach) if cost.experts is not None else 0.0
            if not overlapped:
                tp_f, tp_b = tp_f + a2a, tp_b + a2a
            exchange[moe] = 2 * a2a  # the expert stream's, forward and backward
            per_layer[moe] = (blk.f + tp_f, blk.b + again + tp_b, blk.w)
        return per_layer[moe]

    emb, head = embedding_block(m, mb, sh, cm), head_block(m, mb, sh, cm)
    last_chunk = schedule.model_chunks(p, v) - 1
    f_k: dict[int, float] = {}
    b_k: dict[int, float] = {}
    w_k: dict[int, float] = {}
    x_k: dict[int, float] = {}
    for (stage, local), ls in layers.items():
        k = schedule.model_chunk(p, v, stage, local)
        blk = Block()
        f = b = w = x = 0.0
        for layer in ls:
            lf, lb, lw = layer_times(layer)
            f, b, w = f + lf, b + lb, w + lw
            x += exchange[m.is_moe_layer(layer)]
        x_k[k] = x
        if k == 0:
            blk = blk + emb
        if k == last_chunk:
            blk = blk + head
        f_k[k], b_k[k], w_k[k] = f + blk.f, b + blk.b, w + blk.w
    return f_k, b_k, w_k, x_k
