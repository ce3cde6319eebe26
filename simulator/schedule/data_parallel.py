"""Data-parallel communication and the optimizer: DDP bucket all-reduces, ZeRO-1/2 gradient
reduce-scatters and parameter all-gathers, ZeRO-3 unit gathers with prefetch and gradient
reduce-scatters. What is gathered or synchronised, and how much, comes from the plan.
"""

from __future__ import annotations

from simulator.plan.buckets import Bucket
from simulator.schedule.builder import Dep, GraphBuilder
from simulator.schedule.costs import grad_norm_seconds, optimizer_seconds


def zero_stage(b: GraphBuilder) -> int:
    return b.plan.policy.zero


def grad_sync(
    b: GraphBuilder, rank: int, bucket: Bucket, deps, tag, microbatch: int = -1
) -> list[int]:
    """DDP all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1/2) of one bucket, dense and expert
    gradients each over their own data-parallel group; ``microbatch``: the one whose
    gradients it reduces (ZeRO-2, once per micro-batch), -1 for the step's accumulated ones."""
    coll = "all_reduce" if zero_stage(b) == 0 else "reduce_scatter"
    gb = b.plan.grad_bytes_per_param
    first = next((k for k in bucket.keys if isinstance(k, int)), -1)
    out = [
        b.comm(
            rank=rank, stream="dp", name=f"dp_{coll}", collective=coll,
            group=b.group(rank, "dp"), size=bucket.dense_params * gb, tag=tag, deps=deps,
            phase="grad_sync", layer=first, microbatch=microbatch,
        )
    ]  # fmt: skip
    if bucket.expert_params:
        out.append(
            b.comm(
                rank=rank, stream="dp", name=f"edp_{coll}", collective=coll,
                group=b.group(rank, "edp"), size=bucket.expert_params * gb, tag=tag + ("e",),
                deps=deps, phase="grad_sync", microbatch=microbatch,
            )
        )  # fmt: skip
    return [t for t in out if t is not None]


def param_gather(b: GraphBuilder, rank: int, bucket: Bucket, tag) -> int | None:
    """ZeRO-1/2: all-gather one bucket's updated parameters as the step begins."""
    size = (bucket.dense_params + bucket.expert_params) * b.plan.param_bytes_per_param
    return b.comm(
        rank=rank, stream="dp", name="dp_all_gather", collective="all_gather",
        group=b.group(rank, "dp"), size=size, tag=tag, phase="param_gather",
    )  # fmt: skip


def _key_layer(key) -> int:
    return key[0] if isinstance(key, tuple) else -1


def fsdp_sharded(b: GraphBuilder) -> bool:
    """ZeRO-3 with parameters actually sharded (a data-parallel group of one gathers nothing)."""
    return zero_stage(b) == 3 and b.plan.dense_shard_ranks > 1


def gathered_bytes(b: GraphBuilder, key) -> float:
    """Bytes a ZeRO-3 unit occupies once gathered (0 without sharded ZeRO-3)."""
    if not fsdp_sharded(b):
        return 0.0
    return sum(b.plan.params_of(key)) * b.plan.param_bytes_per_param


def fsdp_gather(b: GraphBuilder, rank: int, key, j: int, why: str, deps) -> int | None:
    """ZeRO-3: all-gather unit ``key`` (a layer tuple, "emb" or "head") before it computes."""
    if zero_stage(b) != 3:
        return None
    size = gathered_bytes(b, key)
    return b.comm(
        rank=rank, stream="dp", name="fsdp_all_gather", collective="all_gather",
        group=b.group(rank, "dp"), size=size, tag=("ag", key, j, why), deps=deps,
        phase="fsdp", layer=_key_layer(key), microbatch=j, mem_alloc=size,
    )  # fmt: skip


def unsharded_grad_bytes(b: GraphBuilder, key) -> float:
    """ZeRO-3: a unit's full gradient, held from its first weight gradient until its
    reduce-scatter ends (B; 0 without sharded ZeRO-3)."""
    if not fsdp_sharded(b):
        return 0.0
    return sum(b.plan.params_of(key)) * b.plan.grad_bytes_per_param


def fsdp_reduce(
    b: GraphBuilder, rank: int, key, j: int, deps, dp_tasks: list[int], free_params: bool = True
) -> None:
    """ZeRO-3: reduce-scatter unit ``key``'s gradient after its backward, then release the
    unsharded gradient and (unless the input-gradient pass already did) the parameters
    gathered for it."""
    if zero_stage(b) != 3:
        return
    size = unsharded_grad_bytes(b, key)
    rs = b.comm(
        rank=rank, stream="dp", name="fsdp_reduce_scatter", collective="reduce_scatter",
        group=b.group(rank, "dp"), size=size, tag=("rs", key, j), deps=deps,
        phase="grad_sync", layer=_key_layer(key), microbatch=j,
        mem_free=(gathered_bytes(b, key) if free_params else 0.0) + size,
    )  # fmt: skip
    if rs is not None:
        dp_tasks.append(rs)


def prefetch_gate(b: GraphBuilder, unit_ends: list[Dep]) -> list[Dep]:
    """ZeRO-3 prefetch: a unit's all-gather waits until the unit ``fsdp_prefetch + 1``
    places back has released its parameters, so at most ``1 + fsdp_prefetch`` units are
    gathered at once."""
    k = b.plan.policy.fsdp_prefetch + 1
    return [unit_ends[-k]] if len(unit_ends) >= k else []


def optimizer(b: GraphBuilder, rank: int, stage: int, dp_tasks: list[int]) -> int:
    """The optimizer step over this rank's shard of the stage's parameters (memory-bound)."""
    plan = b.plan
    st = plan.stages[stage]
    sharded = zero_stage(b) >= 1
    shard = st.dense_params / (plan.dense_shard_ranks if sharded else 1) + st.expert_params / (
        plan.expert_shard_ranks if sharded else 1
    )
    moments = plan.policy.optimizer_moments * 4.0  # fp32 moments; more state is a master copy
    seconds = optimizer_seconds(
        shard,
        plan.grad_bytes_per_param,
        plan.param_bytes_per_param,
        plan.optimizer_bytes_per_param,
        b.cm,
        plan.policy.optimizer_kernel,
        master=plan.optimizer_bytes_per_param > moments,
    )
    deps = dp_tasks
    if plan.policy.grad_clip:
        norm = grad_norm_seconds(shard, plan.grad_bytes_per_param, b.cm)
        deps = [b.task(rank, "compute", "grad_norm", norm, dp_tasks, phase="optimizer")]
    return b.task(rank, "compute", "optimizer", seconds, deps, phase="optimizer")
