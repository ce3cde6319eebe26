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
whose steps do not overlap (GPipe, 1F1B, the interleaved ones, ZB-H1); ZB-H2, ZB-1p, ZB-2p and
ZB-V overlap consecutive steps, whose step time is a stage's own span, or fold the pipeline,
and get the busiest stage alone. DualPipe feeds both ends and overlaps a forward with a
backward: its bound follows each rank's order (the step builder adds a rank's compute in that
order, one task after another). An overlapped pair costs its two passes' compute (one pass's
collectives run under the other's compute); a forward or input-gradient pass of its own also
waits for its TP collectives and expert all-to-alls, less the first and the last of them
(which may wait only for, or feed only, another stage); the rank starts when its first
forward's micro-batch has gone through the model chunks below, and its last input-gradient
pass still has the chunks below to go through, then chunk 0's weight gradient. Its expert
all-to-alls run one at a time on the rank's expert stream, so a stage is busy at least as
long as they take. The tests set it beside the DeepSeek-V3 report's step on equal chunks
without communication, ``m (F + B + W) + (p/2 - 1)(F&B + B - 3W)``.

For 1F1B over equal stages the bound is the textbook step ``(m + p - 1)(f + b)``: the fill
``(p - 1) f`` and drain ``(p - 1) b`` around the last stage's ``m (f + b)``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from simulator.pipelines import Overlapped, get_schedule
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
        and not get_schedule(par.pipeline.schedule).split_backward
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
    mb_count = micro_batches_per_step(s)
    times = _chunk_times(s, schedule, reach)
    f_k, b_k, w_k = times.f, times.b, times.w
    if schedule.name == "dualpipe":
        return _dualpipe_bound(times, p, mb_count)
    busy = [
        mb_count * sum(f_k[k] + b_k[k] + w_k[k] for k in _stage_chunks(schedule, p, v, r))
        for r in range(p)
    ]
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
                ks = _stage_chunks(schedule, p, v, r)
                own = mb_count * sum(f_k[k] + b_k[k] for k in ks)
                drain = sum(b_k[k] for k in below) + (w_k[0] if first > 0 else 0.0)
            else:
                own = busy[r]
                drain = sum(b_k[k] + (0.0 if async_tp else w_k[k]) for k in below)
            if fill + own + drain > best:
                best, limit = fill + own + drain, "drain"
    return StepBound(best, tuple(busy), limit)


def _stage_chunks(schedule, p: int, v: int, r: int) -> list[int]:
    """The model chunks stage ``r`` holds."""
    return [schedule.model_chunk(p, v, r, j) for j in range(schedule.chunks_per_stage(v))]


@dataclass(frozen=True)
class ChunkTimes:
    """Per model chunk (dicts keyed by chunk, s): one micro-batch's forward ``f``,
    input-gradient ``b`` and weight-gradient ``w`` (its layers' kernels with the collectives
    they wait for, and the embedding or the output layer on the end chunks), its expert
    all-to-alls ``x`` (forward and backward, at least: :func:`_expert_exchange_s`); under
    DualPipe, whose ``f`` and ``b`` leave the collectives out, ``fx`` and ``bx``: the
    collectives a forward or input-gradient pass of its own waits for (not in a pair)."""

    f: dict[int, float]
    b: dict[int, float]
    w: dict[int, float]
    x: dict[int, float]
    fx: dict[int, float]
    bx: dict[int, float]


def _chunk_times(s: Scenario, schedule, reach: Reach) -> ChunkTimes:
    """Each model chunk's times (:class:`ChunkTimes`) under ``s``."""
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
    # per layer kind: (the expert stream's seconds, a pass's collectives forward and
    # backward, the longest one of them)
    waits: dict[bool, tuple[float, float, float, float]] = {}

    def layer_times(layer: int) -> tuple[float, float, float]:
        moe = m.is_moe_layer(layer)
        if moe not in per_layer:
            cost = layer_cost(m, layer, mb, sh, par.recompute, cm)
            blk = cost.attn_local + cost.attn_remote + cost.ffn
            if cost.experts is not None:
                blk = blk + cost.experts
            again = _recomputed_s(cost, blk, par.recompute)
            n_f, n_b = _tp_collectives(s, moe, False), _tp_collectives(s, moe, True)
            a2a = _expert_exchange_s(s, mb, sh, reach) if cost.experts is not None else 0.0
            tp_f, tp_b = n_f * one_tp + a2a, n_b * one_tp + a2a
            longest = max(one_tp if n_f or n_b else 0.0, a2a / 2)
            waits[moe] = (2 * a2a, tp_f, tp_b, longest)
            if overlapped:  # a pair runs one pass's collectives under the other's compute
                tp_f = tp_b = 0.0
            per_layer[moe] = (blk.f + tp_f, blk.b + again + tp_b, blk.w)
        return per_layer[moe]

    emb, head = embedding_block(m, mb, sh, cm), head_block(m, mb, sh, cm)
    last_chunk = schedule.model_chunks(p, v) - 1
    t = ChunkTimes({}, {}, {}, {}, {}, {})
    for (stage, local), ls in layers.items():
        k = schedule.model_chunk(p, v, stage, local)
        blk = Block()
        f = b = w = x = wait_f = wait_b = longest = 0.0
        for layer in ls:
            lf, lb, lw = layer_times(layer)
            f, b, w = f + lf, b + lb, w + lw
            lx, lwf, lwb, ll = waits[m.is_moe_layer(layer)]
            x, wait_f, wait_b, longest = x + lx, wait_f + lwf, wait_b + lwb, max(longest, ll)
        if k == 0:
            blk = blk + emb
        if k == last_chunk:
            blk = blk + head
        t.f[k], t.b[k], t.w[k], t.x[k] = f + blk.f, b + blk.b, w + blk.w, x
        # a pass's first collective may wait only for the previous stage's message, and its
        # last may feed only the next stage's: either can run under the rank's other work
        t.fx[k] = max(0.0, wait_f - 2 * longest)
        t.bx[k] = max(0.0, wait_b - 2 * longest)
    return t


