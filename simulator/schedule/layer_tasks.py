"""Tasks of one transformer layer for one micro-batch: forward, input-gradient, weight-gradient.

Tensor parallelism wraps the attention and MLP blocks in collectives declared once with their
backward twins (Megatron's f/g operators): without sequence parallelism an all-reduce closes
each block, mirrored by an all-reduce in backward; with it an all-gather opens each block and
a reduce-scatter closes it, mirrored by a reduce-scatter and an all-gather. Context
parallelism passes K/V round its ring while the local attention block computes (dK/dV come
back by reduce-scatter); expert parallelism puts the routed experts between a dispatch and a
combine all-to-all.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from simulator.collectives import deepep
from simulator.schedule.builder import Dep, GraphBuilder
from simulator.schedule.costs import (
    Block,
    LayerCost,
    grad_accumulate_block,
    layer_cost,
    routed_tokens_bytes,
)

Emitter = Generator[None, None, list[Dep]]  # emits tasks, pausing after each compute task


@dataclass(frozen=True)
class Twin:
    """A forward collective and the one its backward runs at the same place (None: none)."""

    forward: str | None
    backward: str | None


# (opening a block, closing it) under sequence parallelism or not
TP_OPEN = {True: Twin("all_gather", "reduce_scatter"), False: Twin(None, None)}
TP_CLOSE = {True: Twin("reduce_scatter", "all_gather"), False: Twin("all_reduce", "all_reduce")}


def then(last: list[Dep], new: int | None) -> list[Dep]:
    """The dependency list after ``new`` (a task, or None when it was not needed)."""
    return [new] if new is not None else last


TP_NAME = {c: f"tp_{c}" for c in ("all_reduce", "all_gather", "reduce_scatter")}  # task names
PHASE_OF = {"f": "forward", "b": "input_grad", "w": "weight_grad"}


def compute(
    b: GraphBuilder,
    rank: int,
    name: str,
    block: Block,
    parts: tuple[tuple[str, Block], ...],
    pass_: str,
    deps,
    mem_alloc: float = 0.0,
    mem_free: float = 0.0,
    phase: str = "",
    layer: int = -1,
    microbatch: int = -1,
) -> int:
    """One compute task for ``block``'s ``pass_`` ("f", "b" or "w"), or with
    ``simulation.kernel_tasks`` one task per kernel in ``parts``, chained, named after the op
    (the first takes ``mem_alloc``, the last releases ``mem_free``); returns the last task.
    A plain function (one generator per block cost more than the task): the emitters here
    pause after each call, once per block either way, so that an overlapped pass (DualPipe)
    interleaves with the same granularity with or without kernel tasks."""
    seconds, flops = block.in_pass(pass_)
    if not (b.kernel_tasks and parts):
        t = b.task(
            rank, "compute", name, seconds, deps, flops=flops, mem_alloc=mem_alloc,
            mem_free=mem_free, phase=phase, layer=layer, microbatch=microbatch,
            host=block.host_in(pass_),
        )  # fmt: skip
        return t
    kw = {"phase": phase, "layer": layer, "microbatch": microbatch}
    kernels = [(op, part) for op, part in parts if part.in_pass(pass_)[0] > 0]
    if pass_ != "f":  # gradients flow through the kernels in reverse
        kernels.reverse()
    if not kernels:  # nothing runs in this pass: keep the block's (empty) task
        return b.task(
            rank, "compute", name, 0.0, deps, mem_alloc=mem_alloc, mem_free=mem_free, **kw
        )
    last = list(deps)
    for i, (op, part) in enumerate(kernels):
        seconds, flops = part.in_pass(pass_)
        t = b.task(
            rank, "compute", op, seconds, last, flops=flops,
            mem_alloc=mem_alloc if i == 0 else 0.0,
            mem_free=mem_free if i == len(kernels) - 1 else 0.0, host=part.host_in(pass_), **kw,
        )  # fmt: skip
        last = [t]
    return t


def cost_of(b: GraphBuilder, layer: int) -> LayerCost:
    """``layer``'s costs, looked up once per builder (hashing the model and compute model
    for the shared cache on every task costs more than the lookup)."""
    cost = b.layer_costs.get(layer)
    if cost is None:
        plan = b.plan
        cost = b.layer_costs[layer] = layer_cost(
            plan.model, layer, plan.micro_batch, plan.sharding, plan.policy.recompute, b.cm
        )
    return cost


def tp_comm(
    b: GraphBuilder,
    rank: int,
    collective: str | None,
    tag: tuple,
    deps,
    phase: str = "",
    layer: int = -1,
    microbatch: int = -1,
) -> int | None:
    """A tensor-parallel collective of one activation; None without TP or collective."""
    if collective is None or b.plan.grid.tp == 1:
        return None
    return b.comm(
        rank=rank,
        stream="tp",
        name=TP_NAME[collective],
        collective=collective,
        group=b.group(rank, "tp"),
        size=b.plan.tp_message_bytes,
        tag=tag,
        deps=deps,
        phase=phase,
        layer=layer,
        microbatch=microbatch,
    )


def local_kv_bytes(b: GraphBuilder) -> float:
    """K and V of this rank's tokens and heads (B), what context parallelism passes."""
    m, mb, par = b.plan.model, b.plan.micro_batch, b.plan.grid
    if m.attention == "mha":
        d, heads = m.d_head, m.n_kv_heads
    else:
        d, heads = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.heads
    tokens = mb.b * mb.s / par.cp
    return mb.act_bytes * tokens * heads / par.tp * 2 * d


