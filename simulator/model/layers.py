"""The weight matrices of a transformer layer, and how tensor parallelism shards each.

Everything the cost model says about parameters and GEMMs derives from these lists, so that
parameter counts, FLOPs and sharding cannot drift apart. Megatron-LM's conventions:

- attention Q/K/V and MLP up/gate projections are column-parallel (output split over tp, their
  bias too); the attention output and MLP down projections are row-parallel (input split, bias
  replicated); norms, the router and MLA's down-projections are replicated;
- routed experts are split ``expert_tp`` ways and spread ``ep`` ways (``copies`` = experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.scenario.schema import ModelConfig

Split = Literal["column", "row", "none"]
Group = Literal["attention", "mlp", "router", "expert", "shared_expert"]


@dataclass(frozen=True)
class Linear:
    """One weight matrix ``d_in x d_out`` (plus a bias of ``d_out`` if ``bias``).

    ``copies`` > 1 for routed experts: that many identical matrices, one per expert.
    """

    name: str
    d_in: int
    d_out: int
    bias: bool
    split: Split
    group: Group
    copies: int = 1

    @property
    def params(self) -> int:
        """Parameters of all copies, unsharded."""
        return self.copies * (self.d_in * self.d_out + (self.d_out if self.bias else 0))

    def params_per_rank(self, tp: int, ep: int = 1) -> float:
        """Parameters one rank holds: ``tp`` shards the matrix, ``ep`` spreads the copies."""
        weights = self.d_in * self.d_out / (tp if self.split != "none" else 1)
        bias = 0.0
        if self.bias:
            bias = self.d_out / tp if self.split == "column" else self.d_out
        return self.copies / ep * (weights + bias)


def norm_params(model: ModelConfig, width: int) -> int:
    """LayerNorm has a scale and a shift per channel, RMSNorm only a scale."""
    return width * (2 if model.norm == "layernorm" else 1)


def attention_linears(m: ModelConfig) -> list[Linear]:
    """Projections of one attention block (MHA/GQA, or MLA's low-rank factorisation)."""
    if m.attention == "mla":
        c = m.mla
        qk = c.qk_nope_head_dim + c.qk_rope_head_dim
        return [
            Linear("q_down", m.hidden, c.q_lora_rank, m.bias, "none", "attention"),
            Linear("q_up", c.q_lora_rank, m.heads * qk, m.bias, "column", "attention"),
            Linear(
                "kv_down",
                m.hidden,
                c.kv_lora_rank + c.qk_rope_head_dim,
                m.bias,
                "none",
                "attention",
            ),
            Linear(
                "kv_up",
                c.kv_lora_rank,
                m.heads * (c.qk_nope_head_dim + c.v_head_dim),
                m.bias,
                "column",
                "attention",
            ),
            Linear("out_proj", m.heads * c.v_head_dim, m.hidden, m.bias, "row", "attention"),
        ]
    d = m.d_head
    return [
        Linear("qkv", m.hidden, (m.heads + 2 * m.n_kv_heads) * d, m.bias, "column", "attention"),
        Linear("out_proj", m.heads * d, m.hidden, m.bias, "row", "attention"),
    ]


def attention_dims(m: ModelConfig) -> tuple[int, int, int]:
    """(query/key head dim, value head dim, key/value heads) of the attention core."""
    if m.attention == "mla":
        c = m.mla
        return c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim, m.heads
    return m.d_head, m.d_head, m.n_kv_heads


def mlp_linears(m: ModelConfig, ffn: int, group: Group, copies: int = 1) -> list[Linear]:
    """Up (and gate, for SwiGLU, fused as one column-parallel matrix) and down projections."""
    up_width = 2 * ffn if m.activation == "swiglu" else ffn
    return [
        Linear(f"{group}_up", m.hidden, up_width, m.bias, "column", group, copies),
        Linear(f"{group}_down", ffn, m.hidden, m.bias, "row", group, copies),
    ]


def ffn_linears(m: ModelConfig, layer: int) -> list[Linear]:
    """The feed-forward block of layer ``layer``: a dense MLP, or router + experts."""
    if not m.is_moe_layer(layer):
        return mlp_linears(m, m.ffn, "mlp")
    moe = m.moe
    out = [Linear("router", m.hidden, moe.experts, False, "none", "router")]
    out += mlp_linears(m, moe.expert_ffn, "expert", copies=moe.experts)
    if moe.shared_experts:
        out += mlp_linears(m, moe.expert_ffn * moe.shared_experts, "shared_expert")
    return out


def layer_linears(m: ModelConfig, layer: int) -> list[Linear]:
    return attention_linears(m) + ffn_linears(m, layer)


def layer_norm_params(m: ModelConfig) -> int:
    """The two pre-norms of a layer, plus MLA's norms of its compressed Q and KV."""
    extra = 0
    if m.attention == "mla":
        extra = norm_params(m, m.mla.q_lora_rank) + norm_params(m, m.mla.kv_lora_rank)
    return 2 * norm_params(m, m.hidden) + extra
