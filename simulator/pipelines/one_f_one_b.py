"""1F1B / PipeDream-Flush (Narayanan et al. 2021): ``p - r - 1`` warm-up forwards on stage
``r``, then one forward one backward, then the remaining backwards.

Same bubble as GPipe, (p - 1)/(m + p - 1), but stage ``r`` holds only ``min(p - r, m)``
micro-batches.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule


def one_f_one_b(p: int, r: int, m: int) -> list[Item]:
    warm = min(p - r - 1, m)
    out: list[Item] = [("F", 0, j) for j in range(warm)]
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("B", 0, i), ("W", 0, i)]
    for i in range(m - warm, m):
        out += [("B", 0, i), ("W", 0, i)]
    return out


class OneFOneB(PipelineSchedule):
    name = "1f1b"
    description = "one forward one backward after a warm-up (PipeDream-Flush)"

    def steady_period(self, p: int, v: int) -> int | None:
        return 1

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return one_f_one_b(p, r, m)
