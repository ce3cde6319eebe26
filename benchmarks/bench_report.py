"""Wall time of ``trainsim run SCENARIO`` with and without ``--out`` (the run report).

Prints the machine, the date, the median of N alternating runs of each, and their ratio
(target: at most 1.5x on the Llama 3 405B 16K-GPU example).

    python benchmarks/bench_report.py [scenarios/examples/llama3-405b-16k.yaml] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from machine import describe  # benchmarks/machine.py, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/examples/llama3-405b-16k.yaml")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(describe())
    entry = shutil.which("trainsim")
    base = ([entry] if entry else [sys.executable, "-m", "simulator"]) + ["run", args.scenario]
    plain, out = [], []
    for _ in range(args.runs):  # alternating, so a change in machine load hits both alike
        for times, extra in ((plain, []), (out, ["--out"])):
            with tempfile.TemporaryDirectory() as tmp:
                argv = base + ([*extra, tmp] if extra else [])
                start = time.perf_counter()
                subprocess.run(argv, check=True, capture_output=True)
                times.append(time.perf_counter() - start)
    p, o = statistics.median(plain), statistics.median(out)
    print(f"{args.scenario}: run {p:.2f} s, run --out {o:.2f} s (medians of {args.runs}), "
          f"ratio {o / p:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
