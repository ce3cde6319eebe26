"""The speed targets: wall time and peak RSS of whole training steps.

Cases (each run in a fresh subprocess, so that its peak RSS is its own):

- ``llama405b``: Llama 3 405B on 16,384 H100 (``scenarios/examples/llama3-405b-16k.yaml``);
  target 5 s or less, peak RSS under 1 GB.
- ``gpt175b``: GPT-3 175B on 1,024 A100 (``scenarios/examples/gpt3-175b-dgx-a100.yaml``);
  target 3 s or less.
- ``full1024``: a 1,024-GPU GPT 7.5B job (TP 8, PP 4, DP 32) in full mode, every rank
  simulated; target 20 s or less.
- ``dp8`` / ``dp1024``: the same 7.5B model (TP 8, PP 2, 8 micro-batches per replica) at DP 8
  (128 GPUs) and DP 1,024 (16,384 GPUs); target: within 1.5x of each other.

``--pairs N`` runs dp8 and dp1024 back to back N times and prints the median of the N
ratios (the flatness target's figure; medians of cases run minutes apart carry the load's
drift). Each case prints the median over ``--repeats`` of: the whole ``api.run`` (``run s``: step
builder + engine + metrics) and the topology build (``topo s``, done once before, outside
``run s``). A bare heapq loop of 1M events is timed in the parent in the same invocation, and
every wall time is also shown as a multiple of it (``x heapq``), so numbers taken under
different machine load stay comparable. Run from the repository root, one case at a time
under the shared CPU lock::

    flock /tmp/trainsim-cpu.lock python benchmarks/bench_targets.py llama405b --repeats 3
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import subprocess
import sys
import time

GPT_7B = [
    "model.name=megatron-7.5b",
    "model.layers=32",
    "parallelism.tp=8",
    "parallelism.pipeline.schedule=1f1b",
    "parallelism.pipeline.virtual_stages=1",
    "parallelism.recompute=none",
]


def _dp_case(dp: int) -> list[str]:
    """GPT 7.5B at TP 8, PP 2 and data-parallel degree ``dp`` (8 micro-batches per replica)."""
    gpus = 8 * 2 * dp
    return [
        *GPT_7B,
        "parallelism.pp=2",
        f"cluster.gpus={gpus}",
        f"cluster.topology.nodes={gpus // 8}",
        f"training.global_batch={8 * dp}",
    ]


GPT_SCENARIO = "scenarios/examples/gpt3-175b-dgx-a100.yaml"
CASES: dict[str, tuple[str, list[str]]] = {
    "llama405b": ("scenarios/examples/llama3-405b-16k.yaml", []),
    "gpt175b": (GPT_SCENARIO, []),
    "full1024": (
        GPT_SCENARIO,
        [*GPT_7B, "parallelism.pp=4", "training.global_batch=256", "simulation.mode=full"],
    ),
    "dp8": (GPT_SCENARIO, _dp_case(8)),
    "dp1024": (GPT_SCENARIO, _dp_case(1024)),
}

CHILD = """
import json, resource, statistics, sys, time
from simulator import api
again, path, overrides = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
s = api.load(path, overrides)
t = time.perf_counter()
topo = api.build_topology(s.cluster)
t_topo = time.perf_counter() - t
t = time.perf_counter()
r = api.run(s, topo)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
later = []
for _ in range(again):
    t = time.perf_counter()
    api.run(s, topo)
    later.append(time.perf_counter() - t)
print(json.dumps({"wall": wall, "again": statistics.median(later) if later else None,
                  "topo": t_topo, "rss": rss, "step": r.summary["step_time_s"],
                  "tasks": r.summary["tasks"], "ranks": r.summary["simulated_ranks"]}))
