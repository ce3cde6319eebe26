"""Per-module activation recompute, as Megatron-core's ``--recompute-modules`` runs it.

``parallelism.recompute`` is ``none``, ``selective`` (the attention core), ``full`` (the whole
layer from its input), or ``{modules: [...]}``: each named module keeps only its input for the
backward and runs its forward again there, the other modules keep what they keep without
recompute. Internally the policy is the text ``"modules:a,b"`` (hashable, one value through the
memoised costs). The modules, as in Megatron-core's ``TransformerConfig.recompute_modules``:

==================  ===================================  ====================================
module              its ops (forward, run again)         activations it no longer keeps
==================  ===================================  ====================================
``core_attn``       the attention core                   the score matrix (none with flash)
``layernorm``       the two norms                        their outputs (QKV and MLP inputs),
                                                         eager norms' fp32 copies
``mla_up_proj``     MLA's Q and KV up-projections, rope  Q, K and V (MLA models)
``mlp``             the dense MLP                        its hidden activations
``moe_act``         the routed experts' activation       its output (the experts' fc2 input)
``shared_experts``  the shared experts                   their hidden activations
``moe``             router, routed and shared experts    the MoE block's activations
==================  ===================================  ====================================

The all-to-alls a recomputed ``moe`` block would send again are not simulated again (its
compute is).
"""

from __future__ import annotations

from typing import Any

MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
PREFIX = "modules:"


def policy_text(modules) -> str:
    """The recompute policy of ``modules`` (an iterable of names), in :data:`MODULES` order;
    ValueError naming an unknown module or an empty list."""
    names = list(modules)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        raise ValueError(
            f"unknown recompute module(s) {', '.join(map(str, unknown))}; known: "
            f"{', '.join(MODULES)}"
        )
    if not names:
        raise ValueError("recompute: {modules: [...]} needs at least one module")
    return PREFIX + ",".join(m for m in MODULES if m in names)


def modules_of(recompute: str) -> frozenset[str]:
    """The modules a policy recomputes: those listed, or none for the named policies."""
    if recompute.startswith(PREFIX):
        return frozenset(recompute[len(PREFIX) :].split(","))
    return frozenset()


def recompute_policy(value: Any) -> str:
    """The scenario's ``parallelism.recompute`` as the policy text: ``none``, ``selective``,
    ``full``, or ``{modules: [...]}`` (a policy text read back as it is)."""
    if isinstance(value, dict):
        if set(value) != {"modules"} or not isinstance(value["modules"], list):
            raise ValueError("give none, selective, full or {modules: [name, ...]}")
        return policy_text(value["modules"])
    if isinstance(value, str) and value.startswith(PREFIX):
        return policy_text(value[len(PREFIX) :].split(","))
    if value not in ("none", "selective", "full"):
        raise ValueError(f"{value!r}: give none, selective, full or {{modules: [name, ...]}}")
    return value
