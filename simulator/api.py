"""Composition root: the only module that wires scenario, model and plan together.

The CLI and notebooks call these functions; each returns plain data or a pandas DataFrame.

>>> from simulator import api
>>> report = api.memory_report(api.load_scenario("scenarios/examples/llama3-8b-fsdp.yaml"))
>>> report.fits
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simulator import metrics
from simulator.collectives import BUSBW_FACTORS, bus_bandwidth, plan_collective
from simulator.engine import NetworkModel, run_taskgraph_with_memory, time_collective
from simulator.hardware import get_accelerator
from simulator.model.compute import ComputeModel
from simulator.model.params import count_params
from simulator.plan.memory import (
    RankMemory,
    distinct_rank_kinds,
    max_params_model_states,
    memory_ledger,
)
from simulator.scenario import Scenario, load_scenario, load_topology
from simulator.scenario.schema import ClusterConfig
from simulator.schedule.step import build_step
from simulator.topology import Topology, build_topology
from simulator.topology.summary import link_levels, summary
from simulator.units import parse_quantity

__all__ = [
    "RunResult",
    "run",
    "write_run",
    "MemoryReport",
    "collective_table",
    "load_scenario",
    "memory_frame",
    "memory_report",
    "network_model",
    "topology_from_file",
]


@dataclass(frozen=True)
class MemoryReport:
    """Memory of each distinct kind of rank, with the model's size and the largest that fits."""

    parameter_count: int
    active_parameter_count: int
    ranks: tuple[RankMemory, ...]
    max_params_model_states: float

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.ranks)

    def as_dict(self) -> dict:
        return {
            "parameter_count": self.parameter_count,
            "active_parameter_count": self.active_parameter_count,
            "fits": self.fits,
            "max_params_model_states": self.max_params_model_states,
            "ranks": [r.as_dict() for r in self.ranks],
        }


def memory_report(scenario: Scenario) -> MemoryReport:
    """Per-rank memory breakdown of ``scenario`` (see :mod:`simulator.plan.memory`)."""
    counts = count_params(scenario.model)
    return MemoryReport(
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        ranks=tuple(distinct_rank_kinds(memory_ledger(scenario))),
        max_params_model_states=max_params_model_states(scenario),
    )