def _cp_comm(b: GraphBuilder, rank: int, name: str, collective: str, tag, deps, fields):
    if b.plan.grid.cp == 1:
        return None
    return b.comm(
        rank=rank,
        stream="cp",
        name=name,
        collective=collective,
        group=b.group(rank, "cp"),
        size=local_kv_bytes(b) * b.plan.grid.cp,
        tag=tag,
        deps=deps,
        **fields,
    )


def layer_forward(b, rank, layer, j, deps, tag, phase="forward", alloc=True) -> Emitter:
    """Tasks of ``layer``'s forward (or its recompute); returns the dependency list.

    A generator that pauses after each compute task, so that an overlapped pass can slot its
    own tasks in between (see :mod:`simulator.schedule.passes`)."""
    cost = cost_of(b, layer)
    sp = b.plan.sharding.sp
    kw = {"phase": phase, "layer": layer, "microbatch": j}
    last = then(
        list(deps), tp_comm(b, rank, TP_OPEN[sp].forward, tag + ("ag1",), deps, phase, layer, j)
    )
    alloc_bytes = cost.act_kept if alloc else cost.act_full - cost.act_kept
    local = compute(
        b, rank, "attention", cost.attn_local, cost.ops_of("attn_local"), "f", last,
        mem_alloc=alloc_bytes, phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    kv = _cp_comm(b, rank, "cp_kv_all_gather", "all_gather", tag + ("kv",), last, kw)
    remote = compute(
        b, rank, "attention_out", cost.attn_remote, cost.ops_of("attn_remote"), "f", [local, kv],
        phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    last = then(
        [remote], tp_comm(b, rank, TP_CLOSE[sp].forward, tag + ("a",), [remote], phase, layer, j)
    )
    gathered = _mlp_gathers(b, cost)
    open2 = TP_OPEN[sp].forward if gathered else None
    last = then(last, tp_comm(b, rank, open2, tag + ("ag2",), last, phase, layer, j))
    mlp = compute(
        b, rank, "mlp", cost.ffn, cost.ops_of("ffn"), "f", last,
        phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    last = [mlp]
    if cost.experts is not None:
        last = [(yield from experts(b, rank, cost, "f", last, tag, kw))]
    close = TP_CLOSE[sp].forward if gathered else None
    return then(last, tp_comm(b, rank, close, tag + ("m",), last, phase, layer, j))


def _local_dispatch(b: GraphBuilder, cost: LayerCost) -> bool:
    """Whether an MoE layer dispatches each rank's own sequence-parallel tokens, as
    Megatron-core's all-to-all token dispatcher does under expert, tensor and sequence
    parallelism (``MoEAlltoAllTokenDispatcher``: the all-to-all over EP carries the rank's
    s/tp tokens, then the dispatched tokens are all-gathered over TP for the TP-sharded
    experts, and their outputs reduce-scattered back before the combine). Without expert
    parallelism the hidden states are all-gathered over TP and routed locally (Megatron's
    all-gather dispatcher: s x h over TP, not the s x top-k x h the all-to-all one moves).
    With an expert TP degree other than tp (MoE parallel folding, :mod:`simulator.plan.grid`)
    the dispatch is always of the rank's own tokens (the checks ask for sequence parallelism
    with tp > 1), the gather and scatter over the expert-TP group."""
    if cost.experts is None:
        return False
    return routed_tokens_bytes(b.plan.model, b.plan.micro_batch, b.plan.sharding)[1]


def _mlp_gathers(b: GraphBuilder, cost: LayerCost) -> bool:
    """Whether the MLP block opens with the sequence-parallel all-gather (and closes with the
    reduce-scatter): always but in an MoE layer that dispatches local tokens and has no
    shared experts to feed the gathered states."""
    if not _local_dispatch(b, cost):
        return True
    return b.plan.model.moe.shared_experts > 0


DEEPEP_UNLIMITED = 1 << 20  # max_nodes for routing that no node limit constrains


def experts(b: GraphBuilder, rank: int, cost: LayerCost, phase: str, deps, tag, kw):
    """Dispatch all-to-all, the routed experts' ``phase`` pass, combine all-to-all; where the
    dispatch is of local tokens (:func:`_local_dispatch`), an expert-TP all-gather of the
    dispatched tokens after the dispatch and an expert-TP reduce-scatter of the experts'
    outputs before the combine (the TP group when expert TP = TP; none when expert TP is 1;
    the backward runs the same shapes: the combine's all-to-all, the reduce-scatter's
    all-gather twin, ..., so one sequence serves both passes)."""
    moe, grid = b.plan.model.moe, b.plan.grid
    size, local = routed_tokens_bytes(b.plan.model, b.plan.micro_batch, b.plan.sharding)
    grp = b.group(rank, "ep")
    common = {
        "rank": rank,
        "stream": "ep",
        "collective": "all_to_all",
        "group": grp,
        "size": size / grid.tp if local else size,
    }
    if b.plan.policy.moe_dispatcher == "deepep":  # tokens once each, routed by the algorithm
        common["size"] /= moe.top_k * (moe.capacity_factor or 1.0)
        common["algorithm"] = deepep.name(moe.top_k, moe.max_nodes or DEEPEP_UNLIMITED)
    dispatch = b.comm(name="ep_dispatch", tag=tag + (phase, "d"), deps=deps, **common, **kw)
    last = then(list(deps), dispatch)
    etp = grid.expert_tp
    local = local and etp > 1
    if local:  # the etp ranks' dispatched tokens gathered: size / tp from each
        folded = etp != grid.tp
        group = b.group(rank, "etp" if folded else "tp")
        gathered = size / grid.tp * etp if folded else size
        tp = {"rank": rank, "stream": "tp", "group": group, "size": gathered}
        gather = b.comm(
            name="ep_tp_all_gather", collective="all_gather", tag=tag + (phase, "dg"),
            deps=last, **tp, **kw,
        )  # fmt: skip
        last = then(last, gather)
    parts = cost.ops_of("experts")
    ex = compute(b, rank, "experts", cost.experts, parts, phase, last, **kw)
    yield
    last = [ex]
    if local:
        scatter = b.comm(
            name="ep_tp_reduce_scatter", collective="reduce_scatter", tag=tag + (phase, "cs"),
            deps=last, **tp, **kw,
        )  # fmt: skip
        last = then(last, scatter)
    out = b.comm(name="ep_combine", tag=tag + (phase, "c"), deps=last, **common, **kw)
    return out if out is not None else last[-1]


def _recompute(b, rank, layer, j, cost: LayerCost, deps, tag) -> Emitter:
    rc = b.plan.policy.recompute
    if rc == "full":
        return (
            yield from layer_forward(b, rank, layer, j, deps, tag + ("rc",), "recompute", False)
        )
    if rc == "selective" or cost.modules is not None:  # the attention core, or the modules
        name, block, parts = (
            ("attention_recompute", cost.core, cost.ops_of("core"))
            if cost.modules is None
            else ("modules_recompute", cost.modules, ())
        )
        t = compute(
            b, rank, name, block, parts, "f", deps, mem_alloc=cost.act_full - cost.act_kept,
            phase="recompute", layer=layer, microbatch=j,
        )  # fmt: skip
        yield
        return [t]
    return list(deps)


def async_tp(b: GraphBuilder, layer: int) -> bool:
    """Whether ``layer``'s backward runs Megatron-LM's asynchronous tensor-parallel all-reduce
    (``framework.tp_async_allreduce``): with TP and without sequence parallelism, context
    parallelism, routed experts or ZeRO-3 (Megatron shards at most the optimizer), in a
    schedule that keeps W with B."""
    plan = b.plan
    return (
        plan.policy.tp_async_allreduce
        and plan.grid.tp > 1
        and plan.policy.zero < 3
        and not plan.sharding.sp
        and plan.grid.cp == 1
        and not plan.schedule.split_backward
        and cost_of(b, layer).experts is None
    )


def layer_backward_async(b, rank, layer, j, deps, tag, weight_grad) -> Emitter:
    """``layer``'s backward as Megatron-LM runs it with ``async_tensor_model_parallel_allreduce``:
    each column-parallel linear (the MLP's first, attention's QKV) launches the all-reduce of
    its input gradient and computes its weight gradient while it runs, so the MLP's weight
    gradient overlaps the first all-reduce and attention's the second. ``weight_grad(part,
    deps)`` adds the "ffn" or "attention" weight-gradient task; the returned dependency is
    the second all-reduce (what the layer below needs)."""
    cost = cost_of(b, layer)
    phase = "input_grad"
    rc = b.plan.policy.recompute
    transient = cost.act_full - cost.act_kept if rc != "none" else 0.0
    last = yield from _recompute(b, rank, layer, j, cost, list(deps), tag)
    mlp = compute(
        b, rank, "mlp", cost.ffn, cost.ops_of("ffn"), "b", last,
        phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    reduce_mlp = tp_comm(b, rank, "all_reduce", tag + ("ba",), [mlp], phase, layer, j)
    weight_grad("ffn", [mlp])
    remote = compute(
        b, rank, "attention_out", cost.attn_remote, cost.ops_of("attn_remote"), "b",
        [reduce_mlp], phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    local = compute(
        b, rank, "attention", cost.attn_local, cost.ops_of("attn_local"), "b", [remote],
        mem_free=transient, phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    reduce_attn = tp_comm(b, rank, "all_reduce", tag + ("bm",), [local], phase, layer, j)
    weight_grad("attention", [local])
    return [reduce_attn]


def layer_backward(b, rank, layer, j, deps, tag) -> Emitter:
    """Input-gradient tasks of ``layer``, recomputing first if asked: the forward's tasks in
    reverse, each collective replaced by its backward twin."""
    cost = cost_of(b, layer)
    phase = "input_grad"
    kw = {"phase": phase, "layer": layer, "microbatch": j}
    rc = b.plan.policy.recompute
    transient = cost.act_full - cost.act_kept if rc != "none" else 0.0
    sp = b.plan.sharding.sp
    last = yield from _recompute(b, rank, layer, j, cost, list(deps), tag)
    gathered = _mlp_gathers(b, cost)
    close = TP_CLOSE[sp].backward if gathered else None
    last = then(last, tp_comm(b, rank, close, tag + ("bm",), last, phase, layer, j))
    if cost.experts is not None:
        last = [(yield from experts(b, rank, cost, "b", last, tag, kw))]
    mlp = compute(
        b, rank, "mlp", cost.ffn, cost.ops_of("ffn"), "b", last,
        phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    last = [mlp]
    open2 = TP_OPEN[sp].backward if gathered else None
    last = then(last, tp_comm(b, rank, open2, tag + ("bg2",), last, phase, layer, j))
    last = then(last, tp_comm(b, rank, TP_CLOSE[sp].backward, tag + ("ba",), last, phase, layer, j))
    remote = compute(
        b, rank, "attention_out", cost.attn_remote, cost.ops_of("attn_remote"), "b", last,
        phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    kv = _cp_comm(b, rank, "cp_dkv_reduce_scatter", "reduce_scatter", tag + ("dkv",), [remote], kw)
    local = compute(
        b, rank, "attention", cost.attn_local, cost.ops_of("attn_local"), "b", [remote],
        mem_free=transient, phase=phase, layer=layer, microbatch=j,
    )  # fmt: skip
    yield
    last = [local] if kv is None else [local, kv]
    return then(last, tp_comm(b, rank, TP_OPEN[sp].backward, tag + ("bg1",), last, phase, layer, j))


def accumulation(b: GraphBuilder, rank: int, layer: int | str) -> Block | None:
    """The gradient-accumulation add of ``layer`` (or "emb", "head") on ``rank`` when the
    framework runs one and a gradient from an earlier micro-batch is already there (None
    otherwise), over the gradient the rank keeps (:meth:`Plan.accumulated_params`)."""
    plan = b.plan
    if plan.policy.grad_accumulation != "add":
        return None
    if (rank, layer) not in b.accumulating:
        b.accumulating.add((rank, layer))
        return None
    return grad_accumulate_block(plan.accumulated_params(layer), plan.grad_bytes_per_param, b.cm)


WEIGHT_PARTS = {
    "all": ("attn_local", "attn_remote", "ffn", "experts"),
    "ffn": ("ffn", "experts"),
    "attention": ("attn_local", "attn_remote"),
}


def layer_weight_grad(
    b: GraphBuilder, rank: int, layer: int, j: int, deps, mem_alloc: float = 0.0, part="all"
) -> int:
    """``layer``'s weight gradient, or ``part`` of it ("ffn" or "attention", when the
    backward splits it: :func:`layer_backward_async`); the whole layer's (or the attention
    part's, which comes last) releases the layer's activations and may take ``mem_alloc``
    bytes (ZeRO-3: the unit's unsharded gradient)."""
    cost = cost_of(b, layer)
    names = WEIGHT_PARTS[part]
    block = b.weight_blocks.get((layer, part))
    if block is None:
        block = sum((getattr(cost, n) or Block() for n in names), Block())
        b.weight_blocks[(layer, part)] = block
    parts = ()
    if b.kernel_tasks:
        parts = tuple(p for n in names for p in cost.ops_of(n))
    add = accumulation(b, rank, layer) if part != "ffn" else None
    if add is not None:  # eager frameworks add each later micro-batch's gradient in
        block = block + add
        parts = parts + (("grad_accumulate", add),) if parts else ()
    last = part != "ffn"
    return compute(  # not paused: a weight gradient is slotted in whole
        b, rank, "weight_grad", block, parts, "w", deps, mem_alloc=mem_alloc if last else 0.0,
        mem_free=cost.act_kept if last else 0.0, phase="weight_grad", layer=layer,
        microbatch=j,
    )  # fmt: skip
