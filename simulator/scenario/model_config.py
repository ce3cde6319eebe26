"""The scenario's ``model:`` section: a decoder-only transformer by architecture or by catalog
name, with its mixture-of-experts and latent-attention parts (:mod:`simulator.scenario.schema`
re-exports them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from simulator.scenario.fields import Frozen, PosInt, Real
from simulator.scenario.model_catalog import MODEL_CATALOG, catalog_key, known_models


class MoEConfig(Frozen):
    """Mixture-of-experts feed-forward layers.

    ``every`` = 2 puts an MoE layer at every second layer (GShard); ``first_dense_layers``
    keeps the first layers dense (DeepSeek-V3: 3). ``capacity_factor`` None is dropless.
    ``load_imbalance`` is the busiest expert-parallel rank's token count over the mean (1 =
    perfectly balanced routing); the busiest rank sets the pace of each all-to-all.
    ``max_nodes``: node-limited routing (DeepSeek-V3: 4; ``parallelism.moe_dispatcher: deepep``).
    """

    experts: PosInt
    """Routed experts per MoE layer."""
    top_k: PosInt
    """Experts each token is routed to."""
    expert_ffn: PosInt
    """Intermediate size of one expert's MLP."""
    shared_experts: Annotated[int, Field(ge=0, le=1024)] = 0
    """Experts every token goes through besides its routed ones (DeepSeek-style)."""
    every: PosInt = 1
    first_dense_layers: Annotated[int, Field(ge=0)] = 0
    capacity_factor: Annotated[Real, Field(gt=0, le=1000)] | None = None
    load_imbalance: Annotated[Real, Field(ge=1, le=1000)] = 1.0
    max_nodes: PosInt | None = None

    @model_validator(mode="after")
    def top_k_within_experts(self):
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        return self


class MLAConfig(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank Q and joint K/V compression."""

    q_lora_rank: PosInt
    """Rank of the compressed query."""
    kv_lora_rank: PosInt
    """Rank of the joint key-value compression (what the KV cache holds)."""
    qk_nope_head_dim: PosInt
    """Per-head query/key dimension without rotary embedding."""
    qk_rope_head_dim: PosInt
    """Per-head query/key dimension with rotary embedding (shared by the heads for keys)."""
    v_head_dim: PosInt
    """Per-head value dimension."""


def _resolve_model_name(data: Any) -> Any:
    """``"llama3-8b"`` or ``{name: llama3-8b, ...overrides}`` -> the catalog fields, merged."""
    if isinstance(data, str):
        data = {"name": data}
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        base = MODEL_CATALOG.get(catalog_key(data["name"]))
        if base is None:
            if "layers" not in data:  # a custom model must spell out its architecture
                raise ValueError(
                    f"unknown model {data['name']!r}; known: {', '.join(known_models())}"
                )
        else:
            merged = dict(base)
            for key, value in data.items():
                if isinstance(value, dict) and isinstance(merged.get(key), dict):
                    value = {**merged[key], **value}
                merged[key] = value
            return merged
    return data


class ModelConfig(Frozen):
    """A decoder-only transformer, by architecture or by catalog ``name``.

    ``ffn`` is the dense MLP's intermediate size; ``head_dim`` defaults to hidden / heads and
    ``kv_heads`` to heads (multi-head attention; fewer is GQA). ``dropout`` is the probability
    (0 = no dropout, which also removes the dropout masks from activation memory).
    """

    name: str | None = None
    """A catalog model (`trainsim models`), whose fields the others given here override;
    none: the architecture spelled out."""
    layers: PosInt
    """Transformer layers."""
    hidden: PosInt
    """Model (residual stream) width."""
    heads: PosInt
    """Attention (query) heads."""
    kv_heads: PosInt | None = None
    head_dim: PosInt | None = None
    ffn: PosInt
    vocab: PosInt
    """Vocabulary size (embedding and output layer rows)."""
    activation: Literal["gelu", "swiglu"] = "swiglu"
    """The MLP's: swiglu (three matrices, gated) or gelu (two)."""
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    """rmsnorm or layernorm (which has a bias)."""
    bias: bool = False
    """Linear layers with biases."""
    tied_embeddings: bool = False
    """The output layer shares the embedding's matrix."""
    position_embedding: Literal["rope", "learned"] = "rope"
    """rope (rotary, no parameters) or learned (a table of max_positions rows)."""
    max_positions: PosInt | None = None
    """Rows of a learned position table; with any position embedding, the longest seq_len
    the model takes."""
    dropout: Annotated[Real, Field(ge=0, lt=1)] = 0.0
    attention: Literal["mha", "mla"] = "mha"
    """mha (multi-head, or grouped-query with kv_heads) or mla (latent attention, with an
    ``mla:`` section)."""
    mla: MLAConfig | None = None
    """Multi-head latent attention's ranks and head sizes (with attention: mla)."""
    moe: MoEConfig | None = None
    """Mixture-of-experts feed-forward layers (none: dense)."""

    @model_validator(mode="before")
    @classmethod
    def resolve_catalog_name(cls, data: Any) -> Any:
        return _resolve_model_name(data)

    @model_validator(mode="after")
    def attention_consistent(self):
        if self.attention == "mla" and self.mla is None:
            raise ValueError("attention: mla needs an mla: section")
        if self.position_embedding == "learned" and self.max_positions is None:
            raise ValueError("learned position embeddings need max_positions")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has an MoE feed-forward block."""
        moe = self.moe
        if moe is None or index < moe.first_dense_layers:
            return False
        return (index - moe.first_dense_layers) % moe.every == 0
