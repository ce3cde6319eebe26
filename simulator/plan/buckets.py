"""Gradient buckets (DDP, ZeRO-1/2) and FSDP wrap units (ZeRO-3) of one model chunk.

A key is a layer index or one of the pseudo-layers ``"emb"`` (the embedding) and ``"head"``
(final norm and output layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Key = int | str
ParamsOf = Callable[[Key], tuple[float, float]]  # key -> (dense, expert) parameters per rank


@dataclass(frozen=True)
class Bucket:
    """Gradients synchronised together: the keys they come from (backward order) and the
    dense and expert parameters they hold (per rank, before ZeRO sharding)."""

    keys: tuple[Key, ...]
    dense_params: float
    expert_params: float


def gradient_buckets(keys_backward: Sequence[Key], cap_params: float, params_of: ParamsOf):
    """Buckets in backward order. Like PyTorch DDP, a bucket closes when it holds
    ``cap_params`` parameters' gradients, so a layer larger than a bucket spans several."""
    cap = max(cap_params, 1.0)
    out: list[Bucket] = []
    keys: list[Key] = []
    dense = expert = 0.0
    for key in keys_backward:
        d, e = params_of(key)
        total = d + e
        left = total
        while left > 0:
            if not keys and left >= cap:  # whole buckets of this key alone, made at once
                whole = int(left // cap)
                out.extend([Bucket((key,), d * cap / total, e * cap / total)] * whole)
                left -= whole * cap
                continue
            take = min(left, cap - dense - expert)
            frac = take / total
            keys.append(key)
            dense, expert = dense + d * frac, expert + e * frac
            left -= take
            if dense + expert >= cap * (1 - 1e-12):
                out.append(Bucket(tuple(dict.fromkeys(keys)), dense, expert))
                keys, dense, expert = [], 0.0, 0.0
    if keys:
        out.append(Bucket(tuple(dict.fromkeys(keys)), dense, expert))
    return tuple(out)


def fsdp_units(layers: Sequence[int], unit_layers: int) -> tuple[tuple[int, ...], ...]:
    """Consecutive runs of ``unit_layers`` layers, each gathered and freed as one."""
    return tuple(
        tuple(layers[i : i + unit_layers]) for i in range(0, len(layers), max(unit_layers, 1))
    )
