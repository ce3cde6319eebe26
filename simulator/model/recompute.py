"""Which of a layer's ops a per-module recompute policy runs again in the backward (the
policy and its modules: :mod:`simulator.scenario.recompute`)."""

from __future__ import annotations

from simulator.scenario.recompute import modules_of

__all__ = ["modules_of", "recomputed_op"]


def recomputed_op(name: str, modules: frozenset[str], moe_layer: bool) -> bool:
    """Whether the op ``name`` (:func:`simulator.model.ops.layer_ops`) runs again in the
    backward under ``modules``."""
    if "core_attn" in modules and name == "attention":
        return True
    if "layernorm" in modules and name in ("attention_norm", "mlp_norm"):
        return True
    if "mla_up_proj" in modules and name in ("q_up", "kv_up", "rope"):
        return True
    if "mlp" in modules and not moe_layer and name.startswith("mlp_"):
        return name not in ("mlp_norm", "mlp_residual")
    if not moe_layer:
        return False
    if "moe" in modules and name.startswith(("router", "expert_", "shared_expert_")):
        return True
    if "shared_experts" in modules and name.startswith("shared_expert_"):
        return True
    if "moe_act" in modules and name.startswith("expert_"):
        return name not in ("expert_up", "expert_down")
    return False
