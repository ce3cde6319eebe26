"""Composition root: the only module that wires scenario, model and plan together.

The CLI and notebooks call these functions; each returns plain data or a pandas DataFrame.

>>> from simulator import api
>>> report = api.memory_report(api.load_scenario("scenarios/examples/llama3-8b-fsdp.yaml"))
>>> report.fits
True
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import compress, count, repeat
from operator import eq, is_not, ne
from pathlib import Path

import numpy as np
import pandas as pd

from simulator import metrics
from simulator.collectives import BUSBW_FACTORS, bus_bandwidth, plan_collective
from simulator.engine import NetworkModel, paused_gc, run_engine, time_collective
from simulator.engine.executor import channels_Bps, hop_bandwidth
from simulator.engine.placement import DeviceLabels, RanksOnDevices
from simulator.engine.steady_state import SHIFT_DIFFERS, expand, expand_memory, find_repeat
from simulator.hardware import get_accelerator
from simulator.infeasible import InfeasibleError
from simulator.model.compute import ComputeModel
from simulator.model.params import count_params
from simulator.pipelines import SteadyState, get_schedule, steady_state
from simulator.plan.collective_choice import NetworkFacts, choose_algorithm
from simulator.plan.memory import (
    RankMemory,
    device_bytes,
    distinct_rank_kinds,
    ledger_caveats,
    max_params_model_states,
    memory_ledger,
)
from simulator.plan.plan import Plan
from simulator.plan.plan import build_plan as make_plan
from simulator.plan.topology_warnings import topology_warnings as plan_topology_warnings
from simulator.scenario import Scenario, load_scenario, load_topology
from simulator.scenario.schema import ClusterConfig
from simulator.schedule.costs import grad_accumulate_op, layer_kernels
from simulator.schedule.perturb import Perturbation, SlowCompute, SlowLink, perturb
from simulator.schedule.step import StepGraph
from simulator.schedule.step import build_step as make_step
from simulator.topology import Topology, build_topology
from simulator.topology.summary import link_levels, summary
from simulator.trace import rows_array
from simulator.units import parse_quantity

log = logging.getLogger(__name__)

__all__ = [
    "RunResult",
    "Simulation",
    "SlowCompute",
    "SlowLink",
    "build_plan",
    "build_topology",
    "build_step",
    "perturb",
    "run",
    "simulate",
    "step_metrics",
    "write_run",
    "InfeasibleError",
    "MemoryReport",
    "collective_table",
    "load_scenario",
    "memory_frame",
    "memory_report",
    "ledger_peak",
    "step_lower_bound",
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
    caveats: tuple[str, ...] = ()  # where the simulated peak may exceed the ledger's

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
            "caveats": list(self.caveats),
        }


def memory_report(scenario: Scenario, topo: Topology | None = None) -> MemoryReport:
    """Per-rank memory breakdown of ``scenario`` (see :mod:`simulator.plan.memory`). A
    pipeline schedule searched for its passes' durations (ZB-1p, ZB-2p) is searched with the
    cluster's network, as ``run`` does, so that both hold the same order (``topo``: the
    scenario's topology if already built)."""
    counts = count_params(scenario.model)
    plan: Scenario | Plan = scenario
    if get_schedule(scenario.parallelism.pipeline.schedule).needs_times:
        plan = build_plan(scenario, topo or build_topology(scenario.cluster))
    return MemoryReport(
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        ranks=tuple(distinct_rank_kinds(memory_ledger(plan))),
        max_params_model_states=max_params_model_states(scenario),
        caveats=tuple(ledger_caveats(scenario)),
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
        "runtime",
        "reserve_fraction",
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


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total): the size of
    the process pools that sweeps and ``trainsim validate`` simulate on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def quiet_pool_worker() -> None:
    """Initialise a process-pool worker: no progress bars of its own (on one terminal they
    would mix with the parent's); its log lines still reach stderr."""
    os.environ["TQDM_DISABLE"] = "1"


