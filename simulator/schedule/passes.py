"""A stage's passes over one model chunk for one micro-batch: forward (F), input-gradient (B)
and weight-gradient (W), with the embedding and loss where the chunk holds them, ZeRO-3
gathers and releases around each FSDP unit, and the pipeline sends to the neighbour chunks.

F and B are generators that pause after each compute task: a plain pass runs to the end, an
overlapped pair (DualPipe) alternates between its forward and its backward so that each
one's communication runs under the other's compute.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

from simulator.model.activations import (
    embedding_activation_bytes,
    head_activation_bytes,
    loss_transient_bytes,
    output_weight_grad_bytes,
)
from simulator.pipelines import Overlapped
from simulator.plan.memory import root_kept
from simulator.plan.plan import ChunkPlan, StagePlan
from simulator.schedule import data_parallel as dp
from simulator.schedule.builder import Dep, GraphBuilder
from simulator.schedule.costs import embedding_block, head_block
from simulator.schedule.layer_tasks import (
    accumulation,
    async_tp,
    layer_backward,
    layer_backward_async,
    layer_forward,
    layer_weight_grad,
)

Emitter = Generator[None, None, None]


@dataclass
class RankState:
    """One simulated rank while its tasks are emitted."""

    rank: int
    stage: StagePlan
    unit_of: dict[int, tuple[int, ...]]  # layer -> its FSDP unit
    last_w: dict[int, int]  # chunk -> micro-batch of its last W (then its gradients sync)
    unsynced: list[tuple[int, int]] = field(default_factory=list)  # (chunk, last W) waiting
    param_ag: dict[int, int] = field(default_factory=dict)  # layer -> its ZeRO-1/2 gather
    dp_tasks: list[int] = field(default_factory=list)  # what the optimizer waits for


def _blocks(b: GraphBuilder):
    """(embedding, head) Blocks, computed once per builder: each costs tens of microseconds,
    and every embedding and loss task asks."""
    blocks = b.end_blocks
    if blocks is None:
        plan = b.plan
        blocks = b.end_blocks = (
            embedding_block(plan.model, plan.micro_batch, plan.sharding, b.cm),
            head_block(plan.model, plan.micro_batch, plan.sharding, b.cm),
        )
    return blocks


def _emb_bytes(b: GraphBuilder) -> float:
    return embedding_activation_bytes(b.plan.model, b.plan.micro_batch, b.plan.sharding)


def _head_bytes(b: GraphBuilder) -> float:
    return head_activation_bytes(b.plan.model, b.plan.micro_batch, b.plan.sharding)


def forward_pass(b: GraphBuilder, st: RankState, c: int, j: int) -> Emitter:
    """Chunk ``c``'s forward for micro-batch ``j``, from the received activation (or the
    embedding) to the send onward (or the loss)."""
    rank, chunk = st.rank, st.stage.chunks[c]
    if chunk.has_embedding:
        last: list[Dep] = [embedding_forward(b, rank, j)]
        yield
    else:
        last = [_recv_key(b, rank, "sendF", chunk.prev_hop, j)]
    unit_ends: list[Dep] = []  # per FSDP unit done in this pass, its release task
    for layer in chunk.layers:
        unit = st.unit_of[layer]
        extra: list[Dep] = []
        if layer == unit[0]:
            gate = dp.prefetch_gate(b, unit_ends)
            extra.append(dp.fsdp_gather(b, rank, unit, j, "F", gate))
        if layer in st.param_ag and j == 0:
            extra.append(st.param_ag[layer])
        last = yield from layer_forward(b, rank, layer, j, last + extra, (layer, c, j))
        if dp.zero_stage(b) == 3 and layer == unit[-1]:
            last = [_free_unit(b, rank, unit, j, last)]
            unit_ends.append(last[0])
    if chunk.has_head:
        loss_forward(b, rank, j, last)
        yield
        return
    _send(b, rank, "sendF", chunk.next_hop, c, j, last)


def _free_unit(b: GraphBuilder, rank: int, unit, j: int, deps) -> int:
    """ZeRO-3: release ``unit``'s gathered parameters once micro-batch ``j`` is done with them."""
    return b.task(
        rank, "compute", "fsdp_free", 0.0, deps, phase="fsdp", layer=unit[0], microbatch=j,
        mem_free=dp.gathered_bytes(b, unit),
    )  # fmt: skip


