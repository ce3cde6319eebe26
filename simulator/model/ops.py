"""Per-op FLOPs and HBM bytes of one micro-batch on one rank: forward, input- and weight-gradient.

Conventions (docs/design.md, Compute):

- a GEMM ``(m x k) @ (k x n)`` costs ``2 m n k`` FLOPs forward; its input-gradient (B) and
  weight-gradient (W) each cost the same. Bytes are the operands read and the result written.
- the attention core (``QK^T`` and ``PV``) of a causal model counts half the square:
  ``2 b heads s_q s_k (d_qk + d_v) / 2`` forward. Its backward, all in B (it has no weights),
  is twice that when the probabilities were kept (dV, dP, dQ, dK: four GEMMs) and 2.5 times
  with flash attention, which recomputes ``QK^T`` first: five GEMMs against the forward's
  two (Dao 2023, FlashAttention-2, sec. 3.1.2; its benchmarks count the backward as 2.5x),
  run at the lower FLOP rate the kernel's published benchmarks show
  (:data:`FLASH_BACKWARD_RATIO`).
- elementwise ops (norms, rotary embedding, activation functions, dropout, residual adds,
  softmax, loss) are memory-bound: their bytes matter, their FLOPs are listed but are not
  model FLOPs. Residual dropout is fused into the residual add (Megatron's
  bias_dropout_add_fusion); its mask is counted in memory, not as a kernel.

Eager PyTorch runs some of these as several kernels, each reading and writing HBM
(:func:`eager_rope_ops`, :func:`eager_attention_copies`, :func:`eager_swiglu_ops`,
:func:`eager_rmsnorm_ops`, :func:`eager_loss_ops`): ``eager`` and ``eager_norms`` (the
scenario's ``framework``) select them. Their bytes count one read of every input and one
write of every output per kernel, from the reference code; a kernel that reads its input
twice (a softmax over a long row) is counted once, so they are lower bounds.

Sharding is what one rank holds: ``tp`` splits heads and FFN columns, ``sp`` (sequence
parallel) splits the elementwise work between the tensor-parallel ops over tokens, ``cp``
splits the sequence (each rank's queries attend to keys of the whole sequence, balanced as
Llama 3 does), and ``ep``/``expert_tp`` spread and split the routed experts. With top-k routing
each rank's experts process on average ``tokens x top_k x capacity_factor`` token-copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from simulator.model.layers import Linear, attention_dims, ffn_linears, layer_linears
from simulator.scenario.schema import ModelConfig

OpKind = Literal["gemm", "attention", "elementwise", "embedding", "loss"]
ACTIVATION_FLOPS_PER_VALUE = 8.0  # an activation function (tanh-GeLU, SiLU x gate) per output


@dataclass(frozen=True)
class Sharding:
    """Parallel degrees that shape one rank's share of a layer."""

    tp: int = 1
    sp: bool = False
    cp: int = 1
    ep: int = 1
    expert_tp: int | None = None

    @property
    def etp(self) -> int:
        return self.expert_tp or self.tp

    @property
    def expert_share(self) -> float:
        """The share of the CP shard's tokens whose routed copies a rank's experts see: 1
        when expert TP = TP (the TP group's tokens, gathered); etp / tp when they differ (MoE
        parallel folding: each rank dispatches its own 1/tp of them under sequence
        parallelism and its expert-TP group gathers etp such shares)."""
        return 1.0 if self.etp == self.tp else self.etp / self.tp

    @property
    def router_share(self) -> float:
        """The share of the CP shard's tokens a rank's router scores: its own 1/tp under
        sequence parallelism (Megatron-core routes the rank's sequence-parallel hidden states
        before any dispatch), else all."""
        return 1.0 / self.tp if self.sp else 1.0


@dataclass(frozen=True)
class Op:
    """One kernel's work for one micro-batch on one rank.

    FLOPs (FLOP) and bytes (B) are per phase: forward ``f``, input-gradient ``b``, weight-
    gradient ``w``. ``gemm_mnk`` is the forward GEMM shape of one copy (for the efficiency
    curve), ``copies`` how many such GEMMs run (local experts).
    """

    name: str
    kind: OpKind
    f_flops: float
    b_flops: float
    w_flops: float
    f_bytes: float
    b_bytes: float
    w_bytes: float
    gemm_mnk: tuple[float, float, float] | None = None
    copies: float = 1.0
    b_efficiency: float = 1.0  # the input gradient's FLOP rate / the forward's (fused kernels)
    flash: bool = False  # a fused (flash) attention kernel, whose speed is its implementation's

    @property
    def flops(self) -> float:
        return self.f_flops + self.b_flops + self.w_flops


