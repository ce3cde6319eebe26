"""ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", sec. 3.1): 1F1B's forwards and
input-gradients, each stage's weight-gradient passes postponed by ``r`` backward passes to
fill the bubble. With T_F, T_B >= T_W the bubble is (p - 1)(T_F + T_B - T_W), about a third of
1F1B's; every stage holds up to ``p`` micro-batches whose W is due.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule, f_b_order, with_deferred_w


class ZBH1(PipelineSchedule):
    name = "zb-h1"
    description = "zero-bubble H1: 1F1B with weight gradients postponed"
    split_backward = True

    def steady_period(self, p: int, v: int) -> int | None:
        return 1

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return with_deferred_w(f_b_order(p - r - 1, m), m, r)
