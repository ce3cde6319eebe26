"""Flexible interleaved 1F1B: Meta's pipeline schedule for Llama 3 (Llama 3 paper, arXiv
2407.21783, sec. 3.3.2 and Fig. 6; PyTorch's ``ScheduleFlexibleInterleaved1F1B``).

Megatron's interleaved schedule (:mod:`simulator.pipelines.interleaved`) runs micro-batches in
rounds of ``p``, one chunk after another, and so needs ``m`` to be a multiple of ``p``. Meta
relaxed that: the micro-batches go in ``max(1, m // p)`` equal rounds of ``N = m / rounds``
(PyTorch's ``number_of_rounds`` and ``microbatches_per_round``), so a step may hold fewer
micro-batches than stages (``N = m``) or any multiple of the rounds. Stage ``r`` runs ``2 (p - r
- 1) + (v - 1) N`` warm-up forwards, then one forward one backward. With ``m`` a multiple of
``p`` it is Megatron's order exactly.

The round size depends on ``m``: when ``p`` divides ``m`` the rounds are ``p`` long, as
Megatron's, and so are those of any run with a multiple of ``p`` micro-batches, so the steady
state repeats every ``p`` micro-batches; otherwise a run with fewer micro-batches is another
order, and there is no steady state to simulate once and repeat.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule
from simulator.pipelines.interleaved import interleaved_order


def rounds(p: int, m: int) -> int:
    """How many rounds ``m`` micro-batches go in over ``p`` stages: ``max(1, m // p)``."""
    return max(1, m // p)


class FlexibleInterleaved(PipelineSchedule):
    name = "flexible-interleaved"
    description = (
        "Llama 3's interleaved 1F1B (virtual_stages chunks per stage) with any micro-batch "
        "count that splits into max(1, m // pp) equal rounds"
    )

    def chunks_per_stage(self, v: int) -> int:
        return v

    def check(self, p: int, m: int, v: int) -> str | None:
        if v < 2:
            return "the flexible interleaved schedule needs virtual_stages >= 2"
        k = rounds(p, m)
        if m % k:
            return (
                f"flexible interleaved 1F1B runs the {m} micro-batches per replica in "
                f"max(1, m // pp) = {k} rounds, which must be equal: {m} is not a multiple "
                f"of {k}"
            )
        return None

    def steady_period_for(self, p: int, m: int, v: int) -> int | None:
        return p if v > 1 and m % p == 0 else None

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return interleaved_order(p, r, m, v, m // rounds(p, m))