def gemm_op(lin: Linear, tokens: float, shard: Sharding, act_bytes: float) -> Op:
    """A linear layer applied to ``tokens`` rows (per copy), sharded as the layer says."""
    tp = shard.etp if lin.group == "expert" else shard.tp
    d_in = lin.d_in / tp if lin.split == "row" else lin.d_in
    d_out = lin.d_out / tp if lin.split == "column" else lin.d_out
    copies = lin.copies / shard.ep if lin.group == "expert" else 1.0
    if lin.group == "expert":
        tokens = tokens / copies  # token-copies spread over the local experts
    m, n, k = tokens, d_out, d_in
    flops = 2.0 * m * n * k * copies
    e = act_bytes
    return Op(
        name=lin.name,
        kind="gemm",
        f_flops=flops,
        b_flops=flops,
        w_flops=flops,
        f_bytes=copies * e * (m * k + k * n + m * n),
        b_bytes=copies * e * (m * n + k * n + m * k),
        w_bytes=copies * e * (m * k + m * n + k * n),
        gemm_mnk=(m, n, k),
        copies=copies,
    )


def _elementwise(
    name: str,
    elems_in: float,
    elems_out: float,
    act_bytes: float,
    flops_per_elem: float = 1.0,
    backward_factor: float = 2.0,
) -> Op:
    """A memory-bound op reading ``elems_in`` and writing ``elems_out`` values forward.

    Its backward reads the saved input and the output gradient and writes the input gradient:
    about ``backward_factor`` times the forward traffic.
    """
    fwd = act_bytes * (elems_in + elems_out)
    flops = flops_per_elem * elems_out
    return Op(
        name, "elementwise", flops, backward_factor * flops, 0.0, fwd, backward_factor * fwd, 0.0
    )


# FlashAttention's backward runs at a lower FLOP rate than its forward (its FLOPs counted as
# 2.5x the forward's): FlashAttention-2 on H100, head dim 128, non-causal, 16K tokens per
# batch, backward / forward TFLOP/s at sequence lengths 512 .. 16K (FA3 paper, Shah et al.
# 2024, arXiv:2407.08608, Figs. 5 and 6, FA2 bars: 214/309 .. 322/370). FA3 and cuDNN show
# the same rise (0.8-0.87 from 2K up); on A100, FA2's paper gives up to 73% of peak forward
# and 63% backward (0.86). Collected in the project's research notes.
FLASH_BACKWARD_RATIO = ((512, 0.69), (1024, 0.74), (2048, 0.80), (4096, 0.84), (8192, 0.86),
                        (16384, 0.87))  # fmt: skip


def log2_interp(x: float, pts) -> float:
    """``pts`` ((x, y), ... by ascending x) at ``x``, linear in log2(x) between them, the end
    values beyond them: how published kernel figures by size are read in between."""
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    return pts[-1][1]


def flash_backward_ratio(seq_len: float) -> float:
    """:data:`FLASH_BACKWARD_RATIO` at ``seq_len`` keys (:func:`log2_interp`)."""
    return log2_interp(seq_len, FLASH_BACKWARD_RATIO)


def attention_core_op(
    m: ModelConfig, b: int, s: int, shard: Sharding, act_bytes: float, flash: bool
) -> list[Op]:
    """``softmax(QK^T) V`` for one micro-batch of ``b`` sequences of length ``s``."""
    d_qk, d_v, kv_heads = attention_dims(m)
    heads = m.heads / shard.tp
    kv = kv_heads / shard.tp
    s_q, s_k = s / shard.cp, float(s)
    causal = 0.5
    f = 2.0 * b * heads * s_q * s_k * (d_qk + d_v) * causal
    e = act_bytes
    io = e * b * (s_q * heads * (d_qk + d_v) + s_k * kv * (d_qk + d_v))
    shape = (b * heads * s_q, s_k, d_qk)  # the fused kernel's inner GEMM
    ops = [
        Op(
            "attention", "attention", f, 2.5 * f, 0.0, io, 2.5 * io, 0.0, shape,
            b_efficiency=flash_backward_ratio(s_k), flash=True,
        )
    ]  # fmt: skip
    if not flash:  # the score matrix is materialised, masked and soft-maxed in HBM
        scores = b * heads * s_q * s_k
        ops[0] = Op(
            "attention",
            "attention",
            f,
            2.0 * f,
            0.0,
            io + 2 * e * scores,
            2.5 * io + 4 * e * scores,
            0.0,
            shape,
        )
        ops.append(_elementwise("softmax", scores, scores, e, flops_per_elem=5.0))
        if m.dropout:
            ops.append(_elementwise("attention_dropout", scores, scores, e))
    return ops