"""


def bare_heapq(n: int = 1_000_000) -> float:
    """Seconds for a bare heapq loop popping and pushing ``n`` events over 8 streams."""
    t0 = time.perf_counter()
    heap = [(0.0, i) for i in range(8)]
    heapq.heapify(heap)
    for _ in range(n):
        t, i = heapq.heappop(heap)
        heapq.heappush(heap, (t + 1e-6, i))
    return time.perf_counter() - t0


def run_case(name: str, repeats: int, again: int = 0) -> dict:
    """``repeats`` fresh processes each running case ``name`` once (and ``again`` more times
    in the same process, as a sweep's worker would): medians over the processes."""
    path, overrides = CASES[name]
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(again), path, *overrides],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = runs[0]
    return {
        "case": name,
        "run_s": statistics.median(r["wall"] for r in runs),
        "runs_s": [round(r["wall"], 3) for r in runs],
        "again_s": statistics.median(r["again"] for r in runs) if again else None,
        "topo_s": statistics.median(r["topo"] for r in runs),
        "rss_MB": max(r["rss"] for r in runs) / 1e6,
        "tasks": first["tasks"],
        "ranks": first["ranks"],
        "step_s": first["step"],
    }


def run_command(name: str) -> float:
    """Wall seconds of one whole ``trainsim run`` of case ``name`` as a user types it
    (``python -m simulator run PATH --set ... --format json``): the imports, the scenario's
    loading, the topology's build (once: the warnings and the run share it), the step and its
    output."""
    path, overrides = CASES[name]
    sets = [arg for o in overrides for arg in ("--set", o)]
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "simulator", "run", path, *sets, "--format", "json"],
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON line per case")
    parser.add_argument(
        "--again",
        type=int,
        default=0,
        help="also run each case this many more times in its process: the median of those "
        "(what a sweep's worker pays per run, one-time costs such as the calibration fit paid)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="also run dp8 and dp1024 back to back this many times: the median ratio of "
        "first runs and of later runs (each process runs its case --again times more, at least 3)",
    )
    parser.add_argument(
        "--command",
        action="store_true",
        help="time the whole `trainsim run` command of each case instead (fresh process, "
        "imports and topology build included: what a user waits for); with --pairs, the "
        "dp1024 / dp8 ratio of whole commands run back to back",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="also write the table to docs/data/speed.csv, with this machine and date in "
        "docs/data/speed.txt (docs/speed.md shows it)",
    )
    args = parser.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    args.cases = args.cases or list(CASES)
    heap_s = statistics.median(bare_heapq() for _ in range(3))
    if args.command:
        commands(args.cases, args.repeats, args.pairs, heap_s, args.json)
        return
    if not args.json:
        print(f"bare heapq loop, 1M events: {heap_s:.3f} s (median of 3)")
        print(
            f"{'case':<10} {'run s':>7} {'again s':>7} {'x heapq':>8} {'topo s':>7} {'RSS MB':>7} "
            f"{'tasks':>8} {'ranks':>6} {'simulated step s':>16}  runs"
        )
    rows = {}
    for name in args.cases:
        row = rows[name] = run_case(name, args.repeats, args.again)
        row["heapq_s"] = heap_s
        if args.docs:
            write_docs_row(name, row, first=name == args.cases[0], repeats=args.repeats)
        if args.json:
            print(json.dumps(row))
            continue
        print(
            f"{name:<10} {row['run_s']:7.2f} {row['again_s'] or math.nan:7.3f} "
            f"{row['run_s'] / heap_s:8.1f} "
            f"{row['topo_s']:7.2f} "
            f"{row['rss_MB']:7.0f} {row['tasks']:8,} {row['ranks']:6} {row['step_s']:16.6f}  "
            f"{row['runs_s']}",
            flush=True,
        )
    if args.pairs:
        pairs = dp_pairs(args.pairs, max(args.again, 3))
        summary = {"case": "dp1024/dp8"}
        for label, key in (("first run", "run_s"), ("runs again", "again_s")):
            ratios = [b[key] / a[key] for a, b in pairs]
            summary[key] = {
                "pairs": [[round(a[key], 4), round(b[key], 4)] for a, b in pairs],
                "median_ratio": statistics.median(ratios),
            }
            if not args.json:
                each = ", ".join(f"{r:.2f}" for r in ratios)
                print(
                    f"dp1024 / dp8, {label} ({key}), {len(pairs)} pairs run back to back: "
                    f"median {statistics.median(ratios):.2f} (per pair {each})"
                )
        if args.json:
            print(json.dumps(summary))