def backward_pass(b: GraphBuilder, st: RankState, c: int, j: int) -> Emitter:
    """Chunk ``c``'s input-gradient pass (with each layer's weight gradient unless the
    schedule splits W off), then the gradient sent back. ZeRO-3 gathers follow the backward
    prefetch policy (:class:`_BackwardGathers`)."""
    rank, chunk = st.rank, st.stage.chunks[c]
    split = b.plan.schedule.split_backward
    if chunk.has_head:
        last: list[Dep] = [loss_backward(b, st, j)]
        yield
    else:
        last = [_recv_key(b, rank, "sendB", chunk.next_hop, j)]
    gathers = _BackwardGathers(b, st, chunk, j)
    post = gathers.policy == "post" and not split
    for layer in reversed(chunk.layers):
        unit = st.unit_of[layer]
        extra = [gathers.at_unit_start(unit)] if layer == unit[-1] else []
        unit_done = layer == unit[0]
        reduce = not (post and unit_done)
        if async_tp(b, layer):  # the weight gradients run beside the TP all-reduces

            def w(part, deps, layer=layer, reduce=reduce):
                return weight_grad(b, st, layer, j, deps, reduce=reduce, part=part)

            tag = (layer, c, j)
            last = yield from layer_backward_async(b, rank, layer, j, last + extra, tag, w)
        else:
            last = yield from layer_backward(b, rank, layer, j, last + extra, (layer, c, j))
            if not split:
                last = [weight_grad(b, st, layer, j, last, reduce=reduce)]
        if unit_done:
            if split and dp.fsdp_sharded(b):  # W needs no parameters: release them after B
                last = [_free_unit(b, rank, unit, j, last)]
            gathers.unit_ends.append(last[0])
            if post:  # PyTorch's BACKWARD_POST: the next gather goes before this reduce
                gathers.issue(len(gathers.unit_ends) + gathers.depth)
                dp.fsdp_reduce(b, rank, unit, j, [last[0]], st.dp_tasks)
    if chunk.has_embedding and not split:
        last = [embedding_grad(b, st, j, last)]
    _send(b, rank, "sendB", chunk.prev_hop, c, j, last)


class _BackwardGathers:
    """ZeRO-3 all-gathers of one backward pass, unit by unit in backward order.

    At most ``1 + fsdp_prefetch`` units are gathered at once: unit ``i``'s gather waits for the
    release of unit ``i - 1 - fsdp_prefetch``. The policy (``parallelism.fsdp_backward_prefetch``,
    PyTorch FSDP's ``BackwardPrefetch``) says when the gathers ahead are issued, which matters
    because the data-parallel stream runs in order: ``pre`` (PyTorch's default) issues them as a
    unit's backward begins, ahead of its reduce-scatter; ``post`` after its gradient, before the
    reduce-scatter; ``none`` only when a unit is reached, behind the previous reduce-scatter.
    """

    def __init__(self, b: GraphBuilder, st: RankState, chunk: ChunkPlan, j: int):
        self.b, self.st, self.j = b, st, j
        policy = b.plan.policy
        self.depth, self.policy = policy.fsdp_prefetch, policy.fsdp_backward_prefetch
        self.units = list(dict.fromkeys(st.unit_of[x] for x in reversed(chunk.layers)))
        self.index = {u: i for i, u in enumerate(self.units)}
        self.tasks: list[int | None] = []
        self.unit_ends: list[Dep] = []

    def issue(self, upto: int) -> None:
        """Issue the gathers of units ``< upto`` not issued yet (as far as their gates exist)."""
        upto = min(upto, len(self.units), len(self.unit_ends) + 1 + self.depth)
        for i in range(len(self.tasks), upto):
            k = i - 1 - self.depth
            gate = [self.unit_ends[k]] if k >= 0 else []
            self.tasks.append(
                dp.fsdp_gather(self.b, self.st.rank, self.units[i], self.j, "B", gate)
            )

    def at_unit_start(self, unit: tuple[int, ...]) -> int | None:
        """The gather ``unit``'s backward waits for, issuing those ahead under ``pre``."""
        i = self.index[unit]
        self.issue(i + 1 + (self.depth if self.policy == "pre" else 0))
        return self.tasks[i]


