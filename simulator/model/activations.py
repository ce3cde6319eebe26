"""Activation memory saved for backward, per layer per micro-batch on one rank (bytes).

After Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models"), section 4, counted tensor by tensor so that the paper's closed forms come out exactly
for its GPT setting (16-bit activations, 1-byte dropout masks, FFN = 4h, GeLU, no flash
attention) and the variants follow from the same tensors:

=========================  ===========================  ================================
tensor saved               bytes                        split by
=========================  ===========================  ================================
two norm inputs            2 e T h                      sp
QKV input, MLP input       2 e T h                      sp
Q, K, V                    e T (a d_qk + kv d_qk + kv d_v)  tp (GQA: fewer kv heads)
softmax output             e a s_q s_k b                tp   (not with flash / selective)
attention dropout          (1 + e) a s_q s_k b          tp   (only with dropout)
attention output           e T a d_v                    tp
MLP hidden                 2 e T f (GeLU), 3 e T f (SwiGLU)  tp   (4 e T f eager SwiGLU)
two dropout masks          2 T h                        sp   (only with dropout)
=========================  ===========================  ================================

with ``e`` bytes per value, ``T = b s / cp`` tokens on the rank, ``a`` heads, ``kv`` key/value
heads. For GPT this is ``sbh (34 + 5as/h)`` unsplit, ``sbh (10 + 24/t + 5as/(ht))`` with TP and
``sbh/t (34 + 5as/h)`` with TP+SP. Flash attention keeps no score matrix (its softmax
statistics, 4 a s b bytes, are under 0.1% and ignored). Selective recompute drops the score
terms; full recompute keeps only the layer input ``e T h`` (split by sp).

Eager frameworks keep more (:mod:`simulator.scenario.framework`): eager SwiGLU a fourth ffn-sized
tensor, eager RMSNorm an fp32 copy of each norm's input (4 T h bytes per norm, split by sp).

MoE layers save the router probabilities (fp32, of the tokens the rank routes: ``T / t`` under
sequence parallelism), the dispatched tokens and the expert hidden activations for
``T x top_k x capacity_factor`` token-copies (``x etp / t`` when the expert TP degree differs
from TP: :attr:`~simulator.model.ops.Sharding.expert_share`), and the expert outputs that the
combine's gate gradient needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.layers import attention_dims
from simulator.model.ops import FP32, Sharding
from simulator.scenario.recompute import modules_of
from simulator.scenario.schema import ModelConfig

Recompute = str  # "none", "selective", "full" or "modules:..." (simulator.scenario.recompute)
MASK_BYTES = 1.0  # PyTorch stores dropout masks as bool/uint8


@dataclass(frozen=True)
class MicroBatch:
    """Shape of one micro-batch: ``b`` sequences of ``s`` tokens, ``e`` bytes per value, and
    what the framework's kernels keep of it (:mod:`simulator.scenario.framework`): SwiGLU's
    saved ffn-sized tensors (3 fused, 4 eager), eager norms' fp32 input copies, the bytes per
    logit at the loss's peak, and the weight-cast traffic per parameter and micro-batch."""

    b: int
    s: int
    act_bytes: float = 2.0
    flash: bool = True
    swiglu_saved: int = 3
    eager_norms: bool = False
    loss_bytes_per_logit: float = 6.0
    weight_cast_bytes: float = 0.0
    eager_kernels: bool = False  # rotary, SwiGLU and the loss as eager PyTorch's kernels


def _attention_bytes(
    m: ModelConfig, mb: MicroBatch, sh: Sharding, recompute: str, up_proj: bool = False
) -> float:
    e, t = mb.act_bytes, sh.tp
    tokens = mb.b * mb.s / sh.cp
    d_qk, d_v, kv = attention_dims(m)
    qkv = e * tokens * (m.heads * d_qk + kv * d_qk + kv * d_v) / t
    if up_proj and m.attention == "mla":  # Q, K, V made again from the compressed latents
        qkv = 0.0
    out_in = e * tokens * m.heads * d_v / t
    mla = 0.0
    if m.attention == "mla":  # compressed Q and KV: norm inputs and up-projection inputs
        mla = 2 * e * tokens * (m.mla.q_lora_rank + m.mla.kv_lora_rank)
    scores = 0.0
    if not mb.flash and recompute == "none":
        area = mb.b * (m.heads / t) * (mb.s / sh.cp) * mb.s
        scores = e * area + ((MASK_BYTES + e) * area if m.dropout else 0.0)
    return qkv + out_in + mla + scores


