"""``trainsim plan``: how long the search takes, and whether a plan it left out is faster.

For each scenario given:

1. the search as ``trainsim plan`` runs it (default budget, local backend), its wall time,
   also as a multiple of a bare heapq loop of 1M events timed in the same invocation (the
   other speed targets' reference, so that figures taken under different loads compare);
2. with ``--exhaustive``: every candidate of the same space whose step bound is below the
   pick's step time (the others cannot beat it: the bound never exceeds a simulated step,
   ``tests/sweep/test_search.py``), checked by the memory ledger with the same headroom and
   then simulated (cheaply, and in full where the cheap time is within 2% of the pick):
   the best of them against the pick. The search passes when none is faster than the pick
   by more than 1%.

It prints the machine and the date first. Run from the repository root::

    python benchmarks/bench_plan_search.py scenarios/studies/exercise-70b-dense.yaml --exhaustive
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from simulator.sweep.plan_memory import fits
from simulator.sweep.plan_runs import Simulator, simulate_cheaply, simulate_in_full, time_of
from simulator.sweep.runner import make_backend
from simulator.sweep.search import (
    DEFAULT_HEADROOM,
    EXTRAPOLATION_MARGIN,
    SearchOptions,
    search_plans,
    settings_of,
)


def bare_heapq(n: int = 1_000_000) -> float:
    """Seconds for a bare heapq loop popping and pushing ``n`` events over 8 streams."""
    heap = [(0.0, i) for i in range(8)]
    heapq.heapify(heap)
    start = time.perf_counter()
    for _ in range(n):
        t, i = heapq.heappop(heap)
        heapq.heappush(heap, (t + 1e-6, i))
    return time.perf_counter() - start


def exhaustive(result, backend, workers_note: str) -> dict:
    """Simulate every candidate the search did not rank whose bound is below the pick."""
    ok = result.ranked[result.ranked["status"] == "ok"]
    pick = float(ok.iloc[0]["step_time_s"])
    settings = {}
    for k in result.candidates:
        settings.setdefault(k.gpus, None)
    for st in settings_of(result.path, result.base, tuple(result.gpus)):
        settings[st.gpus] = st
    sim = Simulator(backend, None)
    # not yet settled: below the pick by the bound, not simulated, not known not to fit
    open_ = [
        k
        for k in result.candidates
        if k.bound_s < pick
        and k.result is None
        and k.cheap_s is None
        and k.status not in ("oom", "infeasible")
    ]
    scenarios = {}
    fitting = []
    start = time.perf_counter()
    for k in open_:
        status, _, scenario = fits(settings[k.gpus], k.choice, DEFAULT_HEADROOM)
        if status == "fits":
            scenarios[k.key] = scenario
            fitting.append(k)
    memory_s = time.perf_counter() - start
    for i in range(0, len(fitting), 64):
        batch = fitting[i : i + 64]
        simulate_cheaply(batch, scenarios, sim)
        print(f"  {min(i + 64, len(fitting))}/{len(fitting)} simulated", file=sys.stderr)
    close = [
        k
        for k in fitting
        if k.cheap_s is not None
        and k.result is None
        and k.cheap_s <= pick * (1 + EXTRAPOLATION_MARGIN)
    ]
    simulate_in_full(close, scenarios, sim)
    times = [(time_of(k.result) if k.result is not None else k.cheap_s, k) for k in fitting]
    times = [(t, k) for t, k in times if t is not None]
    best_t, best_k = min(times, key=lambda x: x[0]) if times else (math.inf, None)
    return {
        "pick_s": pick,
        "open": len(open_),
        "fit": len(fitting),
        "simulated": len(times),
        "in_full": len(close),
        "memory_s": memory_s,
        "wall_s": time.perf_counter() - start,
        "best_s": best_t,
        "best": best_k.choice.label() if best_k else "",
        "faster_by": pick / best_t - 1 if times else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="+", type=Path)
    parser.add_argument("--exhaustive", action="store_true")
    parser.add_argument("--budget", type=int, default=SearchOptions().budget)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {datetime.datetime.now():%Y-%m-%d %H:%M}"
    )
    heap_s = statistics.median(bare_heapq() for _ in range(3))
    print(f"bare heapq loop, 1M events: {heap_s:.3f} s (median of 3)")
    backend = make_backend("local", args.workers)
    for path in args.scenarios:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            result = search_plans(
                path, SearchOptions(budget=args.budget), backend, Path(out), progress=False
            )
            wall = time.perf_counter() - start
        c = result.counts
        ok = result.ranked[result.ranked["status"] == "ok"]
        pick = ok.iloc[0] if not ok.empty else None
        print(
            f"\n{path}: {c['enumerated']:,} candidates; search {wall:.1f} s "
            f"({wall / heap_s:.0f}x heapq); {c['cheap']} cheap, {c['full']} full, "
            f"{c['bound']:,} by the bound, {c['oom']:,} over memory, "
            f"{c['budget']:,} not reached"
        )
        if pick is None:
            print("  no plan fits")
            continue
        print(
            f"  pick: {result.candidates and _label(pick)}: {pick['step_time_s']:.4f} s, "
            f"MFU {pick['mfu']:.1%}"
        )
        if args.exhaustive:
            ex = exhaustive(result, backend, "")
            verdict = "PASS" if ex["faster_by"] <= 0.01 else "FAIL"
            print(
                f"  exhaustive: {ex['open']:,} candidates bounded below the pick, "
                f"{ex['fit']:,} fit in memory, {ex['simulated']:,} simulated "
                f"({ex['in_full']} in full) in {ex['wall_s']:.0f} s; best {ex['best_s']:.4f} s "
                f"({ex['best']}): the pick is {ex['faster_by']:+.2%} slower -> {verdict}"
            )


def _label(r) -> str:
    text = f"tp{r['tp']} cp{r['cp']} pp{r['pp']} dp{r['dp']}"
    if r["ep"] > 1:
        text += f" ep{r['ep']}"
    text += f" z{r['zero']} {r['schedule']} v{r['virtual_stages']}"
    return text + f" mb{r['micro_batch']} {r['recompute']}"


if __name__ == "__main__":
    main()