def weight_pass(b: GraphBuilder, st: RankState, c: int, j: int) -> None:
    """Split schedules' separate weight-gradient pass; after the chunk's last micro-batch, its
    gradient buckets are synchronised (DDP and ZeRO-1). ZeRO-2 keeps only its shard of the
    gradients, so it reduce-scatters every micro-batch's (DeepSpeed's maintainers: "gradient
    reduction is required after every backward because of gradient partitioning",
    deepspeedai/DeepSpeed#2252); DDP and ZeRO-1 accumulate the whole gradient and reduce it
    once."""
    chunk = st.stage.chunks[c]
    if b.plan.schedule.split_backward:
        last: list[Dep] = [output_weight_grad(b, st, j)] if chunk.has_head else []
        for layer in reversed(chunk.layers):
            last = [weight_grad(b, st, layer, j, last)]
        if chunk.has_embedding:
            embedding_grad(b, st, j, last)
    overlap = b.plan.policy.overlap_grad_reduce
    if dp.zero_stage(b) == 2:
        after = None
        if not overlap:  # after the chunk's whole backward of micro-batch j
            keys = [k for bucket in chunk.buckets for k in bucket.keys]
            after = max((b.w_task[(st.rank, k, j)] for k in keys), default=None)
        _sync_buckets(b, st, c, chunk, j, after, every_micro_batch=True)
        return
    if j == st.last_w[c] and dp.zero_stage(b) in (0, 1):
        if overlap:
            _sync_buckets(b, st, c, chunk, j)
            return
        st.unsynced.append((c, j))
        if len(st.unsynced) == len(st.last_w):  # the rank's last backward: now every bucket
            # A rank's compute stream runs its tasks in the order they were added, so the
            # latest weight-gradient task ends after all the others: waiting for it is
            # waiting for the whole backward (one dependency per bucket, not one per layer).
            last = max(
                b.w_task[(st.rank, k, jj)]
                for cc, jj in st.unsynced
                for bucket in st.stage.chunks[cc].buckets
                for k in bucket.keys
            )
            for cc, jj in st.unsynced:
                _sync_buckets(b, st, cc, st.stage.chunks[cc], jj, last)


def _sync_buckets(
    b: GraphBuilder,
    st: RankState,
    c: int,
    chunk: ChunkPlan,
    j: int,
    after: Dep = None,
    every_micro_batch: bool = False,
) -> None:
    """Reduce chunk ``c``'s gradient buckets, each once its gradients (micro-batch ``j``'s
    weight gradients) and the task ``after`` (if any) are done; ``every_micro_batch``: one of
    a reduction per micro-batch (ZeRO-2), told apart by ``j``."""
    for bi, bucket in enumerate(chunk.buckets):
        ready = [b.w_task[(st.rank, k, j)] for k in bucket.keys]
        if after is not None and after not in ready:
            ready.append(after)
        if every_micro_batch:
            tag, mb = ("g", st.stage.stage, c, bi, j), j
        else:
            tag, mb = ("g", st.stage.stage, c, bi), -1
        st.dp_tasks += dp.grad_sync(b, st.rank, bucket, ready, tag, mb)


def run_item(b: GraphBuilder, st: RankState, item) -> None:
    """Emit one item of a stage's order: a pass, or an overlapped forward-backward pair."""
    if isinstance(item, Overlapped):
        _interleave(
            forward_pass(b, st, item.forward[1], item.forward[2]),
            backward_pass(b, st, item.backward[1], item.backward[2]),
        )
        return
    kind, c, j = item
    if kind == "W":
        weight_pass(b, st, c, j)
    else:
        for _ in (forward_pass if kind == "F" else backward_pass)(b, st, c, j):
            pass


def _interleave(*emitters: Emitter) -> None:
    live = list(emitters)
    while live:
        for e in list(live):
            try:
                next(e)
            except StopIteration:
                live.remove(e)


def gather_updated_params(b: GraphBuilder, st: RankState) -> None:
    """ZeRO-1/2: parameters updated last step are all-gathered as this step begins (bucket
    by bucket, in forward order); a layer's first forward waits for its bucket."""
    for c, chunk in enumerate(st.stage.chunks):
        for bi in reversed(range(len(chunk.buckets))):
            bucket = chunk.buckets[bi]
            t = dp.param_gather(b, st.rank, bucket, ("pag", st.stage.stage, c, bi))
            for key in bucket.keys:
                if isinstance(key, int):
                    st.param_ag[key] = t


