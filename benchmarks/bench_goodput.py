"""Wall time of ``trainsim goodput`` on the Llama 3 405B 16K-GPU failures example.

The issue's target: 100 seeds of 54 days in 10 s or less. Printed separately: the one step
simulation that gives the step time (run once per command), the Monte Carlo of the job over
days (median of repeats), and a 12-point checkpoint-interval sweep. Run from the repository
root: ``python benchmarks/bench_goodput.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from simulator import api
from simulator.failures import adapter
from simulator.failures.commands import parse_interval_range
from simulator.failures.montecarlo import simulate_seeds, sweep_intervals

EXAMPLE = "scenarios/examples/llama3-405b-16k-failures.yaml"


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--days", type=float, default=54.0)
    args = parser.parse_args()
    scenario = api.load(EXAMPLE)
    step_s, inputs = _timed(lambda: adapter.step_inputs(scenario))
    model = adapter.job_model(scenario, inputs)
    walls, result = [], None
    for _ in range(args.repeats):
        wall, result = _timed(lambda: simulate_seeds(model, args.days, args.seeds))
        walls.append(wall)
    events = int(result.per_seed["interruptions"].sum())
    sweep_s, _ = _timed(
        lambda: sweep_intervals(model, parse_interval_range("2min:2h"), args.days, args.seeds)
    )
    print(f"{EXAMPLE}")
    print(f"  step simulation (once per command)   {step_s:8.2f} s")
    print(
        f"  {args.seeds} seeds x {args.days:g} days (median of {args.repeats})"
        f"   {statistics.median(walls):8.2f} s  ({events:,} interruptions)"
    )
    print(f"  12-interval sweep, {args.seeds} seeds each   {sweep_s:8.2f} s")


if __name__ == "__main__":
    main()