def write_docs_row(name: str, row: dict, first: bool, repeats: int) -> None:
    """Append ``name``'s row to docs/data/speed.csv (a new file for the first case) and
    write the machine, the date and the command to docs/data/speed.txt."""
    from pathlib import Path

    from machine import describe  # benchmarks/machine.py, beside this script

    data = Path(__file__).resolve().parent.parent / "docs" / "data"
    data.mkdir(parents=True, exist_ok=True)
    columns = ["case", "run_s", "x_heapq", "rss_MB", "tasks", "ranks", "step_s"]
    values = [name, f"{row['run_s']:.3f}", f"{row['run_s'] / row['heapq_s']:.1f}",
              f"{row['rss_MB']:.0f}", str(row["tasks"]), str(row["ranks"]),
              f"{row['step_s']:.6f}"]  # fmt: skip
    with open(data / "speed.csv", "w" if first else "a") as out:
        if first:
            out.write(",".join(columns) + "\n")
        out.write(",".join(values) + "\n")
    if first:
        (data / "speed.txt").write_text(
            f"{describe().lstrip('# ')}; bare heapq loop of 1M events {row['heapq_s']:.3f} s; "
            f"medians of {repeats}: `python benchmarks/bench_targets.py --repeats {repeats} "
            "--docs`\n"
        )


def commands(cases: list[str], repeats: int, pairs: int, heap_s: float, as_json: bool) -> None:
    """Print the median wall time of ``repeats`` whole ``trainsim run`` commands per case
    (:func:`run_command`) and, with ``pairs``, the median dp1024 / dp8 ratio of commands
    run back to back."""
    if not as_json:
        print(f"bare heapq loop, 1M events: {heap_s:.3f} s (median of 3)")
        print(f"{'case':<10} {'command s':>9} {'x heapq':>8}  runs")
    for name in cases:
        runs = [run_command(name) for _ in range(repeats)]
        median = statistics.median(runs)
        if as_json:
            row = {"case": name, "command_s": median, "runs_s": runs, "heapq_s": heap_s}
            print(json.dumps(row))
        else:
            each = [round(r, 2) for r in runs]
            print(f"{name:<10} {median:9.2f} {median / heap_s:8.1f}  {each}", flush=True)
    if pairs:
        ratios = [run_command("dp1024") / run_command("dp8") for _ in range(pairs)]
        if as_json:
            print(json.dumps({"case": "dp1024/dp8", "command_ratio": statistics.median(ratios)}))
        else:
            each = ", ".join(f"{r:.2f}" for r in ratios)
            print(
                f"dp1024 / dp8, whole commands, {pairs} pairs run back to back: median "
                f"{statistics.median(ratios):.2f} (per pair {each})"
            )


def dp_pairs(n: int, again: int) -> list[tuple[dict, dict]]:
    """``n`` (dp8, dp1024) cases (:func:`run_case`, one process each, each case run ``again``
    more times in its process), each pair run back to back, so that the ratio of a pair is
    taken under one machine load: on a shared machine runs of one case spread by 30% over
    minutes, which the ratio of two medians taken apart would carry. The first run of a
    process pays one-time costs that do not depend on the data-parallel degree (the
    compute model's calibration fit, ~0.14 s); the runs after it (``again_s``) are what each
    further run of a sweep costs."""
    return [(run_case("dp8", 1, again), run_case("dp1024", 1, again)) for _ in range(n)]


if __name__ == "__main__":
    main()