def memory_frame(report: MemoryReport) -> pd.DataFrame:
    """One row per kind of rank; byte columns in bytes."""
    rows = []
    for r in report.ranks:
        d = r.as_dict()
        d["stages"] = ",".join(map(str, r.stages))
        rows.append(d)
    columns = [
        "rank_kind",
        "params",
        "grads",
        "optimizer",
        "activations",
        "buffers",
        "total",
        "capacity",
        "fits",
        "in_flight_micro_batches",
        "param_count",
        "stages",
    ]
    return pd.DataFrame(rows, columns=columns)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load a scenario file (alias of :func:`simulator.scenario.load_scenario`)."""
    return load_scenario(path, overrides)


def topology_from_file(
    path: str | Path, accelerator: str = "H100-SXM", overrides: list[str] | tuple[str, ...] = ()
) -> Topology:
    """Build the topology described by a topologies/*.yaml file (NVLink bandwidth not given
    in the file comes from ``accelerator``)."""
    config = load_topology(path, overrides)
    cluster = ClusterConfig(accelerator=get_accelerator(accelerator), topology=config)
    return build_topology(cluster)


def network_model(topo: Topology) -> NetworkModel:
    """The engine's view of a topology (links as arrays, router, locality)."""
    return NetworkModel(
        topo.graph,
        topo.router,
        topo.host_of,
        topo.nvls_switch,
        topo.meta.get("shape") if topo.meta.get("kind") == "torus" else None,
    )


MAX_SIZES = 1000  # rows of one collective table; nccl-tests' 1 B..8 GiB at -f 2 is 34


def parse_sizes(spec: str) -> list[float]:
    """``"1MiB:8GiB"`` -> 1 MiB, 2 MiB, ... 8 GiB (doubling, as nccl-tests' -f 2);
    ``"1MiB:1GiB:4"`` multiplies by 4; ``"256MiB"`` is one size. At most ``MAX_SIZES``
    sizes; the count is computed before any list is built.

    Raises
    ------
    ValueError
        For anything else, naming the part that is wrong.
    """
    parts = spec.split(":")
    if len(parts) > 3:
        raise ValueError(f"{spec!r} has {len(parts)} parts; want MIN:MAX[:FACTOR] or one size")
    lo = parse_quantity(parts[0], "bytes")
    if len(parts) == 1:
        if lo <= 0:
            raise ValueError(f"{spec!r}: a size must be positive")
        return [lo]
    hi = parse_quantity(parts[1], "bytes")
    try:
        factor = float(parts[2]) if len(parts) > 2 else 2.0
    except ValueError:
        raise ValueError(f"FACTOR {parts[2]!r} is not a number (in {spec!r})") from None
    if not math.isfinite(factor) or factor <= 1:
        raise ValueError(f"FACTOR {parts[2]!r} must be a finite number above 1 (in {spec!r})")
    if lo <= 0 or hi < lo:
        raise ValueError(f"bad size range {spec!r}: want MIN:MAX[:FACTOR], 0 < MIN <= MAX")
    count = math.floor(math.log(hi * (1 + 1e-12) / lo) / math.log(factor)) + 1
    if count > MAX_SIZES:
        raise ValueError(
            f"{spec!r} gives {count:,} sizes, more than {MAX_SIZES:,}; raise FACTOR "
            f"(nccl-tests doubles: 1B:8GiB is 34 sizes)"
        )
    sizes = [lo * factor**i for i in range(count)]
    return [x for x in sizes if x <= hi * (1 + 1e-12)]


def collective_table(
    topo: Topology,
    op: str,
    ranks: int | None = None,
    algorithm: str | None = None,
    sizes: list[float] | None = None,
    groups: int = 1,
    protocol_efficiency: bool = True,
) -> pd.DataFrame:
    """An nccl-tests-like table: for each size, the time of ``op`` over the first ``ranks``
    devices and its algbw and busbw (B/s), with ``groups`` - 1 identical groups (the next
    blocks of devices) running the same collective at the same time.

    Raises
    ------
    ValueError
        For an unknown ``op``, fewer than 2 ranks, fewer than 1 group, or more devices than
        the topology has.
    """
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown operation {op!r}; known: {', '.join(BUSBW_FACTORS)}")
    ranks = topo.num_devices if ranks is None else ranks
    if ranks < 2:
        raise ValueError(f"a collective needs 2 or more ranks, not {ranks}")
    if groups < 1:
        raise ValueError(f"groups must be 1 or more, not {groups}")
    if ranks * groups > topo.num_devices:
        raise ValueError(
            f"{groups} groups of {ranks} ranks need {ranks * groups} devices; "
            f"the topology has {topo.num_devices}"
        )
    model = network_model(topo)
    group = topo.devices[:ranks]
    copies = [topo.devices[g * ranks : (g + 1) * ranks] for g in range(1, groups)]
    rows = []
    for size in sizes or parse_sizes("1MiB:8GiB"):
        plan = plan_collective(op, group, size, algorithm, model.locality, protocol_efficiency)
        seconds, _ = time_collective(model, plan, copies)
        algbw, busbw = bus_bandwidth(op, ranks, size, seconds)
        rows.append({"size_bytes": size, "time_s": seconds, "algbw_Bps": algbw, "busbw_Bps": busbw})
    return pd.DataFrame(rows)


def topology_report(topo: Topology) -> tuple[dict, pd.DataFrame]:
    """Headline numbers and the per-level link table of ``topo``."""
    return summary(topo), link_levels(topo)


@dataclass(frozen=True)
class RunResult:
    """One simulated step: headline metrics, the trace, the memory timeline (DataFrames)."""

    summary: dict
    trace: pd.DataFrame
    memory: pd.DataFrame
    links: pd.DataFrame | None = None  # utilisation over time of the busiest links


def run(
    scenario: Scenario,
    topo: Topology | None = None,
    compute_model: ComputeModel | None = None,
    track_links: bool = False,
) -> RunResult:
    """Simulate one steady-state training step of ``scenario`` (metrics: simulator.metrics).

    ``topo`` and ``compute_model`` default to the scenario's; tests pass idealised ones.
    ``track_links`` records every link's load over time (for the run report).
    """
    topo = topo or build_topology(scenario.cluster)
    acc = scenario.cluster.accelerator
    cm = compute_model or ComputeModel.for_accelerator(acc, scenario.precision.compute_dtype)
    step = build_step(scenario, cm)
    if step.grid.size > topo.num_devices:
        raise ValueError(f"{step.grid.size} ranks but the topology has {topo.num_devices} devices")
    device_of = {r: topo.devices[r] for r in range(step.grid.size)}
    model = network_model(topo)
    trace, stats, mem_events = run_taskgraph_with_memory(model, step.graph, device_of, track_links)
    frame = trace.to_frame()
    summary = _summarise(scenario, step, frame, stats, mem_events)
    links = None
    if track_links:
        names = [f"{u}->{v}" for u, v in model.links.edges]
        links = metrics.link_utilisation(
            stats.link_samples,
            stats.link_bytes,
            model.links.capacity,
            names,
            summary["step_time_s"],
        )
        summary["busiest_links"] = {
            name: float(
                ((f["end_s"] - f["start_s"]) * f["utilisation"]).sum() / summary["step_time_s"]
            )
            for name, f in links.groupby("link", sort=False)
        }
    return RunResult(summary, frame, metrics.memory_timeline(mem_events, step.static_memory), links)


def _summarise(scenario, step, frame, stats, mem_events) -> dict:
    acc = scenario.cluster.accelerator
    peak = acc.peak(scenario.precision.compute_dtype)
    zb_h2 = scenario.parallelism.pipeline.schedule == "zb-h2"
    spans = None
    if zb_h2:  # steps overlap by the ramp: each stage's own span is the period
        spans = {r: (f["start_s"].min(), f["end_s"].max()) for r, f in frame.groupby("rank")}
        step_time = max(e - s for s, e in spans.values())
        spans = {r: (s, s + step_time) for r, (s, _) in spans.items()}
    else:
        step_time = float(frame["end_s"].max())
    parts = metrics.rank_breakdown(frame, spans)
    timeline = metrics.memory_timeline(mem_events, step.static_memory)
    peaks = metrics.peak_memory(timeline, step.static_memory)
    n = scenario.num_gpus
    tokens = scenario.training.global_batch * scenario.training.seq_len
    comm = parts["comm_s"].sum()
    return {
        "scenario": scenario.name,
        "num_gpus": n,
        "simulated_ranks": len(step.ranks),
        "step_time_s": step_time,
        "tokens_per_s": tokens / step_time,
        "mfu": step.model_flops_per_step / (step_time * n * peak),
        "hfu": float((parts["flops"] / (step_time * peak)).mean()),
        "model_tflops_per_gpu": step.model_flops_per_step / (step_time * n) / 1e12,
        "bubble_fraction": float((parts["idle_s"] / step_time).mean()),
        "exposed_comm_fraction": float((parts["exposed_comm_s"] / step_time).mean()),
        "overlap_fraction": float(parts["overlap_s"].sum() / comm) if comm > 0 else 0.0,
        "peak_memory_bytes": max(peaks.values()),
        "memory_capacity_bytes": acc.hbm_bytes,
        "oom": max(peaks.values()) > acc.hbm_bytes,
        "peak_memory_by_rank": {str(k): v for k, v in sorted(peaks.items())},
        "utilisation": metrics.stream_utilisation(frame, step_time),
        "stage_of_rank": {str(r): st for r, st in sorted(step.stage_of.items())},
        "tasks": len(frame),
        "network_rerates": stats.rerates,
    }


def write_run(result: RunResult, out: str | Path, title: str = "") -> list[Path]:
    """Write the run report into ``out``: summary.json, summary.md, the trace table
    (trace.parquet, or trace.csv without pyarrow), trace.json (Perfetto), hta/rank-N.json,
    memory.csv and memory.png, gantt.png and gantt.svg, links.csv and links.png."""
    from simulator.report.run_report import write_report

    return write_report(result.summary, result.trace, result.memory, result.links, out, title)
