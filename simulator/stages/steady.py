"""The steady-state shortcut's policy: a step that does not repeat is retried with a
longer warm-up or period, then simulated in full."""

from __future__ import annotations

from simulator.engine.steady_state import SHIFT_DIFFERS
from simulator.pipelines import SteadyState
from simulator.plan.plan import Plan


class NotRepeating(Exception):
    """A step built to repeat its steady state did not: its second period is not its first
    shifted (the reason says how). Simulate the full step instead."""


def _steady_state_retries(plan: Plan, tried: SteadyState | None, why: str = "") -> list:
    """After ``tried`` did not repeat, each in turn: a warm-up four times as long, where stages of
    unequal speed take that long to settle (zero-bubble schedules, whose deferred weight
    gradients fill the faster stages' slack over several micro-batches: ZB-H1 on 4 unequal
    stages settles after 12), if that still halves the micro-batches; then twice the period
    and a warm-up up to twice as long, as long as fits in half the micro-batches: a 1F1B
    pipeline whose end stages are a layer lighter can settle into a state that repeats every
    two micro-batches, not every one (the 28.3B zero-bubble model on 32 stages: 27.32 and
    28.12 ms between successive micro-batches on every stage), and needs a warm-up of about
    1.5p to reach it; only when ``why`` (the check's reason) says the periods differ in time,
    not when, say, a task outside the micro-batches ran during them. Those that fit, in that
    order: a 1F1B state of period two on 8 stages and 512 micro-batches does not repeat after
    the longer warm-up either, and the doubled period then costs a sixth of simulating all."""
    if tried is None:
        return []
    m, p, v = plan.micro_batches, plan.scenario.parallelism.pp, plan.chunks_per_stage

    def fits(s: SteadyState | None) -> bool:
        return s is not None and 2 * s.reduced <= m and not plan.schedule.check(p, s.reduced, v)

    candidates = [tried.longer_warm_up()]
    if why.startswith(SHIFT_DIFFERS):
        candidates.append(tried.doubled_period(m))
    return [s for s in candidates if fits(s)]