def _ffn_bytes(
    m: ModelConfig, layer: int, mb: MicroBatch, sh: Sharding, modules: frozenset = frozenset()
) -> float:
    e = mb.act_bytes
    tokens = mb.b * mb.s / sh.cp
    per_ffn = mb.swiglu_saved if m.activation == "swiglu" else 2  # fused: gate, up, product
    if not m.is_moe_layer(layer):
        return 0.0 if "mlp" in modules else per_ffn * e * tokens * m.ffn / sh.tp
    if "moe" in modules:  # the block keeps its input (counted with the layer's inputs)
        return 0.0
    moe = m.moe
    routed = tokens * sh.expert_share * moe.top_k * (moe.capacity_factor or 1.0)
    out = 4.0 * tokens * sh.router_share * moe.experts  # fp32 router probabilities
    out += 2 * e * routed * m.hidden  # dispatched tokens in, expert outputs back
    kept = per_ffn - 1 if "moe_act" in modules else per_ffn  # the activation's output
    out += kept * e * routed * moe.expert_ffn / sh.etp
    if "shared_experts" not in modules:
        out += per_ffn * e * tokens * moe.expert_ffn * moe.shared_experts / sh.tp
    return out


def layer_activation_bytes(
    m: ModelConfig,
    layer: int,
    mb: MicroBatch,
    sh: Sharding = Sharding(),
    recompute: Recompute = "none",
) -> float:
    """Bytes layer ``layer`` keeps for backward for one micro-batch on one rank; per-module
    recompute (``"modules:..."``) drops what each named module keeps but its input
    (:mod:`simulator.scenario.recompute`)."""
    tokens = mb.b * mb.s / sh.cp
    replicated = tokens / sh.tp if sh.sp else tokens  # what sequence parallelism splits
    if recompute == "full":
        return mb.act_bytes * replicated * m.hidden
    modules = modules_of(recompute)
    e, h = mb.act_bytes, m.hidden
    masks = 2 * MASK_BYTES * replicated * h if m.dropout else 0.0
    inputs = 2 * e * replicated * h  # the two norm inputs
    if "layernorm" not in modules:  # the norms' outputs: the QKV input and the MLP input
        inputs += 2 * e * replicated * h
        if mb.eager_norms:  # each of the two norms keeps an fp32 copy of its input
            inputs += 2 * FP32 * replicated * h
    policy = "selective" if "core_attn" in modules else recompute
    attention = _attention_bytes(m, mb, sh, policy, "mla_up_proj" in modules)
    return inputs + masks + attention + _ffn_bytes(m, layer, mb, sh, modules)


def embedding_activation_bytes(m: ModelConfig, mb: MicroBatch, sh: Sharding = Sharding()) -> float:
    """The embedding dropout's mask (first stage); nothing without dropout."""
    tokens = mb.b * mb.s / sh.cp
    replicated = tokens / sh.tp if sh.sp else tokens
    return MASK_BYTES * replicated * m.hidden if m.dropout else 0.0


def head_activation_bytes(m: ModelConfig, mb: MicroBatch, sh: Sharding = Sharding()) -> float:
    """Final norm input, output-layer input and the fp32 softmax of the logits (last stage).

    The vocabulary-parallel cross-entropy keeps fp32 probabilities of ``T x vocab/tp`` for its
    backward: for a 128K vocabulary that is gigabytes per micro-batch.
    """
    tokens = mb.b * mb.s / sh.cp
    replicated = tokens / sh.tp if sh.sp else tokens
    norm = FP32 * replicated * m.hidden if mb.eager_norms else 0.0
    return 2 * mb.act_bytes * replicated * m.hidden + norm + FP32 * tokens * m.vocab / sh.tp


def output_weight_grad_bytes(m: ModelConfig, mb: MicroBatch, sh: Sharding = Sharding()) -> float:
    """What a postponed output-layer weight gradient (dW = dY^T X, split-backward schedules)
    holds from the loss's backward to its W pass, per micro-batch on the last stage: the
    layer's input X (``T x hidden``, sequence-parallel shard) and the logits' gradient dY
    (``T x vocab/tp``), both in the activation dtype, as the zero-bubble implementation's
    ``WeightGradStore.put(total_input, grad_output, ...)`` keeps them."""
    tokens = mb.b * mb.s / sh.cp
    replicated = tokens / sh.tp if sh.sp else tokens
    return mb.act_bytes * (replicated * m.hidden + tokens * m.vocab / sh.tp)


def loss_transient_bytes(m: ModelConfig, mb: MicroBatch, sh: Sharding = Sharding()) -> float:
    """Bytes the loss's backward holds beyond the saved fp32 probabilities (the gradients of
    the logits), per micro-batch on the last stage: ``loss_bytes_per_logit - 4`` per logit."""
    tokens = mb.b * mb.s / sh.cp
    return (mb.loss_bytes_per_logit - FP32) * tokens * m.vocab / sh.tp
