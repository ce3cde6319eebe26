"""Exact parameter counts of a transformer, in total, per token (MoE) and per rank.

>>> from simulator.scenario.schema import ModelConfig
>>> round(count_params(ModelConfig(name="llama3-8b")).total / 1e9, 2)
8.03
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.model.layers import layer_linears, layer_norm_params, norm_params
from simulator.scenario.schema import ModelConfig


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one layer: ``dense`` (sharded over DP) and ``expert`` (over expert-DP)."""

    dense: int
    expert: int
    active: int  # what one token uses: dense plus top_k of the routed experts


@dataclass(frozen=True)
class ParamCounts:
    """Unsharded parameter counts by part of the model."""

    embedding: int
    positions: int
    layers: tuple[LayerParams, ...]
    final_norm: int
    output: int  # 0 when tied to the embedding

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.positions
            + self.final_norm
            + self.output
            + sum(p.dense + p.expert for p in self.layers)
        )

    @property
    def active(self) -> int:
        """Parameters used per token (MoE counts top_k routed experts)."""
        return (
            self.embedding
            + self.positions
            + self.final_norm
            + self.output
            + sum(p.active for p in self.layers)
        )


def layer_params(m: ModelConfig, layer: int) -> LayerParams:
    dense = layer_norm_params(m)
    expert = 0
    for lin in layer_linears(m, layer):
        if lin.group == "expert":
            expert += lin.params
        else:
            dense += lin.params
    active = dense + (expert * m.moe.top_k // m.moe.experts if expert else 0)
    return LayerParams(dense=dense, expert=expert, active=active)


def count_params(m: ModelConfig) -> ParamCounts:
    """Count every parameter of ``m``: embeddings, layers, final norm, output layer."""
    return ParamCounts(
        embedding=m.vocab * m.hidden,
        positions=(m.max_positions or 0) * m.hidden if m.position_embedding == "learned" else 0,
        layers=tuple(layer_params(m, i) for i in range(m.layers)),
        final_norm=norm_params(m, m.hidden),
        output=0 if m.tied_embeddings else m.vocab * m.hidden,
    )


def layer_params_per_rank(
    m: ModelConfig, layer: int, tp: int, ep: int = 1, expert_tp: int | None = None
) -> tuple[float, float]:
    """(dense, expert) parameters of layer ``layer`` that one rank holds under TP and EP."""
    etp = expert_tp or tp
    dense = float(layer_norm_params(m))
    expert = 0.0
    for lin in layer_linears(m, layer):
        if lin.group == "expert":
            expert += lin.params_per_rank(etp, ep)
        else:
            dense += lin.params_per_rank(tp)
    return dense, expert


def embedding_params_per_rank(m: ModelConfig, tp: int) -> float:
    """Vocabulary-parallel word embedding (split over tp) plus replicated learned positions."""
    positions = (m.max_positions or 0) * m.hidden if m.position_embedding == "learned" else 0
    return m.vocab * m.hidden / tp + positions


def head_params_per_rank(m: ModelConfig, tp: int, pipeline_stages: int) -> float:
    """Final norm plus output layer on the last stage.

    A tied output layer shares the embedding's matrix when one stage holds both; across
    pipeline stages Megatron keeps a second copy on the last stage (and all-reduces their
    gradients), which this counts.
    """
    has_matrix = not m.tied_embeddings or pipeline_stages > 1
    return norm_params(m, m.hidden) + (m.vocab * m.hidden / tp if has_matrix else 0.0)