def network_model(topo: Topology) -> NetworkModel:
    """The engine's view of a topology (links as arrays, router, locality), made once per
    topology and kept in ``topo.derived``: runs on one topology (a sweep's points, a plan
    search, failure trials) share its link table (from the builder's numbering when the
    topology has its own, else read from the graph: 0.13 s for the 131K links of 16K GPUs)
    and the collective routes it has learnt."""
    model = topo.derived.get("network_model")
    if model is None or model.graph is not topo.graph:  # a graph swapped in: model it anew
        model = topo.derived["network_model"] = NetworkModel(
            topo.graph,
            topo.router,
            topo.host_of,
            topo.nvls_switch,
            topo.meta.get("shape") if topo.meta.get("kind") == "torus" else None,
            layout=topo.own_layout,
        )
    return model


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
    devices, its algbw and busbw (B/s), and the algorithm and NCCL protocol it ran with (the
    protocol NCCL's model picks by size; the algorithm asked for, the engine's default, ring or
    direct, for None, or for ``"auto"`` the one the plan would pick for a group like it: NVLS,
    ring or tree by NCCL's model, :func:`~simulator.plan.collective_choice.choose_algorithm`),
    with ``groups`` - 1 identical groups (the next blocks of devices) running the same
    collective at the same time.

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
    bus = None
    if protocol_efficiency:  # NCCL's channels' total, as the executor plans it
        hop = hop_bandwidth(model.links, model.router, tuple(group))
        bus = channels_Bps(hop, topo.host_of, tuple(group))
    facts = network_facts(topo) if algorithm == "auto" else None
    rows = []
    for size in sizes or parse_sizes("1MiB:8GiB"):
        algo = algorithm
        if algorithm == "auto":  # the devices are numbered host by host, as ranks are
            algo = choose_algorithm(op, tuple(group), size, facts)
        plan = plan_collective(
            op, group, size, algo, model.locality, protocol_efficiency, bus_Bps=bus
        )
        seconds, _ = time_collective(model, plan, copies)
        algbw, busbw = bus_bandwidth(op, ranks, size, seconds)
        rows.append(
            {
                "size_bytes": size,
                "time_s": seconds,
                "algbw_Bps": algbw,
                "busbw_Bps": busbw,
                "algorithm": plan.algorithm,
                "protocol": plan.protocol,
            }
        )
    return pd.DataFrame(rows)


def topology_report(topo: Topology) -> tuple[dict, pd.DataFrame]:
    """Headline numbers and the per-level link table of ``topo``."""
    return summary(topo), link_levels(topo)


def ledger_peak(scenario: Scenario, topo: Topology | None = None) -> tuple[float, float, str]:
    """(the largest rank's memory-ledger total, its HBM, which ranks) in bytes: the ledger
    alone, without the report's caveats and parameter counts. A schedule ordered by its
    passes' durations is planned on ``topo`` (built if not given), as ``run`` plans it."""
    plan: Scenario | Plan = scenario
    if get_schedule(scenario.parallelism.pipeline.schedule).needs_times:
        plan = build_plan(scenario, topo or build_topology(scenario.cluster))
    ranks = distinct_rank_kinds(memory_ledger(plan))
    worst = max(ranks, key=lambda r: r.total)
    return worst.total, worst.capacity, worst.rank_kind


def step_lower_bound(scenario: Scenario, ingress_Bps: float | None = None):
    """A lower bound on the simulated step of ``scenario``
    (:func:`simulator.schedule.bounds.step_lower_bound`), for the plan search's screen."""
    from simulator.schedule.bounds import step_lower_bound as bound

    return bound(scenario, ingress_Bps)


def topology_warnings(scenario: Scenario, topo: Topology | None = None) -> list[str]:
    """Where a study of this scenario would mislead (oversubscription that touches no traffic,
    a NIC faster than its host link, groups straddling the NVLink domain):
    :func:`simulator.plan.topology_warnings.topology_warnings`."""
    return plan_topology_warnings(scenario, topo or build_topology(scenario.cluster))


PASSES = {"f": "forward", "b": "input_grad", "w": "weight_grad"}


def compute_model_of(scenario: Scenario) -> ComputeModel:
    """Kernel durations on the scenario's accelerator (calibrated), with its framework's CPU
    cost per kernel launch (:meth:`ComputeModel.for_scenario`)."""
    return ComputeModel.for_scenario(scenario)


def layer_costs(scenario: Scenario, layer: int = 0) -> pd.DataFrame:
    """One layer's kernels for one micro-batch on one rank, per pass: FLOPs, bytes, seconds
    and whether compute or memory bounds them (what to hold against a profiler trace).

    Passes: forward, input_grad, weight_grad, and recompute (the forward again, for the ops the
    recompute policy re-runs: all of them with ``full``, the attention core with
    ``selective``). Columns: pass, op, kind, flops, bytes, seconds, bound.
    """
    if not 0 <= layer < scenario.model.layers:
        raise ValueError(f"layer {layer} is not in 0 .. {scenario.model.layers - 1}")
    plan = make_plan(scenario)
    mb, sh = plan.micro_batch, plan.sharding
    cm = compute_model_of(scenario)
    ops = layer_kernels(scenario.model, layer, mb, sh)
    rc = scenario.parallelism.recompute
    rows = []
    for phase, name in PASSES.items():
        for op in ops:
            rows.append(_cost_row(cm, op, phase, name))
    if scenario.framework.grad_accumulation == "add":  # every micro-batch after the first
        add = grad_accumulate_op(plan.accumulated_params(layer), plan.grad_bytes_per_param)
        rows.append(_cost_row(cm, add, "w", "weight_grad"))
    for op in ops:
        if rc == "full" or (rc == "selective" and op.kind == "attention"):
            rows.append(_cost_row(cm, op, "f", "recompute"))
    frame = pd.DataFrame(rows)
    return frame[frame["seconds"] > 0].reset_index(drop=True)


def _cost_row(cm: ComputeModel, op, phase: str, name: str) -> dict:
    seconds, bound = cm.op_timing(op, phase)
    flops = {"f": op.f_flops, "b": op.b_flops, "w": op.w_flops}[phase]
    moved = {"f": op.f_bytes, "b": op.b_bytes, "w": op.w_bytes}[phase]
    return {
        "pass": name,
        "op": op.name,
        "kind": op.kind,
        "flops": flops,
        "bytes": moved,
        "seconds": seconds,
        "bound": bound,
    }


# -- the staged run: load -> build_plan -> build_step -> perturb -> simulate -> step_metrics --


def network_facts(topo: Topology) -> NetworkFacts:
    """What the plan's collective choice needs to know of ``topo``: devices per host, NVLS,
    one GPU's bandwidth and per-hop latency to another host, and the bandwidth between two
    GPUs of one host. Found once per topology (its graph, devices and hosts) and kept in
    ``topo.derived`` (as :func:`network_model`): a walk over every device's host, 1.5 ms at
    16K GPUs."""
    kept = topo.derived.get("network_facts")
    reads = (topo.graph, topo.devices, topo.host_of)
    if kept is None or any(map(is_not, kept[0], reads)):  # one swapped in: found anew
        kept = topo.derived["network_facts"] = (reads, _network_facts(topo))
    return kept[1]


def _network_facts(topo: Topology) -> NetworkFacts:
    """:func:`network_facts`, found."""
    first = topo.devices[0]
    # whether each device shares the first's host, compared in C (16K devices at 16K GPUs)
    with_first = list(
        map(eq, map(topo.host_of.__getitem__, topo.devices), repeat(topo.host_of[first]))
    )
    mates = list(compress(topo.devices, with_first))
    other = topo.devices[with_first.index(False)] if not all(with_first) else None

    def capacity(path) -> float:
        return min(
            topo.graph.edges[e]["bandwidth"] * topo.graph.edges[e].get("efficiency", 1.0)
            for e in path
        )

    bw, lat = 50e9, 5e-6
    if other is not None:
        path = topo.path(first, other)
        bw = capacity(path)
        lat = sum(topo.graph.edges[e].get("latency", 0.0) for e in path)
    return NetworkFacts(
        gpus_per_host=len(mates),
        nvls=bool(topo.nvls_switch),
        inter_Bps=bw,
        inter_latency_s=lat,
        torus=topo.meta.get("kind") == "torus",
        intra_Bps=capacity(topo.path(first, mates[1])) if len(mates) > 1 else None,
    )


def build_plan(scenario: Scenario, topo: Topology | None = None) -> Plan:
    """Every layout decision for ``scenario`` (:mod:`simulator.plan.plan`); with ``topo`` the
    collectives are chosen per group as NCCL would (without it, rings)."""
    return make_plan(scenario, network_facts(topo) if topo is not None else None)


def build_step(
    plan: Plan,
    compute_model: ComputeModel | None = None,
    repeat: bool = False,
    steady: SteadyState | None = None,
) -> StepGraph:
    """The TaskGraph of one step of ``plan``; compute durations from ``compute_model``
    (default: the scenario's accelerator, calibrated).

    ``repeat``: where the pipeline has a steady state to repeat
    (:func:`simulator.pipelines.steady_state`, or ``steady`` when given), the graph of only
    its warm-up, two periods and cool-down, for :func:`simulate` to stretch to the full step
    (``StepGraph.steady`` says so). :func:`run` does this unless the scenario says
    ``simulation.repeat_steady_state: false``."""
    s = plan.scenario
    if compute_model is None:
        cm = compute_model_of(s)
    else:  # the caller's kernel model, with the scenario framework's CPU cost per launch
        fw = s.framework
        cm = replace(compute_model, cpu_launch_s=fw.cpu_launch_s, flash_kernel=fw.flash_kernel)
    pp = s.parallelism.pp
    if repeat and steady is None:
        steady = steady_state(plan.schedule, pp, plan.micro_batches, plan.chunks_per_stage)
    if not repeat:
        steady = None
    with paused_gc():  # millions of small immutable tasks: the collector only costs time
        if steady is None:
            return make_step(plan, cm)
        reduced = make_step(_with_micro_batches(plan, steady.reduced), cm)
    return dataclasses.replace(reduced, plan=plan, steady=steady)


def _with_micro_batches(plan: Plan, count: int) -> Plan:
    """``plan`` remade for ``count`` micro-batches per pipeline (a smaller global batch)."""
    s = plan.scenario
    batch = count * s.dp * s.training.micro_batch
    training = s.training.model_copy(update={"global_batch": batch})
    return make_plan(s.model_copy(update={"training": training}), plan.network)


class NotRepeating(Exception):
    """A step built to repeat its steady state did not: its second period is not its first
    shifted (the reason says how). Simulate the full step instead."""


@dataclass(frozen=True)
class Simulation:
    """What the engine returns for one step: the trace as a DataFrame, the memory events
    (an (n, 3) array of rank, time s, bytes delta), the network statistics and model (for
    link reports)."""

    frame: pd.DataFrame
    memory_events: np.ndarray
    stats: object
    network: NetworkModel


# Symmetric mode's water-fillings keep one link of each orbit of equivalent GPUs' own links
# (simulator/engine/orbits.py; exact): a switch for the tests that compare with and without.
SYMMETRIC_ORBITS = True


def _orbit_labels(plan, device_of: Mapping[int, int]) -> Mapping[int, int] | None:
    """Device -> the stage of its rank, in symmetric mode (the ranks of a stage do the same
    thing at the same time); None in full mode."""
    if not plan.symmetric:
        return None
    stages = plan.grid.coord_of_every_rank("pp")  # plan.stage_of of every rank
    if isinstance(device_of, RanksOnDevices):  # rank r on device r: two arrays, no dict
        return DeviceLabels(np.arange(stages.size), stages)
    stages = stages.tolist()
    return dict(zip(map(device_of.__getitem__, range(len(stages))), stages, strict=True))


def _placement(ranks: int, devices: list[int], numbered: int | None = None) -> Mapping[int, int]:
    """Rank r on ``devices[r]``: :class:`RanksOnDevices` when that is device r (the
    topologies number their devices 0 .. n-1), else a dict. ``numbered``: how many of
    ``devices`` from the first are their own position, when known (:func:`_numbered`)."""
    if numbered is None:
        numbered = _numbered(devices[:ranks])
    if ranks <= numbered:
        return RanksOnDevices(ranks)
    return dict(zip(range(ranks), devices, strict=False))


def _numbered(devices: list) -> int:
    """How many of ``devices``, from the first, equal their position (device r at r)."""
    return next(compress(count(), map(ne, devices, count())), len(devices))


def _numbered_devices(topo: Topology) -> int:
    """:func:`_numbered` of ``topo.devices``, kept in ``topo.derived`` while the list is the
    same (16K devices compared once per topology, not once per run)."""
    kept = topo.derived.get("numbered_devices")
    if kept is None or kept[0] is not topo.devices:
        kept = topo.derived["numbered_devices"] = (topo.devices, _numbered(topo.devices))
    return kept[1]


def simulate(
    step: StepGraph,
    topo: Topology,
    perturbations: list[Perturbation] | tuple = (),
    track_links: bool = False,
) -> Simulation:
    """Run ``step`` on ``topo`` (with any :class:`SlowLink` perturbations applied).

    A step built to repeat its steady state (``step.steady``) is simulated as built and its
    periods repeated up to the plan's micro-batches (:mod:`simulator.engine.steady_state`);
    :class:`NotRepeating` if they do not repeat, or with ``track_links`` (link loads over
    time are not repeated)."""
    if step.plan.grid.size > topo.num_devices:
        raise InfeasibleError(
            f"{step.plan.grid.size} ranks but the topology has {topo.num_devices} devices"
        )
    if step.steady is not None and track_links:
        raise NotRepeating("link loads over time are not repeated: simulate the full step")
    degraded = _degraded(topo, perturbations)
    model = network_model(degraded)
    # rank r on the r-th device (the topology has at least as many: checked above)
    device_of = _placement(step.plan.grid.size, topo.devices, _numbered_devices(topo))
    run = run_engine(
        model,
        step.graph,
        device_of,
        track_links,
        interference=step.plan.scenario.simulation.comm_interference,
        orbit_labels=_orbit_labels(step.plan, device_of) if SYMMETRIC_ORBITS else None,
    )
    if degraded is not topo:  # a copy for this run alone (the link table stays with the model)
        degraded.release()
    if step.steady is None:
        return Simulation(run.trace.to_frame(), rows_array(run.memory, 3), run.stats, model)
    # the repetition found and repeated on numbers (task indices, text as codes); the rows
    # made whole once, at the full step's length
    coded = run.trace.coded_frame()
    rep = find_repeat(coded, step.steady, step.plan.micro_batches)
    if isinstance(rep, str):
        raise NotRepeating(rep)
    memory = expand_memory(
        rows_array(run.memory, 3), np.array(run.memory_microbatch, dtype=np.int64), rep
    )
    full = expand(coded, rep, ["task", "microbatch", "start_s", "end_s"])  # the rest: frame_of
    frame = run.trace.frame_of(
        full["task"].to_numpy(),
        full["start_s"].to_numpy(),
        full["end_s"].to_numpy(),
        full["microbatch"].to_numpy(),
    )
    return Simulation(frame, memory, run.stats, model)


def _degraded(topo: Topology, perturbations) -> Topology:
    slow = [p for p in perturbations if isinstance(p, SlowLink)]
    if not slow:
        return topo
    graph = topo.graph.copy()
    for p in slow:
        if not graph.has_edge(p.src, p.dst):
            raise InfeasibleError(f"no link {p.src} -> {p.dst} in the topology")
        graph.edges[p.src, p.dst]["bandwidth"] *= p.fraction
    return dataclasses.replace(topo, graph=graph)


def step_metrics(
    sim: Simulation, step: StepGraph, timeline: pd.DataFrame | None = None
) -> metrics.StepMetrics:
    """The headline metrics of a simulated step (:class:`simulator.metrics.StepMetrics`);
    ``timeline`` is its memory timeline when the caller has it already."""
    s = step.plan.scenario
    acc = s.cluster.accelerator
    facts = metrics.StepFacts(
        scenario=s.name,
        num_gpus=s.num_gpus,
        tokens_per_step=s.training.global_batch * s.training.seq_len,
        model_flops_per_step=step.plan.model_flops_per_step,
        peak_flops_per_s=acc.peak(s.precision.compute_dtype),
        hbm_bytes=acc.hbm_bytes,
        overlapping_steps=step.plan.schedule.overlapping_steps,
        static_memory=step.static_memory,
        stage_of=step.stage_of,
        runtime_bytes=s.framework.runtime_bytes,
        allocator_reserve=s.framework.allocator_reserve,
    )
    return metrics.step_metrics(
        sim.frame, sim.memory_events, facts, sim.stats.rerates, timeline=timeline
    )


@dataclass(frozen=True)
class RunResult:
    """One simulated step: its metrics, the trace, the memory timeline (DataFrames).

    With perturbations (stragglers, slow links), ``healthy_step_time_s`` is the same step
    without them, for the slowdown."""

    metrics: metrics.StepMetrics
    trace: pd.DataFrame
    memory: pd.DataFrame
    links: pd.DataFrame | None = None  # utilisation over time of the busiest links
    healthy_step_time_s: float | None = None

    @property
    def summary(self) -> dict:
        """The metrics as a plain dict (summary.json)."""
        out = self.metrics.as_dict()
        if self.healthy_step_time_s is not None:
            out["healthy_step_time_s"] = self.healthy_step_time_s
            out["straggler_slowdown"] = self.metrics.step_time_s / self.healthy_step_time_s
        return out


FULL_MODE_MAX_GPUS = 1024  # past this, a slow rank stands for its pipeline stage (see run)


def scenario_perturbations(scenario: Scenario) -> list[Perturbation]:
    """The scenario's ``failures.stragglers`` (slow GPUs and links) as perturbations, from the
    schema's own conversion (:meth:`Stragglers.in_step`).

    A link that is down (fraction 0) would need rerouting, which the step simulation does not
    model (ValueError)."""
    if scenario.failures is None:
        return []
    out: list[Perturbation] = []
    for kind, *args in scenario.failures.stragglers.in_step():
        if kind == "slow_compute":
            out.append(SlowCompute(*args))
            continue
        src, dst, fraction = args
        if fraction == 0:
            raise InfeasibleError(
                f"failures.stragglers.links ({src} -> {dst}): a link that is down needs "
                "rerouting, which the step simulation does not model; give the fraction of "
                "bandwidth left instead"
            )
        out.append(SlowLink(_node(src), _node(dst), fraction))
    return out


def _node(name):
    """Topology node ids: devices are integers, a YAML "12" names device 12 too."""
    return int(name) if isinstance(name, str) and name.isdigit() else name


def _placed(scenario: Scenario, perturbations) -> tuple[Scenario, list]:
    """Where slow ranks are simulated: every rank (full mode) up to ``FULL_MODE_MAX_GPUS``;
    beyond, the slow rank's stage representative. Training is synchronous, so every replica
    waits for the slowest at the gradient synchronisation and a slow rank gates its TP, CP and
    pipeline peers: the step is that of its stage slowed in every replica, bar the network's
    contention details."""
    slow = [p for p in perturbations if isinstance(p, SlowCompute)]
    for p in slow:
        if not 0 <= p.rank < scenario.num_gpus:
            raise InfeasibleError(f"rank {p.rank} is not in the job's {scenario.num_gpus} GPUs")
    if not slow or scenario.simulation.mode == "full":
        return scenario, list(perturbations)
    if scenario.num_gpus <= FULL_MODE_MAX_GPUS:
        full = scenario.simulation.model_copy(update={"mode": "full"})
        return scenario.model_copy(update={"simulation": full}), list(perturbations)
    grid = make_plan(scenario).grid
    slowest: dict[int, float] = {}  # replicas wait for the slowest, they do not add up
    for p in slow:
        rep = grid.rank(tp=0, cp=0, dp=0, pp=grid.coords(p.rank)["pp"])
        slowest[rep] = max(slowest.get(rep, 1.0), p.factor)
    others = [p for p in perturbations if not isinstance(p, SlowCompute)]
    return scenario, [SlowCompute(r, k) for r, k in slowest.items()] + others


def run(
    scenario: Scenario,
    topo: Topology | None = None,
    compute_model: ComputeModel | None = None,
    track_links: bool = False,
    perturbations: list[Perturbation] | tuple = (),
    steps: StepCache | None = None,
) -> RunResult:
    """Simulate one steady-state training step of ``scenario``: all the stages in a row.

    ``topo`` and ``compute_model`` default to the scenario's; tests pass idealised ones.
    ``track_links`` records every link's load over time (for the run report).
    ``perturbations`` slow ranks or links (:mod:`simulator.schedule.perturb`), added to the
    scenario's own ``failures.stragglers``; then the healthy step is simulated too, for the
    slowdown. Slowing a rank simulates every rank up to 1,024 GPUs (see :func:`_placed`).
    ``steps`` keeps built steps for later runs (:class:`StepCache`; a sweep's worker).
    """
    perturbations = [*perturbations, *scenario_perturbations(scenario)]
    own = topo is None
    topo = topo or build_topology(scenario.cluster)
    try:
        healthy = None
        if perturbations:
            healthy = _run_once(scenario, topo, compute_model, False, [], steps)
            healthy = healthy.metrics.step_time_s
            scenario, perturbations = _placed(scenario, perturbations)
        result = _run_once(scenario, topo, compute_model, track_links, perturbations, steps)
    finally:
        if own:  # built here, used by nothing after: freed now (Topology.release)
            topo.release()
    return dataclasses.replace(result, healthy_step_time_s=healthy)


def _run_once(scenario, topo, compute_model, track_links, perturbations, steps=None) -> RunResult:
    plan = build_plan(scenario, topo)
    repeat = scenario.simulation.repeat_steady_state and not track_links

    def built(repeat: bool, steady: SteadyState | None = None) -> StepGraph:
        if steps is None or compute_model is not None:
            return build_step(plan, compute_model, repeat, steady)
        return steps.build(plan, repeat, steady)

    step = perturb(built(repeat), perturbations)
    retries: list[SteadyState] | None = None  # after the first state: the ones worth trying
    while True:
        try:
            sim = simulate(step, topo, perturbations, track_links)
            break
        except NotRepeating as why:
            if retries is None:
                first = step.steady
                retries = _steady_state_retries(plan, first, str(why))
            elif not str(why).startswith(SHIFT_DIFFERS):  # a longer period will not help
                retries = [r for r in retries if r.period == first.period]
            longer = retries.pop(0) if retries else None
            log.debug(  # an internal diagnostic: the result is the same either way
                "%s: the steady state does not repeat (%s); %s",
                scenario.name or "scenario",
                why,
                f"trying a {longer.head}-micro-batch warm-up and a period of {longer.period}"
                if longer
                else "simulating all",
            )
            step = perturb(built(longer is not None, longer), perturbations)
    return _result(scenario, step, sim, track_links)


class StepCache:
    """Steps built for earlier runs, kept for the runs after that would build the same graph
    (most recent last, at most ``size``).

    A step is a pure function of the plan, the compute model and the steady state it
    repeats; the plan reads the cluster's topology only through
    :class:`~simulator.plan.collective_choice.NetworkFacts` (:func:`build_plan`). So runs
    that differ only in fabric fields that leave those facts alone (oversubscription above
    the first inter-host hop, spine and core counts; not nodes per leaf, which moves that hop)
    build the same graph: a topology study's points pay for the build once. The key is the
    scenario without ``cluster.topology`` and without the fields the build never reads (its
    name and description, ``failures``: stragglers slow a built step afterwards), the GPU
    count, the facts and the steady state; a kept step is handed out with the new run's own
    plan (the same but for those fields). Only the default compute model is cached (a
    caller's model is not a key).
    """

    # read by no part of the step build (the scenario's name reaches the metrics through the
    # new run's own plan)
    UNREAD = {"cluster": {"topology"}, "name": True, "description": True, "failures": True}

    def __init__(self, size: int = 1):
        self.size = size
        self._kept: dict[tuple, StepGraph] = {}
        self.hits = 0

    @staticmethod
    def key(plan: Plan, repeat: bool, steady: SteadyState | None) -> tuple:
        s = plan.scenario
        return (
            s.model_dump_json(round_trip=True, exclude=StepCache.UNREAD),
            s.cluster.num_gpus,
            plan.network,
            repeat,
            steady,
        )

    def build(self, plan: Plan, repeat: bool, steady: SteadyState | None = None) -> StepGraph:
        """:func:`build_step` of ``plan`` (default compute model), or the kept one."""
        key = self.key(plan, repeat, steady)
        step = self._kept.pop(key, None)
        if step is None:
            while self._kept and len(self._kept) >= self.size:  # room first: a large step
                del self._kept[next(iter(self._kept))]  # holds hundreds of MB
            step = build_step(plan, None, repeat, steady)
        else:
            self.hits += 1
            step = dataclasses.replace(step, plan=plan)
        self._kept[key] = step
        while len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]
        return step


