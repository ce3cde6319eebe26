"""Sweep speed: the machinery's own cost per point, Ray's overhead per point, and the time of a
1,000-point sweep of a 1,024-GPU scenario on the local backend (extrapolated from a few points).

    python benchmarks/bench_sweep.py                  # all three
    python benchmarks/bench_sweep.py --skip-ray       # without Ray
    python benchmarks/bench_sweep.py --big-points 4   # points of the larger of the two sweeps
    python benchmarks/bench_sweep.py --skip-ray --skip-big --full-fabric  # the real 1,000

Run it under the shared CPU lock (flock /tmp/trainsim-cpu.lock ...). The 1,000-point case runs
one of two studies (``--big-study``):

- ``seed`` (default): points differ only in ``seed`` (a field the step simulation does not
  read), so every point has its own scenario hash and costs the same, the whole build and
  simulation: the measured differences are the machinery's, not the simulator's.
- ``fabric``: a topology study, the leaves' oversubscription from 1.25:1 to 6:1 - points that
  simulate different steps (the data-parallel rings cross the leaves' uplinks) on a task
  graph a worker builds once (:class:`simulator.api.StepCache`: the build does not read
  oversubscription).

``--full-fabric`` runs the issue's case itself, not extrapolated: the fabric study with 1,000
points (oversubscription 1.25:1 to 6:1 in 1,000 equal steps, 5 decimals), on the local pool;
about 9-10 minutes on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's simulator

from simulator.sweep.backends import cpu_count  # noqa: E402
from simulator.sweep.runner import make_backend, resolve_points, run_sweep  # noqa: E402
from simulator.sweep.spec import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = """\
name: bench-tiny
model: {name: llama3-8b, layers: 4}
cluster:
  accelerator: H100-SXM
  topology: {include: topologies/dgx-h100.yaml}
