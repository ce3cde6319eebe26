"""Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2; Megatron-LM's order).

Each stage holds ``v`` model chunks, stage ``r`` chunks ``r, r + p, ...``. Virtual micro-batch
``k`` runs local chunk ``(k mod pv) // p`` forward (``v - 1 -`` that backward), after
``2 (p - r - 1) + (v - 1) p`` warm-up forwards. Bubble (p - 1)/(v m + p - 1). With ``v`` = 1 it
is 1F1B. Megatron needs the micro-batches to be a multiple of ``p``.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule
from simulator.pipelines.one_f_one_b import one_f_one_b


class Interleaved(PipelineSchedule):
    name = "interleaved"
    description = "Megatron-LM interleaved 1F1B with virtual_stages chunks per stage"

    def chunks_per_stage(self, v: int) -> int:
        return v

    def steady_period(self, p: int, v: int) -> int | None:
        """Virtual micro-batches go round the ``p v`` chunks in groups of ``p``: the order
        repeats every ``p`` micro-batches (every one with ``v`` = 1, which is 1F1B)."""
        return p if v > 1 else 1

    def check(self, p: int, m: int, v: int) -> str | None:
        if v < 2:
            return "the interleaved schedule needs virtual_stages >= 2"
        if p > 1 and m % p:
            return (
                f"interleaved 1F1B needs the {m} micro-batches per replica to be a multiple "
                f"of pp = {p}"
            )
        return None

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        if v == 1:
            return one_f_one_b(p, r, m)
        return interleaved_order(p, r, m, v, p)


def interleaved_order(p: int, r: int, m: int, v: int, n: int) -> list[Item]:
    """Stage ``r``'s interleaved 1F1B order with micro-batches in rounds of ``n`` (Megatron:
    ``n = p``): each chunk runs ``n`` consecutive micro-batches before the next chunk takes
    over, after ``2 (p - r - 1) + (v - 1) n`` warm-up forwards; ``m`` a multiple of ``n``."""
    total = m * v

    def chunk_mb(k: int, forward: bool) -> tuple[int, int]:
        c = (k % (n * v)) // n
        mb = (k // (n * v)) * n + k % n
        return (c if forward else v - 1 - c), mb

    warm = min(2 * (p - r - 1) + (v - 1) * n, total)
    out: list[Item] = [("F", *chunk_mb(k, True)) for k in range(warm)]
    for i in range(total - warm):
        out.append(("F", *chunk_mb(warm + i, True)))
        c, mb = chunk_mb(i, False)
        out += [("B", c, mb), ("W", c, mb)]
    for i in range(total - warm, total):
        c, mb = chunk_mb(i, False)
        out += [("B", c, mb), ("W", c, mb)]
    return out
