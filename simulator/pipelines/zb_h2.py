"""ZB-H2 (Qi et al. 2024, sec. 3.1 and Fig. 4): ``2(p - r) - 1`` forwards before stage ``r``'s
first backward, and weight-gradient passes postponed by ``2r`` backward passes. It drops the
optimizer's synchronisation, so consecutive steps overlap by the ramp and each stage's span is
the step period: (p - 1)(T_F + T_B - 2 T_W) of bubble per stage, about zero; every stage holds
up to ``2p - 1`` micro-batches.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule, f_b_order, with_deferred_w


class ZBH2(PipelineSchedule):
    name = "zb-h2"
    description = "zero-bubble H2: extra warm-up, steps overlap"
    split_backward = True
    overlapping_steps = True

    def steady_period(self, p: int, v: int) -> int | None:
        return 1

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return with_deferred_w(f_b_order(2 * (p - r) - 2, m), m, 2 * r)
