"""Water-filling in plain Python against numpy, by size: where ``SMALL_COMPONENT`` sits.

Random instances shaped like the engine's components (classes of 2-6 links each, counts of
copies 1-64, links shared by a few classes) with a growing number of entries (class x link).
Prints the median microseconds per call of :func:`max_min_rates_lists` and of
:func:`max_min_rates` (arrays built from the lists inside the timing, as the engine does).
Run from the repository root under the shared CPU lock::

    flock /tmp/trainsim-cpu.lock python benchmarks/bench_maxmin.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.engine.maxmin import max_min_rates, max_min_rates_lists  # noqa: E402


def instance(entries: int, rng: np.random.Generator):
    n_links = max(8, entries // 3)
    links, counts, total = [], [], 0
    while total < entries:
        k = int(rng.integers(2, 7))
        links.append(rng.choice(n_links, size=k, replace=False).tolist())
        counts.append(rng.choice([1.0, 2.0, 8.0, 64.0], size=k).tolist())
        total += k
    capacity = rng.uniform(1e10, 1e11, size=n_links)
    return links, counts, capacity


def with_numpy(links, counts, capacity):
    sizes = [len(x) for x in links]
    return max_min_rates(
        np.repeat(np.arange(len(links)), sizes),
        np.array([e for x in links for e in x]),
        np.array([c for x in counts for c in x]),
        len(links),
        capacity,
    )


def per_call_us(fn, args, repeats: int = 7) -> float:
    loops = 50
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn(*args)
        times.append((time.perf_counter() - t0) / loops)
    return statistics.median(times) * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'entries':>8} {'python us':>10} {'numpy us':>10}")
    for entries in (8, 32, 64, 128, 256, 512, 1024, 2048):
        inst = instance(entries, rng)
        assert np.allclose(max_min_rates_lists(*inst), with_numpy(*inst), rtol=1e-12)
        py = per_call_us(max_min_rates_lists, inst)
        vec = per_call_us(with_numpy, inst)
        print(f"{entries:8d} {py:10.1f} {vec:10.1f}")


if __name__ == "__main__":
    main()
