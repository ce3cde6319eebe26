"""GPipe (Huang et al. 2019): every forward, then every backward (each followed by its W).

A stage holds all ``m`` micro-batches' activations; bubble (p - 1)/(m + p - 1) of the step.
"""

from __future__ import annotations

from simulator.pipelines.base import Item, PipelineSchedule


class GPipe(PipelineSchedule):
    name = "gpipe"
    description = "all forwards, then all backwards"

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        out: list[Item] = [("F", 0, j) for j in range(m)]
        for j in range(m):
            out += [("B", 0, j), ("W", 0, j)]
        return out
