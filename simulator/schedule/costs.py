"""Durations (s), FLOPs and bytes of the compute blocks a step is made of, per layer kind.

A layer splits where communication cuts into it: the attention block (norm, projections, the
attention core, output projection), and the feed-forward block (dense MLP, or router + shared
experts, then the routed experts between the two all-to-alls). With context parallelism the
attention core splits into the local block (computed while K/V travel) and the remote ones.
Each block has forward (f), input-gradient (b) and weight-gradient (w) durations from the
compute model, and the FLOPs the trace records.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from simulator.model.activations import MicroBatch, layer_activation_bytes
from simulator.model.compute import ComputeModel
from simulator.model.ops import Op, Sharding, embedding_ops, head_ops, layer_ops
from simulator.model.params import layer_params_per_rank
from simulator.model.recompute import modules_of, recomputed_op

if TYPE_CHECKING:  # annotations only: the schedule package does not import the scenario's
    from simulator.scenario.schema import ModelConfig


@dataclass(frozen=True)
class Block:
    """One compute task's worth of ops: GPU seconds and FLOPs per phase, and the CPU seconds
    to issue its kernels per phase (``host_*``, the task's host-stream launch)."""

    f: float = 0.0
    b: float = 0.0
    w: float = 0.0
    flops_f: float = 0.0
    flops_b: float = 0.0
    flops_w: float = 0.0
    host_f: float = 0.0
    host_b: float = 0.0
    host_w: float = 0.0

    @staticmethod
    def of(ops: list[Op], cm: ComputeModel, scale: float = 1.0) -> Block:
        return Block(
            cm.seconds(ops, "f", scale),
            cm.seconds(ops, "b", scale),
            cm.seconds(ops, "w", scale),
            scale * sum(o.f_flops for o in ops),
            scale * sum(o.b_flops for o in ops),
            scale * sum(o.w_flops for o in ops),
            cm.host_seconds(ops, "f"),
            cm.host_seconds(ops, "b"),
            cm.host_seconds(ops, "w"),
        )

    def times(self) -> tuple[float, float, float]:
        return self.f, self.b, self.w

    def in_pass(self, pass_: str) -> tuple[float, float]:
        """(seconds, FLOPs) in pass "f", "b" or "w"."""
        if pass_ == "f":
            return self.f, self.flops_f
        if pass_ == "b":
            return self.b, self.flops_b
        return self.w, self.flops_w

    def host_in(self, pass_: str) -> float:
        """CPU seconds to issue the block's kernels in pass "f", "b" or "w"."""
        return self.host_f if pass_ == "f" else self.host_b if pass_ == "b" else self.host_w

    def stretched(self, kf: float, kb: float, kw: float) -> Block:
        """The same work taking ``k`` times as long per pass on the GPU (FLOPs and issue
        unchanged)."""
        return replace(self, f=self.f * kf, b=self.b * kb, w=self.w * kw)

    def __add__(self, other: Block) -> Block:
        return Block(
            self.f + other.f,
            self.b + other.b,
            self.w + other.w,
            self.flops_f + other.flops_f,
            self.flops_b + other.flops_b,
            self.flops_w + other.flops_w,
            self.host_f + other.host_f,
            self.host_b + other.host_b,
            self.host_w + other.host_w,
        )


@dataclass(frozen=True)
class LayerCost:
    """A layer's blocks and memory (bytes) for one micro-batch on one rank."""

    attn_local: Block  # norm, projections, local attention block
    attn_remote: Block  # remote attention blocks (context parallel) and output projection
    core: Block  # the attention core alone (what selective recompute repeats)
    ffn: Block  # dense MLP, or router + shared experts (+ residuals)
    experts: Block | None  # routed experts between the all-to-alls (MoE layers)
    act_kept: float  # activations kept for backward under the recompute policy
    act_full: float  # activations without recompute (live while a layer is recomputed)
    parts: dict[str, tuple[tuple[str, Block], ...]] | None = None  # per block, its ops
    modules: Block | None = None  # the forward a per-module recompute runs again

    def ops_of(self, block: str) -> tuple[tuple[str, Block], ...]:
        """(op name, Block) of each kernel in ``block`` ("attn_local", "attn_remote", "core",
        "ffn", "experts"), whose Blocks add up to the block's: what the trace shows as named
        tasks with ``simulation.kernel_tasks``."""
        return self.parts[block] if self.parts else ()


def _split(ops: list[Op]) -> tuple[list[Op], list[Op], list[Op], list[Op], list[Op]]:
    """(attention before core, core, attention after core, ffn, routed experts)."""
    core_at = next(i for i, o in enumerate(ops) if o.kind == "attention")
    res_at = next(i for i, o in enumerate(ops) if o.name == "attention_residual")
    pre, post = ops[:core_at], ops[res_at - 1 : res_at + 1]
    core = ops[core_at : res_at - 1]
    rest = ops[res_at + 1 :]
    experts = [o for o in rest if o.name.startswith("expert_")]
    ffn = [o for o in rest if not o.name.startswith("expert_")]
    return pre, core, post, ffn, experts


def weight_cast_op(m: ModelConfig, layer: int, sh: Sharding, bytes_per_param: float) -> Op:
    """Autocast's casts of the layer's fp32 weights to bf16 before its forward, once per
    micro-batch, and of the bf16 weight gradients back to fp32 in its weight-gradient pass:
    ``bytes_per_param`` (4 read + 2 written) each way, memory-bound."""
    moved = bytes_per_param * sum(layer_params_per_rank(m, layer, sh.tp, sh.ep, sh.expert_tp))
    return Op("weight_cast", "elementwise", 0.0, 0.0, 0.0, moved, 0.0, moved)


def layer_kernels(m: ModelConfig, layer: int, mb: MicroBatch, sh: Sharding) -> list[Op]:
    """The layer's ops in forward order (:func:`~simulator.model.ops.layer_ops`), led by
    autocast's weight cast when the framework casts fp32 weights each micro-batch."""
    ops = layer_ops(
        m, layer, mb.b, mb.s, sh, mb.act_bytes, mb.flash, mb.eager_kernels, mb.eager_norms
    )
    if mb.weight_cast_bytes:
        ops = [weight_cast_op(m, layer, sh, mb.weight_cast_bytes), *ops]
    return ops


def grad_accumulate_op(params: float, grad_bytes: float) -> Op:
    """Eager gradient accumulation, ``grad += new`` over ``params`` gradients: two reads and
    a write of ``grad_bytes`` each, memory-bound, in the weight-gradient pass."""
    return Op("grad_accumulate", "elementwise", 0.0, 0.0, 0.0, 0.0, 0.0, 3 * grad_bytes * params)


def grad_accumulate_block(params: float, grad_bytes: float, cm: ComputeModel) -> Block:
    """:func:`grad_accumulate_op` as a block (s, FLOPs)."""
    return Block.of([grad_accumulate_op(params, grad_bytes)], cm)


@lru_cache(maxsize=4096)
def layer_cost(
    m: ModelConfig, layer: int, mb: MicroBatch, sh: Sharding, recompute: str, cm: ComputeModel
) -> LayerCost:
    """Blocks and activation bytes of ``layer`` for micro-batch shape ``mb`` under ``sh``."""
    pre, core, post, ffn, experts = _split(layer_kernels(m, layer, mb, sh))
    imbalance = m.moe.load_imbalance if (m.moe and m.is_moe_layer(layer)) else 1.0
    blocks = _layer_blocks(
        tuple(pre), tuple(core), tuple(post), tuple(ffn), tuple(experts), cm, sh.cp, imbalance
    )
    modules = modules_of(recompute)
    again = None
    if modules:  # the recomputed modules' ops, the routed experts' at their load imbalance
        moe = m.is_moe_layer(layer)
        kept = [o for o in pre + core + post + ffn if recomputed_op(o.name, modules, moe)]
        routed = [o for o in experts if recomputed_op(o.name, modules, moe)]
        again = Block.of(kept, cm) + Block.of(routed, cm, imbalance)
    return LayerCost(
        *blocks[:5],
        act_kept=layer_activation_bytes(m, layer, mb, sh, recompute),
        act_full=layer_activation_bytes(m, layer, mb, sh, "none"),
        parts=blocks[5],
        modules=again,
    )


@lru_cache(maxsize=1024)
def _layer_blocks(pre, core, post, ffn, experts, cm: ComputeModel, cp: int, imbalance: float):
    """:func:`layer_cost`'s Blocks (attn_local, attn_remote, core, ffn, experts, parts) from
    its ops, memoised by the ops: a model's layers mostly have equal ones (96 in GPT-3)."""
    core_block = Block.of(core, cm)
    local = 1.0 / cp

    def each(ops, scale: float = 1.0) -> tuple[tuple[str, Block], ...]:
        """Per-kernel Blocks of ``ops`` (each issued by its own launch)."""
        return tuple((o.name, Block.of([o], cm, scale)) for o in ops)

    remote = each(core, 1.0 - local) if cp > 1 else ()
    return (
        Block.of(pre, cm) + Block.of(core, cm, local),
        Block.of(core, cm, 1.0 - local) + Block.of(post, cm),
        core_block,
        Block.of(ffn, cm),
        Block.of(experts, cm, imbalance) if experts else None,
        {
            "attn_local": each(pre) + each(core, local),
            "attn_remote": remote + each(post),
            "core": each(core),
            "ffn": each(ffn),
            "experts": each(experts, imbalance),
        },
    )


def routed_tokens_bytes(m: ModelConfig, mb: MicroBatch, sh: Sharding) -> tuple[float, bool]:
    """(B, local) of an MoE layer's dispatch (or combine) on one rank per micro-batch: its
    tokens x top-k x hidden values (capacity factor included), and whether it dispatches its
    own sequence-parallel tokens - a TP-th of them - as Megatron-core's all-to-all dispatcher
    does under expert, tensor and sequence parallelism, and always with an expert TP other
    than TP (MoE parallel folding). The step builder's all-to-alls
    (:func:`simulator.schedule.layer_tasks.experts`) and the step bound
    (:mod:`simulator.stages.bounds`) size them from this."""
    moe = m.moe
    tokens = mb.b * mb.s / sh.cp
    size = mb.act_bytes * tokens * moe.top_k * (moe.capacity_factor or 1.0) * m.hidden
    return size, (sh.sp and sh.tp > 1 and sh.ep > 1) or sh.etp != sh.tp


@lru_cache(maxsize=1024)
def embedding_block(m: ModelConfig, mb: MicroBatch, sh: Sharding, cm: ComputeModel) -> Block:
    return Block.of(embedding_ops(m, mb.b, mb.s, sh, mb.act_bytes), cm)


@lru_cache(maxsize=1024)
def head_block(m: ModelConfig, mb: MicroBatch, sh: Sharding, cm: ComputeModel) -> Block:
    ops = head_ops(m, mb.b, mb.s, sh, mb.act_bytes, mb.eager_kernels, mb.eager_norms)
    return Block.of(ops, cm)


def optimizer_seconds(
    params: float,
    grad_bytes: float,
    param_bytes: float,
    state_bytes_per_param: float,
    cm: ComputeModel,
    implementation: str = "fused",
    master: bool = True,
) -> float:
    """An optimizer step over ``params`` parameters: memory-bound.

    ``fused``: one pass that reads the gradient and the optimizer state and writes the state
    back, and with a ``master`` copy in the state writes the low-precision parameters; without
    one it updates the weights in place, read and written at their own precision (at most
    4 B: torch-amp's parameters count the 2 B copy autocast makes, which the step does not
    touch), as the calibration's fused AdamW over fp32 weights moves 28 B.

    ``foreach``: PyTorch's multi-tensor AdamW (torch/optim/adamw.py ``_multi_tensor_adamw``,
    PyTorch's default on CUDA), one pass per op over fp32 weights ``w`` and moments ``s`` (4 B
    each) and gradients ``g``: weight decay (2w), ``lerp_`` of m (2s + g), ``mul_`` and
    ``addcmul_`` of v (2s; 2s + g), ``sqrt`` into a new fp32 tensor (s + 4), ``div_`` and
    ``add_`` of it (8; 8), ``addcdiv_`` of the weights (2w + s + 4): 4w + 2g + 8s + 24 B per
    parameter; a master copy beyond the parameters is cast back to them (4 + the parameter's
    bytes).

    The fused pass streams at the calibration's fused-AdamW efficiency
    (:attr:`MemFit.optimizer`, 0.72 of HBM on H200 against a copy's 0.88), each foreach pass
    at a copy's. ``plain`` (SGD, with or without momentum): the fused pass's bytes at a
    copy's rate."""
    if implementation == "foreach":
        w = s = 4.0
        moved = 4 * w + 2 * grad_bytes + 8 * s + 24
        if master:  # cast back to the parameters
            moved += w + param_bytes
        moved *= params
        e = cm.mem.e_mem  # each pass a plain elementwise op (no measurement of their own)
    else:
        weights = param_bytes if master else 2 * min(param_bytes, 4.0)
        moved = params * (grad_bytes + 2 * state_bytes_per_param + weights)
        # Adam fused: the calibration's fused AdamW, where it has one; SGD: a plain pass
        e = cm.mem.optimizer if implementation == "fused" else cm.mem.e_mem
    return moved / (cm.hbm_Bps * e) + cm.launch_s


def grad_norm_seconds(params: float, grad_bytes: float, cm: ComputeModel) -> float:
    """Gradient-norm clipping's norm over ``params`` local gradients: one read of every
    gradient byte (multi-tensor L2 norm, memory-bound). Not simulated: its scalar all-reduce
    over the model-parallel ranks, which also makes every stage wait for the slowest before
    its optimizer step (here each stage's optimizer waits only for its own gradients), and the
    clip's scaling, which runs only when the norm exceeds the threshold (Megatron-LM
    ``clip_grad_norm_fp32``)."""
    return params * grad_bytes / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s