def rope_op(m: ModelConfig, tokens: float, shard: Sharding, act_bytes: float) -> Op:
    """Rotary embedding of this rank's queries and keys: a memory-bound kernel reading and
    writing each rotated value (cos/sin tables are small and cached), forward and backward
    alike (the backward rotates the gradient the other way: ``backward_factor`` 1). MLA rotates
    only its decoupled rope dimensions: per head for queries, one shared key."""
    if m.attention == "mla":
        rotated = tokens * (m.heads / shard.tp + 1) * m.mla.qk_rope_head_dim
    else:
        rotated = tokens * (m.heads + m.n_kv_heads) / shard.tp * m.d_head
    return _elementwise("rope", rotated, rotated, act_bytes, 3.0, backward_factor=1.0)


FP32 = 4.0  # bytes of an fp32 value


def _kernel(name: str, f_bytes: float, b_bytes: float, flops: float = 0.0) -> Op:
    """One memory-bound kernel forward (``f_bytes``) and its autograd counterpart
    (``b_bytes``); either may be 0 (no kernel in that pass)."""
    return Op(name, "elementwise", flops, flops, 0.0, f_bytes, b_bytes, 0.0)


def eager_rope_ops(m: ModelConfig, tokens: float, shard: Sharding, act_bytes: float) -> list[Op]:
    """Rotary embedding as eager PyTorch runs it (meta-llama/llama3 and torchtitan
    ``apply_rotary_emb``): for queries and for keys, ``x.float()`` (read e, write 4 B per
    value), the complex multiply by ``freqs_cis`` (read 4, write 4; the table is small), and
    ``.type_as(x)`` (4 -> e); autograd runs the same three backwards: the gradient cast up,
    multiplied by the conjugate, cast down."""
    if m.attention == "mla":
        q = tokens * m.heads / shard.tp * m.mla.qk_rope_head_dim
        k = tokens * m.mla.qk_rope_head_dim
    else:
        q = tokens * m.heads / shard.tp * m.d_head
        k = tokens * m.n_kv_heads / shard.tp * m.d_head
    e = act_bytes
    ops = []
    for who, n in (("q", q), ("k", k)):
        up, mul, down = (e + FP32) * n, 2 * FP32 * n, (FP32 + e) * n
        ops += [
            _kernel(f"rope_{who}_float", up, down),
            _kernel(f"rope_{who}_complex_mul", mul, mul, 6.0 * n / 2),
            _kernel(f"rope_{who}_type_as", down, up),
        ]
    return ops


def eager_attention_copies(
    m: ModelConfig, tokens: float, shard: Sharding, act_bytes: float
) -> list[Op]:
    """The layout copies around the attention core in the eager reference code (meta-llama
    and torchtitan ``Attention``): ``repeat_kv`` materialises K and V for every query head
    when keys are shared (GQA: read the key/value heads, write the query heads' worth; its
    backward sums the repeats back), and ``output.transpose(1, 2).contiguous()`` copies the
    attention output (read and write it; its gradient is copied back). Both are listed before
    the attention core, so that the core stays what selective recompute repeats."""
    if m.attention == "mla":
        return []
    e, d = act_bytes, m.d_head
    q_vals = tokens * m.heads / shard.tp * d
    kv_vals = tokens * m.n_kv_heads / shard.tp * d
    ops = []
    if m.n_kv_heads < m.heads:
        repeat = 2 * e * (kv_vals + q_vals)  # K and V
        ops.append(_kernel("attention_repeat_kv", repeat, repeat))
    ops.append(_kernel("attention_out_contiguous", 2 * e * q_vals, 2 * e * q_vals))
    return ops


def eager_swiglu_ops(prefix: str, rows: float, ffn: float, act_bytes: float) -> list[Op]:
    """``silu(w1 x) * w3 x`` as two eager kernels (meta-llama and torchtitan ``FeedForward``):
    silu (read e, write e per ffn value) and the product (read 2e, write e); backward
    (derivatives.yaml): the product's two gradients, ``grad * w3 x`` and ``grad * silu``
    (read 2e, write e each), and ``silu_backward`` (read the gradient and the input, write e)."""
    n, e = rows * ffn, act_bytes
    return [
        _kernel(f"{prefix}_silu", 2 * e * n, 3 * e * n, 4.0 * n),
        _kernel(f"{prefix}_swiglu_mul", 3 * e * n, 3 * e * n, n),
        _kernel(f"{prefix}_swiglu_mul_grad", 0.0, 3 * e * n),
    ]