# -- the ends of the model ---------------------------------------------------------------


def _end_released(b: GraphBuilder, key: str) -> float:
    """ZeRO-3 parameters of an end unit ("emb", "head") released after its forward: none
    where the root unit stays gathered until its backward (:func:`root_kept`)."""
    return 0.0 if root_kept(b.plan) else dp.gathered_bytes(b, key)


def _end_gather(b: GraphBuilder, rank: int, key: str, j: int) -> int | None:
    """An end unit's gather for its backward: none where its forward's is still held."""
    return None if root_kept(b.plan) else dp.fsdp_gather(b, rank, key, j, "B", ())


def embedding_forward(b: GraphBuilder, rank: int, j: int) -> int:
    eb, _ = _blocks(b)
    gather = dp.fsdp_gather(b, rank, "emb", j, "F", ())
    return b.task(
        rank, "compute", "embedding", eb.f, [gather], phase="forward", microbatch=j,
        flops=eb.flops_f, host=eb.host_f, mem_alloc=_emb_bytes(b), mem_free=_end_released(b, "emb"),
    )  # fmt: skip


def loss_forward(b: GraphBuilder, rank: int, j: int, deps: list[Dep]) -> int:
    """Final norm, output layer and loss; keeps the logits for the backward."""
    _, hb = _blocks(b)
    gather = dp.fsdp_gather(b, rank, "head", j, "F", ())
    return b.task(
        rank, "compute", "loss", hb.f, deps + [gather], phase="forward", microbatch=j,
        flops=hb.flops_f, host=hb.host_f, mem_alloc=_head_bytes(b),
        mem_free=_end_released(b, "head"),
    )  # fmt: skip


def loss_backward(b: GraphBuilder, st: RankState, j: int) -> int:
    """The loss's and output layer's input gradients, with the output layer's weight gradient
    unless the schedule splits W off (:func:`output_weight_grad`)."""
    _, hb = _blocks(b)
    gather = _end_gather(b, st.rank, "head", j)
    grads = loss_transient_bytes(b.plan.model, b.plan.micro_batch, b.plan.sharding)
    if b.plan.schedule.split_backward:  # W keeps its input and the logits' gradient, and
        # needs no parameters: ZeRO-3 releases the gathered head here, as it does a layer's
        t = b.task(
            st.rank, "compute", "loss", hb.b, [gather], phase="input_grad", microbatch=j,
            flops=hb.flops_b, host=hb.host_b, mem_alloc=grads,
            mem_free=_head_bytes(b) + grads - _held_for_w(b) + dp.gathered_bytes(b, "head"),
        )  # fmt: skip
        b.bind(("lossB", st.rank, j), t)
        return t
    add = accumulation(b, st.rank, "head")  # eager frameworks: grad += new after the first
    t = b.task(
        st.rank, "compute", "loss", hb.b + hb.w + (add.w if add else 0.0), [gather],
        phase="input_grad", microbatch=j, host=hb.host_b + hb.host_w + (add.host_w if add else 0.0),
        flops=hb.flops_b + hb.flops_w, mem_alloc=dp.unsharded_grad_bytes(b, "head") + grads,
        mem_free=_head_bytes(b) + grads,
    )  # fmt: skip
    b.w_task[(st.rank, "head", j)] = t
    dp.fsdp_reduce(b, st.rank, "head", j, [t], st.dp_tasks)
    return t


def output_weight_grad(b: GraphBuilder, st: RankState, j: int) -> int:
    """Split schedules: the output layer's weight gradient, the first of the last chunk's W
    pass. Zero-bubble implementations postpone every linear layer's weight gradient, the
    output layer's included (sail-sg/zero-bubble-pipeline-parallelism wraps Megatron's
    linear autograd function, which the output layer's ``ColumnParallelLinear`` runs). It
    frees what the loss's backward left it (:func:`_held_for_w`); ZeRO-3's gathered head was
    released after that backward, so its reduce-scatter frees only the gradient."""
    _, hb = _blocks(b)
    add = accumulation(b, st.rank, "head")  # eager frameworks: grad += new after the first
    t = b.task(
        st.rank, "compute", "output_weight_grad", hb.w + (add.w if add else 0.0),
        [("lossB", st.rank, j)], phase="weight_grad", microbatch=j, flops=hb.flops_w,
        host=hb.host_w + (add.host_w if add else 0.0),
        mem_alloc=dp.unsharded_grad_bytes(b, "head"), mem_free=_held_for_w(b),
    )  # fmt: skip
    b.w_task[(st.rank, "head", j)] = t
    dp.fsdp_reduce(b, st.rank, "head", j, [t], st.dp_tasks, free_params=False)
    return t


