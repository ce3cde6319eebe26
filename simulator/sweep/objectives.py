"""What ``trainsim plan`` minimises: a plan's cost from its step time (``--objective``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.scenario import Scenario


@dataclass(frozen=True)
class Objective:
    """What the search minimises, from a plan's step time: ``cost(step_s, scenario)``,
    non-decreasing in the step time (so a bound on the step bounds the cost)."""

    name: str
    cost: Callable[[float, Scenario], float]
    shown: str  # the column the ranked table shows it in


def step_time_objective() -> Objective:
    return Objective("step-time", lambda t, s: t, "step_time_s")


def tokens_objective() -> Objective:
    """Tokens per second, as the negative cost's inverse: the tokens of a step over its time
    (the same order as the step time at one batch)."""
    return Objective(
        "tokens-per-s",
        lambda t, s: t / (s.training.global_batch * s.training.seq_len),
        "tokens_per_s",
    )


def mfu_objective() -> Objective:
    """MFU: GPU-seconds per step (its inverse's order): across GPU counts, the most efficient."""
    return Objective("mfu", lambda t, s: t * s.num_gpus, "mfu")


OBJECTIVES = {
    "step-time": step_time_objective,
    "tokens-per-s": tokens_objective,
    "mfu": mfu_objective,
}
