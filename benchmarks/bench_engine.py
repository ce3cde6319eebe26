"""Engine speed: events per second beside a bare heapq loop, and collectives at scale.

1. Event rate: a TaskGraph of N chained compute tasks on 8 ranks (one SimPy timeout each),
   against a bare heapq loop popping N events, in the same process.
2. Flow events: 8-rank ring all-reduces issued back to back (network re-rating per event).
3. One ring and one hierarchical all-reduce over 16,384 GPUs of the Llama 3 cluster, and the
   time to build its topology.
4. 1,024 concurrent 8-GPU all-reduces (one representative group, 1,023 copies) on a
   1,024-node fat-tree.
5. Routing alone: a 1,024-rank tree all-reduce and its 15 copies on 16,384 GPUs (the dp1024
   case of bench_targets.py: 65K connections), its flow classes built from scratch.

Prints medians over repeats (wall seconds); run from the repository root.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator import api  # noqa: E402
from simulator.collectives import plan_collective  # noqa: E402
from simulator.engine import NetworkModel, run_taskgraph, time_collective  # noqa: E402
from simulator.schedule import CommSpec, Task, TaskGraph  # noqa: E402
from simulator.topology.nvswitch import nvswitch_topology  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bare_heapq(n: int) -> None:
    heap = [(0.0, i) for i in range(8)]
    heapq.heapify(heap)
    done = 0
    while done < n:
        t, i = heapq.heappop(heap)
        done += 1
        heapq.heappush(heap, (t + 1e-6, i))


def compute_chain(n: int) -> TaskGraph:
    g = TaskGraph()
    for k in range(n):
        g.add(Task(k % 8, "compute", "compute", "t", 1e-6))
    return g


def comm_chain(n: int) -> TaskGraph:
    g = TaskGraph()
    for k in range(n):
        spec = CommSpec("all_reduce", tuple(range(8)), 1e6, instance=k)
        for r in range(8):
            g.add(Task(r, "comm", "comm", "ar", comm=spec))
    return g


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 3 if args.quick else 5
    n = 100_000 if args.quick else 200_000
    node = nvswitch_topology(8, 450e9, efficiency=0.8)
    model = NetworkModel(node.graph, node.router, node.host_of)
    rows = []

    t_heap, _ = median_time(lambda: bare_heapq(n), reps)
    graph = compute_chain(n)
    t_exec, _ = median_time(lambda: run_taskgraph(model, graph, {r: r for r in range(8)}), reps)
    rows.append(("bare heapq loop", f"{n / t_heap:,.0f} events/s", t_heap))
    rows.append(("executor, compute tasks", f"{n / t_exec:,.0f} tasks/s", t_exec))
    rows.append(("executor / heapq time ratio", f"{t_exec / t_heap:.1f}x", None))

    m = 2_000 if args.quick else 5_000
    cgraph = comm_chain(m)
    t_comm, (_, stats) = median_time(
        lambda: run_taskgraph(model, cgraph, {r: r for r in range(8)}), reps
    )
    rows.append(
        (
            "executor, 8-rank all-reduces",
            f"{m / t_comm:,.0f} collectives/s "
            f"({stats.rerates} water-fillings, {stats.cache_hits} reused)",
            t_comm,
        )
    )

    t_build, topo = median_time(
        lambda: api.topology_from_file(ROOT / "topologies/llama3-24k-cluster.yaml"), reps
    )
    rows.append(
        ("build llama3 24K-GPU topology", f"{topo.graph.number_of_edges():,} links", t_build)
    )
    big = api.network_model(topo)
    group = topo.devices[:16384]
    for algo in ("ring", "hierarchical"):

        def one(algo=algo):
            big.geometry_cache.clear()
            big.route_cache.clear()
            plan = plan_collective("all_reduce", group, 2**30, algo, big.locality)
            return time_collective(big, plan)[0]

        t_ar, sim = median_time(one, max(1, reps // 2))
        rows.append(
            (f"16,384-GPU {algo} all-reduce, 1 GiB", f"simulated {sim * 1e3:,.1f} ms", t_ar)
        )

    pod = api.topology_from_file(
        ROOT / "topologies/dgx-h100-superpod.yaml", "H100-SXM", ["nodes=1024", "nodes_per_leaf=32"]
    )
    pm = api.network_model(pod)
    groups = [pod.devices[8 * k : 8 * k + 8] for k in range(1024)]

    def concurrent():
        pm.geometry_cache.clear()
        pm.route_cache.clear()
        plan = plan_collective("all_reduce", groups[0], 2**28, "ring", pm.locality)
        return time_collective(pm, plan, copies=groups[1:])[0]

    t_cc, sim = median_time(concurrent, reps)
    rows.append(("1,024 concurrent 8-GPU all-reduces", f"simulated {sim * 1e3:,.2f} ms", t_cc))

    dgx = api.topology_from_file(
        ROOT / "topologies/dgx-a100-superpod.yaml", "A100-SXM4-80GB", ["nodes=2048"]
    )
    dm = api.network_model(dgx)
    trees = [dgx.devices[k::16] for k in range(16)]  # one rank per node and GPU index

    def route():
        dm.geometry_cache.clear()
        dm.route_cache.clear()
        plan = plan_collective("all_reduce", trees[0], 2**28, "tree", dm.locality)
        _, _, runner = dm.new_run()
        geometry = runner.geometry(plan, trees[1:])
        return sum(len(p.transfers) for p in plan.phases) * len(trees), geometry

    t_route, (connections, _) = median_time(route, reps)
    rows.append(("route a 1,024-rank tree x 16 copies", f"{connections:,} connections", t_route))

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'median wall s':>13}  result")
    for name, result, seconds in rows:
        shown = f"{seconds:13.3f}" if seconds is not None else " " * 13
        print(f"{name:<{width}}  {shown}  {result}")


if __name__ == "__main__":
    main()