def eager_rmsnorm_ops(name: str, tokens: float, h: float, act_bytes: float) -> list[Op]:
    """meta-llama's eager ``RMSNorm``: ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps))
    .type_as(x) * weight``. Forward kernels per value: to fp32 (e -> 4), pow (4 -> 4), mean
    (read 4), the product with rsqrt (4 -> 4), back to e (4 -> e), times the weight (e -> e);
    eps and rsqrt act on one value per token. Backward (autograd, reversed): the weight's
    product (grad x weight, e -> e; grad x normed and its sum over tokens for the weight's
    gradient, 2e -> e and e), the cast up (e -> 4), the rsqrt product's two gradients (4 -> 4;
    8 -> 4 and its sum over the row, 4), pow's (8 -> 4), the two branches' sum (8 -> 4), the
    cast down (4 -> e)."""
    n, e, per_token = tokens * h, act_bytes, tokens * FP32
    fwd = [
        ("float", (e + FP32) * n),
        ("pow", 2 * FP32 * n),
        ("mean", FP32 * n + per_token),
        ("add_eps", 2 * per_token),
        ("rsqrt", 2 * per_token),
        ("mul_rsqrt", 2 * FP32 * n + per_token),
        ("type_as", (FP32 + e) * n),
        ("mul_weight", 2 * e * n),
    ]
    bwd = [
        ("mul_weight", 2 * e * n),
        ("mul_normed", 3 * e * n),
        ("sum_weight_grad", e * n),
        ("type_as", (e + FP32) * n),
        ("mul_rsqrt", 2 * FP32 * n),
        ("mul_x", 3 * FP32 * n),
        ("sum_row", FP32 * n),
        ("rsqrt", 2 * per_token),
        ("mean", per_token + FP32 * n),
        ("pow", 3 * FP32 * n),
        ("add_branches", 3 * FP32 * n),
        ("float", (FP32 + e) * n),
    ]
    ops = [_kernel(f"{name}_{k}", b, 0.0) for k, b in fwd]
    return ops + [_kernel(f"{name}_{k}_backward", 0.0, b) for k, b in bwd]


def eager_loss_ops(logits: float, act_bytes: float) -> list[Op]:
    """``cross_entropy(logits.float(), targets)`` in eager PyTorch (torchtitan, the
    meta-llama reference): the cast to fp32 (e -> 4 B per logit), log-softmax (4 -> 4) and
    the NLL gather (per token, small); backward: the NLL gradient (a zeroed fp32 tensor with
    one value per token set: 4 B per logit), log-softmax's (read the gradient and the output,
    write 4) and the cast down (4 -> e)."""
    e = act_bytes
    return [
        _kernel("loss_float", (e + FP32) * logits, (FP32 + e) * logits),
        _kernel("loss_log_softmax", 2 * FP32 * logits, 3 * FP32 * logits, 5.0 * logits),
        _kernel("loss_nll", 0.0, FP32 * logits),
    ]


def _norm(name: str, m: ModelConfig, tokens: float, e: float, eager_norms: bool) -> list[Op]:
    if eager_norms and m.norm == "rmsnorm":
        return eager_rmsnorm_ops(name, tokens, m.hidden, e)
    return [_elementwise(name, tokens * m.hidden, tokens * m.hidden, e, 5.0)]


def layer_ops(
    m: ModelConfig,
    layer: int,
    b: int,
    s: int,
    shard: Sharding = Sharding(),
    act_bytes: float = 2.0,
    flash: bool = True,
    eager: bool = False,
    eager_norms: bool = False,
) -> list[Op]:
    """Every op of transformer layer ``layer`` for a micro-batch of ``b`` x ``s`` tokens;
    ``eager``: rotary embedding, attention's layout copies and SwiGLU as eager PyTorch's
    kernels, ``eager_norms``: RMSNorm too (module docstring)."""
    tokens = b * s / shard.cp
    sp_tokens = tokens / shard.tp if shard.sp else tokens  # elementwise work between TP ops
    h, e = m.hidden, act_bytes
    ops = _norm("attention_norm", m, sp_tokens, e, eager_norms)
    attn = [
        gemm_op(lin, tokens, shard, e)
        for lin in layer_linears(m, layer)
        if lin.group == "attention"
    ]
    ops += attn[:-1]
    if m.position_embedding == "rope":
        ops += eager_rope_ops(m, tokens, shard, e) if eager else [rope_op(m, tokens, shard, e)]
    if eager:
        ops += eager_attention_copies(m, tokens, shard, e)
    ops += attention_core_op(m, b, s, shard, e, flash)
    ops += attn[-1:]
    ops.append(_elementwise("attention_residual", 2 * sp_tokens * h, sp_tokens * h, e))
    ops += _norm("mlp_norm", m, sp_tokens, e, eager_norms)
    ops += ffn_ops(m, layer, tokens, shard, e, eager)
    ops.append(_elementwise("mlp_residual", 2 * sp_tokens * h, sp_tokens * h, e))
    return ops


