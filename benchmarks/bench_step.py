"""Wall time and peak memory of simulating one training step (``api.run``).

- Llama 3 405B on 16,384 H100 (TP8 PP16 DP128), symmetric mode: one rank per stage;
- a 1,024-GPU GPT-style job in full mode (every rank simulated) beside symmetric mode.

Each case runs in a fresh subprocess so that peak RSS is its own; the medians of the wall
times over repeats are printed. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

GPT_7B_ON_1024 = [
    "model.name=megatron-7.5b",
    "model.layers=32",
    "parallelism.tp=8",
    "parallelism.pp=4",
    "parallelism.pipeline.schedule=1f1b",
    "parallelism.pipeline.virtual_stages=1",
    "training.global_batch=256",
    "parallelism.recompute=none",
]
CASES = {
    "llama3-405b-16k (symmetric)": ("scenarios/examples/llama3-405b-16k.yaml", []),
    "gpt 7.5B on 1,024 GPUs (symmetric)": (
        "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        GPT_7B_ON_1024,
    ),
    "gpt 7.5B on 1,024 GPUs (full)": (
        "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        [*GPT_7B_ON_1024, "simulation.mode=full"],
    ),
}

CHILD = """
import json, resource, sys, time
from simulator import api
path, overrides = sys.argv[1], sys.argv[2:]
s = api.load(path, overrides)
t = time.perf_counter()
r = api.run(s)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall": wall, "rss": rss, "step": r.summary["step_time_s"],
                  "tasks": r.summary["tasks"], "ranks": r.summary["simulated_ranks"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'case':<38} {'median wall s':>13} {'peak RSS MB':>11} {'tasks':>9} "
        f"{'ranks':>6} {'simulated step s':>16}"
    )
    for name, (path, overrides) in CASES.items():
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, path, *overrides],
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        wall = statistics.median(r["wall"] for r in runs)
        rss = max(r["rss"] for r in runs) / 1e6
        r = runs[0]
        print(
            f"{name:<38} {wall:13.2f} {rss:11.0f} {r['tasks']:9,} {r['ranks']:6} {r['step']:16.3f}"
        )


if __name__ == "__main__":
    main()