def _steady_state_retries(plan: Plan, tried: SteadyState | None, why: str = "") -> list:
    """After ``tried`` did not repeat, each in turn: a warm-up four times as long, where stages of
    unequal speed take that long to settle (zero-bubble schedules, whose deferred weight
    gradients fill the faster stages' slack over several micro-batches: ZB-H1 on 4 unequal
    stages settles after 12), if that still halves the micro-batches; then twice the period
    and a warm-up up to twice as long, as long as fits in half the micro-batches: a 1F1B
    pipeline whose end stages are a layer lighter can settle into a state that repeats every
    two micro-batches, not every one (the 28.3B zero-bubble model on 32 stages: 27.32 and
    28.12 ms between successive micro-batches on every stage), and needs a warm-up of about
    1.5p to reach it; only when ``why`` (the check's reason) says the periods differ in time,
    not when, say, a task outside the micro-batches ran during them. Those that fit, in that
    order: a 1F1B state of period two on 8 stages and 512 micro-batches does not repeat after
    the longer warm-up either, and the doubled period then costs a sixth of simulating all."""
    if tried is None:
        return []
    m, p, v = plan.micro_batches, plan.scenario.parallelism.pp, plan.chunks_per_stage

    def fits(s: SteadyState | None) -> bool:
        return s is not None and 2 * s.reduced <= m and not plan.schedule.check(p, s.reduced, v)

    candidates = [tried.longer_warm_up()]
    if why.startswith(SHIFT_DIFFERS):
        candidates.append(tried.doubled_period(m))
    return [s for s in candidates if fits(s)]