def ffn_ops(
    m: ModelConfig,
    layer: int,
    tokens: float,
    shard: Sharding,
    act_bytes: float,
    eager: bool = False,
) -> list[Op]:
    """Dense MLP, or router + routed experts (+ shared experts), with the activation function
    (SwiGLU as eager PyTorch's two kernels with ``eager``)."""
    e = act_bytes
    ops: list[Op] = []
    moe = m.moe if m.is_moe_layer(layer) else None
    routed = tokens * shard.expert_share * moe.top_k * (moe.capacity_factor or 1.0) if moe else 0.0
    scored = tokens * shard.router_share
    for lin in ffn_linears(m, layer):
        rows = {"expert": routed, "router": scored}.get(lin.group, tokens)
        op = gemm_op(lin, rows, shard, e)
        ops.append(op)
        if lin.name.endswith("_up"):
            tp = shard.etp if lin.group == "expert" else shard.tp
            ffn = (lin.d_out // 2 if m.activation == "swiglu" else lin.d_out) / tp
            width_in = 2 * ffn if m.activation == "swiglu" else ffn
            if eager and m.activation == "swiglu":
                ops += eager_swiglu_ops(lin.group, rows, ffn, e)
                continue
            ops.append(
                _elementwise(
                    f"{lin.group}_{m.activation}",
                    rows * width_in,
                    rows * ffn,
                    e,
                    ACTIVATION_FLOPS_PER_VALUE,
                )
            )
        if lin.name == "router":
            ops.append(
                _elementwise("router_topk", scored * moe.experts, scored * moe.top_k, 4.0, 5.0)
            )
    return ops


def embedding_ops(
    m: ModelConfig, b: int, s: int, shard: Sharding = Sharding(), act_bytes: float = 2.0
) -> list[Op]:
    """Token (and position) embedding lookup; its gradient is a scatter-add (phase W)."""
    tokens = b * s / shard.cp
    out = act_bytes * tokens * m.hidden
    return [Op("embedding", "embedding", 0.0, 0.0, tokens * m.hidden, out, 0.0, 2 * out)]


def head_ops(
    m: ModelConfig,
    b: int,
    s: int,
    shard: Sharding = Sharding(),
    act_bytes: float = 2.0,
    eager: bool = False,
    eager_norms: bool = False,
) -> list[Op]:
    """Final norm, output projection to the (vocabulary-parallel) logits, softmax cross-entropy.

    Logits are upcast to fp32 for the loss, as Megatron-LM and most frameworks do; ``eager``:
    the loss as eager PyTorch's kernels (:func:`eager_loss_ops`), ``eager_norms``: the norm.
    """
    tokens = b * s / shard.cp
    sp_tokens = tokens / shard.tp if shard.sp else tokens
    h, v = m.hidden, m.vocab / shard.tp
    output = Linear("output", h, m.vocab, False, "column", "mlp")  # vocabulary-parallel
    logits = tokens * v
    loss = Op(
        "loss",
        "loss",
        5.0 * logits,
        3.0 * logits,
        0.0,
        (act_bytes + 4.0 + 4.0) * logits,
        (4.0 + 4.0 + act_bytes) * logits,
        0.0,
    )
    return [
        *_norm("final_norm", m, sp_tokens, act_bytes, eager_norms),
        gemm_op(output, tokens, shard, act_bytes),
        *(eager_loss_ops(logits, act_bytes) if eager else [loss]),
    ]


@lru_cache(maxsize=256)  # a plan search asks once per candidate, of a handful of models
def model_flops_per_sequence(m: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward + backward) of GEMMs and attention for one sequence.

    This is the numerator of MFU: the model's arithmetic, without recomputation and without
    the padding a capacity factor adds to expert batches.
    """
    if m.moe is not None and m.moe.capacity_factor is not None:
        m = m.model_copy(update={"moe": m.moe.model_copy(update={"capacity_factor": None})})
    total = 0.0
    for layer in range(m.layers):  # flash=False: the model's backward, not flash's recompute
        for op in layer_ops(m, layer, 1, seq_len, flash=False):
            if op.kind in ("gemm", "attention"):
                total += op.flops
    for op in head_ops(m, 1, seq_len):
        if op.kind == "gemm":
            total += op.flops
    return total