def _dualpipe_bound(t: ChunkTimes, p: int, m: int) -> StepBound:
    """DualPipe's bound (module doc) from its ranks' orders: a rank's compute stream runs its
    items one after another in their order (the step builder adds them so), an overlapped
    pair at its two passes' compute, a pass of its own also waiting for its collectives; it
    starts no earlier than its first forward's micro-batch has gone through the model chunks
    below it, and its last input-gradient pass still has the chunks below to go through
    (and chunk 0's weight gradient)."""
    busy, best, limit = [], 0.0, "compute"
    for r in range(p):
        tally = _dualpipe_tally(p, r, m)
        ks = (r, p - 1 - r)  # the model chunks of local chunks 0 and 1

        experts = m / 2 * (t.x[ks[0]] + t.x[ks[1]])  # half the micro-batches go each way
        stage = max(_items_s(t, ks, tally.every), experts)
        busy.append(stage)
        first, last = ks[tally.first_chunk], ks[tally.last_b_chunk]
        fill = sum(t.f[k] for k in range(first))
        drain = sum(t.b[k] for k in range(last)) + (t.w[0] if last > 0 else 0.0)
        for value, name in (
            (stage, "compute"),
            (fill + stage, "fill"),
            (fill + _items_s(t, ks, tally.to_last_b) + drain, "drain"),
        ):
            if value > best:
                best, limit = value, name
    return StepBound(best, tuple(busy), limit)


def _items_s(t: ChunkTimes, ks: tuple[int, int], counts) -> float:
    """Seconds of compute stream a DualPipe rank's counted items take (:class:`_Tally`), its
    local chunks being model chunks ``ks``."""
    total = 0.0
    for (kind, c, alone), n in counts:
        k = ks[c]
        if kind == "F":
            total += n * (t.f[k] + (t.fx[k] if alone else 0.0))
        elif kind == "B":
            total += n * (t.b[k] + (t.bx[k] if alone else 0.0))
        else:
            total += n * t.w[k]
    return total


@dataclass(frozen=True)
class _Tally:
    """One DualPipe rank's order counted: ``every`` item and those up to its last
    input-gradient pass (``to_last_b``; of a pair holding it, its backward alone), each as
    ((kind, local chunk, a pass of its own), count) pairs; the local chunks of its first
    pass and of its last input-gradient pass."""

    every: tuple[tuple[tuple[str, int, bool], int], ...]
    to_last_b: tuple[tuple[tuple[str, int, bool], int], ...]
    first_chunk: int
    last_b_chunk: int


@lru_cache(maxsize=4096)
def _dualpipe_tally(p: int, r: int, m: int) -> _Tally:
    order = get_schedule("dualpipe").order(p, r, m, 1)
    last_b = max(
        i
        for i, item in enumerate(order)
        if (item.backward if isinstance(item, Overlapped) else item)[0] == "B"
    )
    every: Counter = Counter()
    to_last_b: Counter = Counter()
    for i, item in enumerate(order):
        if isinstance(item, Overlapped):
            keys = [(item.forward[0], item.forward[1], False), ("B", item.backward[1], False)]
        else:
            keys = [(item[0], item[1], True)]
        every.update(keys)
        if i < last_b:
            to_last_b.update(keys)
        elif i == last_b:
            to_last_b.update(key for key in keys if key[0] == "B")
    first = order[0].forward if isinstance(order[0], Overlapped) else order[0]
    end = order[last_b]
    end = end.backward if isinstance(end, Overlapped) else end
    return _Tally(tuple(every.items()), tuple(to_last_b.items()), first[1], end[1])
