"""Architectures of well-known models, so a scenario can say ``model: llama3-405b``.

Each entry is the raw mapping a scenario would write under ``model:``; a scenario may name one
and override fields (``model: {name: llama3-8b, layers: 4}``). Sources:

- GPT-3 175B: Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, 2048 context,
  GPT-2 tokenizer of 50,257 tokens, learned positions, tied embeddings).
- Megatron SC21 family: Narayanan et al. 2021, Table 1 (vocabulary padded to 51,200, sequence
  2048, FFN 4h, GeLU, biases, tied embeddings, learned positions).
- Llama 3 8B/70B/405B: Llama Team 2024, Table 3, and the released configs (vocabulary 128,256).
- Mixtral 8x7B: Jiang et al. 2024, Table 1; 8x22B from its released config.
- DeepSeek-V3: DeepSeek-AI 2024, section 4.2 and the released config: MLA attention with
  q/kv LoRA ranks 1536/512, 61 layers of which the first 3 are dense (FFN 18432), 256 routed
  experts of FFN 2048 plus 1 shared, top-8, vocabulary 129,280. The multi-token-prediction
  module (14B) is not modelled; the node-limited routing is approximated by uniform top-k.
"""

from __future__ import annotations

from typing import Any

# What today's decoders share (Llama 3, Mixtral, DeepSeek-V3, Qwen3): SwiGLU, RMSNorm, no
# biases, untied embeddings, rotary positions, no dropout.
_ROPE_SWIGLU: dict[str, Any] = {
    "activation": "swiglu",
    "norm": "rmsnorm",
    "bias": False,
    "tied_embeddings": False,
    "position_embedding": "rope",
    "dropout": 0.0,
}


def _megatron(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "ffn": 4 * hidden,
        "vocab": 51200,
        "activation": "gelu",
        "norm": "layernorm",
        "bias": True,
        "tied_embeddings": True,
        "position_embedding": "learned",
        "max_positions": 2048,
        "dropout": 0.1,
    }


def _llama3(layers: int, hidden: int, heads: int, ffn: int) -> dict[str, Any]:
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": 8,
        "ffn": ffn,
        "vocab": 128256,
        **_ROPE_SWIGLU,
    }


def _mixtral(layers, hidden, heads, ffn, vocab) -> dict[str, Any]:
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": 8,
        "ffn": ffn,
        "vocab": vocab,
        **_ROPE_SWIGLU,
        "moe": {"experts": 8, "top_k": 2, "expert_ffn": ffn},
    }


MODEL_CATALOG: dict[str, dict[str, Any]] = {
    "gpt3-175b": {
        "layers": 96,
        "hidden": 12288,
        "heads": 96,
        "ffn": 49152,
        "vocab": 50257,
        "activation": "gelu",
        "norm": "layernorm",
        "bias": True,
        "tied_embeddings": True,
        "position_embedding": "learned",
        "max_positions": 2048,
        "dropout": 0.1,
    },
    # Narayanan et al. 2021, Table 1: (params, heads, hidden, layers)
    "megatron-1.7b": _megatron(24, 2304, 24),
    "megatron-3.6b": _megatron(30, 3072, 32),
    "megatron-7.5b": _megatron(36, 4096, 32),
    "megatron-18.4b": _megatron(40, 6144, 48),
    "megatron-39.1b": _megatron(48, 8192, 64),
    "megatron-76.1b": _megatron(60, 10240, 80),
    "megatron-145.6b": _megatron(80, 12288, 96),
    "megatron-310.1b": _megatron(96, 16384, 128),
    "megatron-529.6b": _megatron(105, 20480, 128),
    "megatron-1t": _megatron(128, 25600, 160),
    "llama3-8b": _llama3(32, 4096, 32, 14336),
    "llama3-70b": _llama3(80, 8192, 64, 28672),
    "llama3-405b": _llama3(126, 16384, 128, 53248),
    "mixtral-8x7b": _mixtral(32, 4096, 32, 14336, 32000),
    "mixtral-8x22b": _mixtral(56, 6144, 48, 16384, 32768),
    "deepseek-v3": {
        "layers": 61,
        "hidden": 7168,
        "heads": 128,
        "ffn": 18432,
        "vocab": 129280,
        **_ROPE_SWIGLU,
        "attention": "mla",
        "mla": {
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        },
        "moe": {
            "experts": 256,
            "top_k": 8,
            "expert_ffn": 2048,
            "shared_experts": 1,
            "max_nodes": 4,  # node-limited routing, M = 4 (DeepSeek-V3 report, sec. 2.1.2)
            "first_dense_layers": 3,
        },
    },
    # Qwen3-235B-A22B (Qwen3 technical report, arXiv:2505.09388, Table 2; the released
    # config.json): 94 layers, all MoE; 64 query and 4 KV heads of 128; 128 experts of 1,536,
    # top 8, no shared expert; vocabulary 151,936, untied. ``ffn`` is the config's dense
    # intermediate size, which no layer uses.
    "qwen3-235b-a22b": {
        "layers": 94,
        "hidden": 4096,
        "heads": 64,
        "kv_heads": 4,
        "head_dim": 128,
        "ffn": 12288,
        "vocab": 151936,
        **_ROPE_SWIGLU,
        "moe": {"experts": 128, "top_k": 8, "expert_ffn": 1536},
    },
}


def catalog_key(name: str) -> str:
    """Normalise a model name for lookup: case, spaces and underscores do not matter."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def known_models() -> list[str]:
    return sorted(MODEL_CATALOG)
