"""Goodput as a plan-search objective: a plan's step time over the expected share of wall time
the job trains (ETTR), from the scenario's failure model.

The expected ETTR is Kokolis et al.'s first-order formula (:func:`kokolis_ettr`) with the job's
unplanned failure rate, restart time and checkpoint interval and pause as ``trainsim goodput``
resolves them (:func:`~simulator.failures.model.resolve_job`: Daly's interval unless the
scenario sets one). In this model a checkpoint's size is the whole model state and a restart's
cost grows with the GPU count, neither with the layout: on one GPU count the objective ranks
plans as their step times do; across GPU counts (``trainsim plan --gpus 256,512``) it charges
the larger job its higher failure rate.
"""

from __future__ import annotations

from simulator.failures.adapter import checkpoint_bytes, component_counts
from simulator.failures.model import resolve_job
from simulator.failures.optimum import kokolis_ettr

# ETTR at or below this (a job that never trains between failures) is held here, so that the
# cost stays finite and such plans rank last
MIN_ETTR = 1e-6


def expected_ettr(scenario, step_time_s: float) -> float:
    """The expected ETTR (0-1] of ``scenario`` run at ``step_time_s`` s per step. ValueError
    when the scenario has no ``failures:`` section."""
    if scenario.failures is None:
        raise ValueError("--objective goodput needs a failures: section in the scenario")
    m = resolve_job(scenario, step_time_s, checkpoint_bytes(scenario), component_counts(scenario))
    return max(
        MIN_ETTR, kokolis_ettr(m.unplanned_rate_s, m.restart_s(m.gpus), m.interval_s, m.pause_s)
    )


def goodput_cost(step_time_s: float, scenario) -> float:
    """Wall seconds per step of useful training: the step over the expected ETTR (a cost to
    minimise; tokens of goodput per second are the step's tokens over it)."""
    return step_time_s / expected_ettr(scenario, step_time_s)