def _held_for_w(b: GraphBuilder) -> float:
    """Bytes a postponed output-layer weight gradient keeps from B to W."""
    plan = b.plan
    return output_weight_grad_bytes(plan.model, plan.micro_batch, plan.sharding)


def weight_grad(
    b: GraphBuilder, st: RankState, layer: int, j: int, deps, reduce: bool = True, part="all"
) -> int:
    """A layer's weight gradient (or ``part`` of it: :func:`layer_weight_grad`); the last of
    an FSDP unit reduce-scatters the unit (unless ``reduce`` is False: the caller does, after
    prefetching)."""
    if part == "ffn":  # the first part: the rest below waits for the attention part
        return layer_weight_grad(b, st.rank, layer, j, deps, part=part)
    unit = st.unit_of[layer]
    grad = dp.unsharded_grad_bytes(b, unit) if layer == unit[-1] else 0.0  # the unit's first W
    w = layer_weight_grad(b, st.rank, layer, j, deps, mem_alloc=grad, part=part)
    b.w_task[(st.rank, layer, j)] = w
    if layer == unit[0] and reduce:  # the unit's last weight gradient in backward order
        split = b.plan.schedule.split_backward  # then B already released the parameters
        dp.fsdp_reduce(b, st.rank, unit, j, [w], st.dp_tasks, free_params=not split)
    return w


def embedding_grad(b: GraphBuilder, st: RankState, j: int, deps) -> int:
    """The embedding's gradient (a scatter-add). FSDP's pre-backward hook gathers the unit's
    parameters even though the scatter-add does not read them (unless they are still held
    from the forward: :func:`~simulator.plan.memory.root_kept`)."""
    eb, _ = _blocks(b)
    gather = _end_gather(b, st.rank, "emb", j)
    add = accumulation(b, st.rank, "emb")  # eager frameworks: grad += new after the first
    t = b.task(
        st.rank, "compute", "embedding", eb.w + (add.w if add else 0.0), list(deps) + [gather],
        phase="weight_grad", host=eb.host_w + (add.host_w if add else 0.0),
        microbatch=j, flops=eb.flops_w, mem_alloc=dp.unsharded_grad_bytes(b, "emb"),
        mem_free=_emb_bytes(b),
    )  # fmt: skip
    b.w_task[(st.rank, "emb", j)] = t
    dp.fsdp_reduce(b, st.rank, "emb", j, [t], st.dp_tasks)
    return t


# -- pipeline sends ------------------------------------------------------------------------


def _recv_key(b: GraphBuilder, rank: int, what: str, hop, j: int) -> tuple:
    """The key of the send this pass waits for: from ``hop`` = (stage, chunk)."""
    stage, chunk = hop
    return (what, b.stage_rank(rank, stage), chunk, j)


def _send(b: GraphBuilder, rank: int, what: str, hop, c: int, j: int, deps) -> None:
    """Send an activation ("sendF") or its gradient ("sendB") of chunk ``c`` to ``hop``."""
    if hop is None:
        return
    forward = what == "sendF"
    if hop[0] == b.plan.stage_of(rank):  # the turn of a V: the next chunk is on this rank
        turn = b.task(
            rank, "compute", "pp_turn", 0.0, deps, phase="forward" if forward else "input_grad",
            microbatch=j,
        )  # fmt: skip
        b.bind((what, rank, c, j), turn)
        return
    t = b.comm(
        rank=rank,
        stream="pp_fwd" if forward else "pp_bwd",
        name="pp_send_activation" if forward else "pp_send_gradient",
        collective="send_recv",
        group=b.pipeline_pair(rank, hop[0]),
        size=b.plan.send_bytes,
        tag=("F" if forward else "B", c, j),
        deps=deps,
        phase="forward" if forward else "input_grad",
        microbatch=j,
    )
    b.bind((what, rank, c, j), t)
