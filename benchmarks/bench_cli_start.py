"""Start-up time of the command line: ``trainsim --version`` and ``trainsim --help``.

Prints the machine, the date and the median of N runs of each, in seconds (target: under 0.3 s).

    python benchmarks/bench_cli_start.py [--runs 11]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

from machine import describe  # benchmarks/machine.py, beside this script


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    print(describe())
    entry = shutil.which("trainsim")
    base = [entry] if entry else [sys.executable, "-m", "simulator"]
    bare = median_seconds([sys.executable, "-c", "pass"], args.runs)
    print(f"python -c pass: {bare:.3f} s")
    for extra in (["--version"], ["--help"], ["run", "--help"]):
        t = median_seconds(base + extra, args.runs)
        print(f"trainsim {' '.join(extra)}: {t:.3f} s (median of {args.runs})")


if __name__ == "__main__":
    main()