parallelism: {tp: 2, pp: 2, zero: 1}
training: {global_batch: 8, micro_batch: 1, seq_len: 1024}
"""
# A 1,024-GPU scenario: GPT-3 175B on 128 DGX A100 (scenarios/examples), TP 8 x PP 16 x DP 8.
BIG = ROOT / "scenarios" / "examples" / "gpt3-175b-dgx-a100.yaml"


# Leaf uplink oversubscription of the fabric study (downlink:uplink), then 1:1 above; not
# 1:1 (the base scenario's own fabric: its point would be the base, simulated once for both).
OVERSUBSCRIPTION = [1.25, 1.5, 2, 2.5, 3, 4, 5, 6]


def _spec(folder: Path, base: str | Path, points: int, offset: int = 0, study="seed") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(base, str):
        (folder / "base.yaml").write_text(base)
        base = folder / "base.yaml"
    spec = folder / "spec.yaml"
    if study == "fabric":
        ratios = [[r, 1] for r in OVERSUBSCRIPTION[:points]]
        spec.write_text(f"base: {base}\ngrid:\n  cluster.topology.oversubscription: {ratios}\n")
        return spec
    seeds = list(range(offset + 1, offset + points + 1))
    spec.write_text(f"base: {base}\ngrid:\n  seed: {seeds}\n")
    return spec


def _timed_sweep(spec_path: Path, backend) -> tuple[float, object]:
    spec = load_spec(spec_path)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        frame = run_sweep(spec, Path(out), backend, progress=False)
        return time.perf_counter() - start, frame


def machinery(points: int) -> None:
    """Resolving, hashing and storing points, without simulating (all already stored)."""
    with tempfile.TemporaryDirectory() as d:
        spec_path = _spec(Path(d), TINY, points)
        spec = load_spec(spec_path)
        start = time.perf_counter()
        resolve_points(spec, [(p.index, p.values) for p in spec.points()])
        resolve = (time.perf_counter() - start) / points
        out = Path(d) / "out"
        run_sweep(spec, out, make_backend("local", 1), progress=False)
        start = time.perf_counter()
        run_sweep(spec, out, make_backend("local", 1), progress=False)  # resumes: no simulation
        resumed = (time.perf_counter() - start) / points
    print(
        f"machinery: resolve + hash {resolve * 1e3:.2f} ms/point; a resumed sweep "
        f"(resolve, read store, write store) {resumed * 1e3:.2f} ms/point, over {points} points"
    )


def ray_overhead(points: int, repeats: int) -> None:
    """Per-point wall time on a 1-CPU local Ray minus in-process, for tiny points: on a fresh
    worker (which starts and imports the simulator once) and on a warm one."""
    import ray as ray_mod

    import simulator

    package = str(Path(simulator.__file__).parent)
    with tempfile.TemporaryDirectory() as d:
        first = _spec(Path(d) / "a", TINY, points)
        second = _spec(Path(d) / "b", TINY, points, offset=10_000)  # new hashes
        local, cold, warm = [], [], []
        for _ in range(repeats):
            local.append(_timed_sweep(first, make_backend("local", 1))[0])
            start = time.perf_counter()
            ray_mod.init(
                num_cpus=1,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"py_modules": [package]},
            )
            init = time.perf_counter() - start
            cold.append(_timed_sweep(first, make_backend("ray", 1))[0])
            warm.append(_timed_sweep(second, make_backend("ray", 1))[0])
            ray_mod.shutdown()
        n = points + 1  # the base scenario runs too
        lo, co, wa = (statistics.median(x) / n * 1e3 for x in (local, cold, warm))
        print(
            f"ray: {points} tiny points, in-process {lo:.1f} ms/point; Ray (1 CPU) on a warm "
            f"worker {wa:.1f} ms/point = overhead {wa - lo:.1f} ms/point; first sweep on a fresh "
            f"worker {co:.1f} ms/point (median of {repeats}); ray.init itself {init:.1f} s"
        )


def big_sweep(points: int, workers: int | None, study: str = "seed") -> None:
    """Seconds per point of the 1,024-GPU scenario on the local pool; extrapolate to 1,000.

    The sweep is run twice, with ``points // 2`` and ``points`` points (fresh stores): the
    difference over the extra points is the marginal cost of a point, without the fixed cost
    both runs pay once (starting the pool, importing, each worker's first build of the step);
    1,000 points take the fixed cost plus 1,000 marginal ones. The plain average over the
    larger run (fixed cost included) is printed beside it."""
    if study == "fabric" and points > len(OVERSUBSCRIPTION):
        raise SystemExit(f"--big-study fabric has {len(OVERSUBSCRIPTION)} points at most")
    n = min(workers or cpu_count(), cpu_count())
    # both sweeps at least one point per worker more than a round, or the smaller one's
    # points all run at once and the difference says nothing of a point's cost (review)
    small = max(points // 2, n + 1)
    if small >= points:
        raise SystemExit(f"--big-points must be at least {2 * (n + 1)} on {n} workers")
    timed = {}
    for size in (small, points):
        with tempfile.TemporaryDirectory() as d:
            spec_path = _spec(Path(d), BIG, size, study=study)
            timed[size] = _timed_sweep(spec_path, make_backend("local", n))
    t, frame = timed[points]
    marginal = (t - timed[small][0]) / (points - small)
    fixed = t - (points + 1) * marginal  # +1: the base scenario is simulated too
    ran = frame[frame["point"] >= 0]
    sim = ran["sim_time_s"].median()
    per_point = t / (points + 1)
    steps = ran["step_time_s"]
    print(
        f"1,024-GPU {study} sweep ({BIG.name}) on {n} workers: {small} and {points} points "
        f"(+ base) in {timed[small][0]:.1f} and {t:.1f} s = {marginal:.2f} s per extra point "
        f"wall, {fixed:.1f} s fixed (median simulation {sim:.2f} s/point per worker); 1,000 "
        f"points extrapolate to {(fixed + 1001 * marginal) / 60:.1f} min (the plain average, "
        f"{per_point:.2f} s/point with the fixed cost, would say "
        f"{1000 * per_point / 60:.1f} min); simulated steps {steps.min():.3f}-{steps.max():.3f} s"
    )


def full_fabric(workers: int | None) -> None:
    """The 1,000-point fabric study, timed whole (wall s, and each point's simulation)."""
    n = min(workers or cpu_count(), cpu_count())
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "spec.yaml"
        ratios = [[round(1.25 + k * 4.75 / 999, 5), 1] for k in range(1000)]
        spec.write_text(f"base: {BIG}\ngrid:\n  cluster.topology.oversubscription: {ratios}\n")
        t, frame = _timed_sweep(spec, make_backend("local", n))
    ran = frame[frame["point"] >= 0]
    print(
        f"1,024-GPU fabric study, 1,000 points (+ base) on {n} workers: {t:.0f} s = "
        f"{t / 60:.1f} min; simulation per point per worker mean {ran['sim_time_s'].mean():.3f}"
        f" s, median {ran['sim_time_s'].median():.3f} s; statuses "
        f"{frame['status'].value_counts().to_dict()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machinery-points", type=int, default=200)
    parser.add_argument("--ray-points", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big-points", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--big-study", choices=["seed", "fabric"], default="seed")
    parser.add_argument("--full-fabric", action="store_true", help="the real 1,000 points")
    args = parser.parse_args()
    machinery(args.machinery_points)
    if not args.skip_ray:
        ray_overhead(args.ray_points, args.repeats)
    if not args.skip_big:
        big_sweep(args.big_points, args.workers, args.big_study)
    if args.full_fabric:
        full_fabric(args.workers)


if __name__ == "__main__":
    main()