def _result(scenario, step, sim, track_links) -> RunResult:
    """The simulated step's metrics, trace, memory timeline and (tracked) link loads."""
    memory = metrics.memory_timeline(sim.memory_events, step.static_memory)
    m = step_metrics(sim, step, memory)
    links = None
    if track_links:
        links, busiest = _link_report(sim, m.step_time_s)
        m = dataclasses.replace(m, busiest_links=busiest)
    return RunResult(m, sim.frame, _on_device(memory, scenario.framework), links)


def _on_device(memory: pd.DataFrame, framework) -> pd.DataFrame:
    """The timeline of live tensors as device memory in use, the way the peak is reported:
    the allocator's reserve over the tensors, plus the runtime's own memory (B)."""
    out = memory.copy()
    for col in ("bytes", "static_bytes"):
        out[col] = device_bytes(out[col], framework.runtime_bytes, framework.allocator_reserve)
    return out


def _link_report(sim: Simulation, step_time: float):
    """Load over time of the most utilised link of each level and direction."""
    from simulator.report.plots import most_utilised_per_level

    model = sim.network
    names = [f"{u}->{v}" for u, v in model.links.edges]
    mean = pd.Series(sim.stats.link_bytes / (model.links.capacity * step_time), index=names)
    index = {name: i for i, name in enumerate(names)}
    chosen = [index[n] for n in most_utilised_per_level(mean, per_level=1)]
    links = metrics.link_utilisation(
        sim.stats.link_samples,
        sim.stats.link_bytes,
        model.links.capacity,
        names,
        step_time,
        chosen=chosen,
    )
    busiest = {
        name: float(((f["end_s"] - f["start_s"]) * f["utilisation"]).sum() / step_time)
        for name, f in links.groupby("link", sort=False)
    }
    return links, busiest


def write_run(result: RunResult, out: str | Path, title: str = "", on_file=None) -> list[Path]:
    """Write the run report into ``out``: summary.json, summary.md, the trace table
    (trace.parquet, or trace.csv without pyarrow), trace.json (Perfetto), hta/rank-N.json,
    memory.csv and memory.png, gantt.png (and gantt.svg up to 20,000 records), and with link
    tracking links.parquet and links.png. ``on_file(path)`` is called as each is written."""
    from simulator.report.run_report import write_report

    return write_report(
        result.summary, result.trace, result.memory, result.links, out, title, on_file
    )
