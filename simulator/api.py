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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simulator import metrics
from simulator.engine import paused_gc
from simulator.engine.steady_state import SHIFT_DIFFERS
from simulator.hardware import get_accelerator
from simulator.infeasible import InfeasibleError
from simulator.model.compute import ComputeModel
from simulator.pipelines import SteadyState, steady_state
from simulator.plan.nccl_memory import nccl_bytes
from simulator.plan.plan import Plan
from simulator.plan.plan import build_plan as make_plan
from simulator.plan.topology_warnings import topology_warnings as plan_topology_warnings
from simulator.scenario import Scenario, load_scenario, load_topology
from simulator.scenario.schema import ClusterConfig
from simulator.schedule.perturb import Perturbation, SlowCompute, SlowLink, perturb
from simulator.schedule.step import StepGraph
from simulator.schedule.step import build_step as make_step
from simulator.stages.collective_table import (  # noqa: F401 - the api's names, re-exported
    collective_table,
    fabric_line,
    parse_sizes,
    topology_report,
)
from simulator.stages.costs import (  # noqa: F401 - the api's names, re-exported
    compute_model_of,
    costs_notes,
    layer_costs,
)
from simulator.stages.energy import StepEnergy, step_energy
from simulator.stages.facts import (  # noqa: F401 - the api's names, re-exported
    SYMMETRIC_ORBITS,
    _degraded,
    _numbered_devices,
    _orbit_labels,
    _placement,
    network_facts,
    network_model,
    reach_of,
)
from simulator.stages.memory import (  # noqa: F401 - the api's names, re-exported
    MemoryReport,
    ledger_peak,
    memory_frame,
    memory_report,
)
from simulator.stages.pool import (  # noqa: F401 - the api's names, re-exported
    quiet_pool_worker,
    usable_cores,
)
from simulator.stages.reports import (  # noqa: F401 - the api's names, re-exported
    _link_report,
    _on_device,
)
from simulator.stages.simulation import (  # noqa: F401 - the api's names, re-exported
    Simulation,
    _gpu_rows,
    simulate,
)
from simulator.stages.steady import (  # noqa: F401 - the api's names, re-exported
    NotRepeating,
    _steady_state_retries,
)
from simulator.stages.stragglers import (  # noqa: F401 - the api's names, re-exported
    _placed,
    scenario_perturbations,
    straggler_link_findings,
)
from simulator.stages.variability import (
    StepSamples,
    fleet_speeds,
    retimable_step,
    slow_gpu_costs,
    step_samples,
)
from simulator.topology import Topology, build_topology

log = logging.getLogger(__name__)

# The api's public names: what ``from simulator.api import *`` gives and ``dir()`` lists (the
# module's other attributes are its imports and helpers; still importable by name).
__all__ = [
    "InfeasibleError", "MemoryReport", "NotRepeating", "Perturbation", "RunResult", "Scenario",
    "Simulation", "SlowCompute", "SlowLink", "StepCache", "StepEnergy", "StepSamples",
    "StepSensitivity", "build_plan", "build_step", "build_topology", "collective_table",
    "compute_model_of", "costs_notes", "fabric_line", "get_accelerator", "layer_costs",
    "ledger_peak", "load", "load_scenario", "load_topology", "memory_frame", "memory_report",
    "network_facts", "network_model", "parse_sizes", "perturb", "quiet_pool_worker", "run",
    "scenario_perturbations", "simulate", "step_lower_bound", "step_metrics", "step_sensitivity",
    "straggler_link_findings", "topology_from_file", "topology_report", "topology_warnings",
    "usable_cores", "with_overrides", "write_run",
]  # fmt: skip


def __dir__() -> list[str]:
    """The public names only (PEP 562): ``dir(simulator.api)`` is the api, not its imports."""
    return sorted(__all__)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load a scenario file (alias of :func:`simulator.scenario.load_scenario`), with
    ``overrides`` as ``--set`` takes them.

    >>> s = load("scenarios/examples/pipeline-1f1b.yaml", ["training.global_batch=32"])
    >>> s.num_gpus, s.parallelism.tp, s.parallelism.pp, s.training.global_batch
    (8, 2, 4, 32)
    """
    return load_scenario(path, overrides)


def with_overrides(scenario: Scenario, changes: dict | list[str]) -> Scenario:
    """A changed copy of a loaded scenario, validated as a file with ``--set`` is.

    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> with_overrides(s, {"training.global_batch": 32}).training.global_batch
    32
    """
    from simulator.scenario.loader import with_overrides as rebuilt

    return rebuilt(scenario, changes)


def topology_from_file(
    path: str | Path, accelerator: str = "H100-SXM", overrides: list[str] | tuple[str, ...] = ()
) -> Topology:
    """Build the topology described by a topologies/*.yaml file (NVLink bandwidth not given
    in the file comes from ``accelerator``)."""
    config = load_topology(path, overrides)
    cluster = ClusterConfig(accelerator=get_accelerator(accelerator), topology=config)
    return build_topology(cluster)


def step_lower_bound(scenario: Scenario, reach=None):
    """A lower bound on the simulated step of ``scenario``
    (:func:`simulator.stages.bounds.step_lower_bound`), for the plan search's screen;
    ``reach``: :func:`reach_of` its topology (or a GPU's ingress alone, B/s)."""
    from simulator.stages.bounds import step_lower_bound as bound

    return bound(scenario, reach)


def topology_warnings(scenario: Scenario, topo: Topology | None = None) -> list[str]:
    """Where a study of this scenario would mislead (oversubscription that touches no traffic,
    a NIC faster than its host link, groups straddling the NVLink domain):
    :func:`simulator.plan.topology_warnings.topology_warnings`."""
    return plan_topology_warnings(scenario, topo or build_topology(scenario.cluster))


# -- the staged run: load -> build_plan -> build_step -> perturb -> simulate -> step_metrics --


def build_plan(scenario: Scenario, topo: Topology | None = None) -> Plan:
    """Every layout decision for ``scenario`` (:mod:`simulator.plan.plan`); with ``topo`` the
    collectives are chosen per group as NCCL would (without it, rings).

    >>> plan = build_plan(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> plan.micro_batches, sorted(plan.ranks)  # the ranks simulated: one per stage
    (16, [0, 2, 4, 6])
    """
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
        cm = compute_model.with_framework(fw)
    pp = s.parallelism.pp
    if repeat and steady is None:
        steady = steady_state(plan.schedule, pp, plan.micro_batches, plan.chunks_per_stage)
    if not repeat:
        steady = None
    with paused_gc():  # millions of small immutable tasks: the collector only costs time
        if steady is None:
            return make_step(plan, cm)
        reduced = make_step(plan.with_micro_batches(steady.reduced), cm)
    return dataclasses.replace(reduced, plan=plan, steady=steady)


def nccl_of(plan: Plan) -> dict[int, float]:
    """Each simulated rank's NCCL buffers (B; :mod:`simulator.plan.nccl_memory`)."""
    return {r: nccl_bytes(plan, r) for r in plan.ranks}


def step_metrics(
    sim: Simulation,
    step: StepGraph,
    timeline: pd.DataFrame | None = None,
    nccl: dict[int, float] | None = None,
) -> metrics.StepMetrics:
    """The headline metrics of a simulated step (:class:`simulator.metrics.StepMetrics`);
    ``timeline`` is its memory timeline and ``nccl`` its ranks' NCCL buffers
    (:func:`nccl_of`) when the caller has them already."""
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
        nccl_bytes=nccl_of(step.plan) if nccl is None else nccl,
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
    energy: StepEnergy | None = None  # power and energy (None: no power model for the device)
    power: pd.DataFrame | None = None  # per simulated rank its draw over time (W)
    samples: StepSamples | None = None  # steps drawn under variability (run's ``samples``)

    @property
    def summary(self) -> dict:
        """The metrics as a plain dict (summary.json)."""
        out = self.metrics.as_dict()
        if self.energy is not None:
            out.update(self.energy.as_dict())
        if self.healthy_step_time_s is not None:
            out["healthy_step_time_s"] = self.healthy_step_time_s
            out["straggler_slowdown"] = self.metrics.step_time_s / self.healthy_step_time_s
        if self.samples is not None:
            out["variability"] = self.samples.summary()
        return out


def run(
    scenario: Scenario,
    topo: Topology | None = None,
    compute_model: ComputeModel | None = None,
    track_links: bool = False,
    perturbations: list[Perturbation] | tuple = (),
    steps: StepCache | None = None,
    samples: int = 0,
) -> RunResult:
    """Simulate one steady-state training step of ``scenario``: all the stages in a row.

    ``topo`` and ``compute_model`` default to the scenario's; tests pass idealised ones.
    ``track_links`` records every link's load over time (for the run report).
    ``perturbations`` slow ranks or links (:mod:`simulator.schedule.perturb`), added to the
    scenario's own ``failures.stragglers``; then the healthy step is simulated too, for the
    slowdown. Slowing a rank simulates every rank up to 1,024 GPUs (see :func:`_placed`).
    ``steps`` keeps built steps for later runs (:class:`StepCache`; a sweep's worker).
    ``samples`` > 0 draws that many steps under the scenario's ``variability`` from the one
    simulated (:mod:`simulator.stages.variability`; ``RunResult.samples``).

    >>> result = run(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> sorted(result.trace["stream"].unique())  # a task per row: rank, stream, start, end
    ['compute', 'host', 'pp_bwd', 'pp_fwd', 'tp']
    >>> result.metrics.step_time_s > 0, result.summary["oom"]
    (True, False)
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
        result = _run_once(
            scenario, topo, compute_model, track_links, perturbations, steps, samples
        )
    finally:
        if own:  # built here, used by nothing after: freed now (Topology.release)
            topo.release()
    return dataclasses.replace(result, healthy_step_time_s=healthy)


def _run_once(
    scenario, topo, compute_model, track_links, perturbations, steps=None, samples=0
) -> RunResult:
    step, sim = _simulated(scenario, topo, compute_model, track_links, perturbations, steps)
    result = _result(scenario, step, sim, track_links)
    if samples:
        drawn = step_samples(
            step, sim.task_times, result.metrics.step_time_s, scenario.variability, samples,
            scenario.seed,
        )  # fmt: skip
        result = dataclasses.replace(result, samples=drawn)
    return result


def _simulated(scenario, topo, compute_model, track_links, perturbations, steps=None):
    """The step of ``scenario`` built and simulated: (StepGraph, Simulation); a steady state
    that does not repeat is tried longer, then given up for every micro-batch."""
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
            return step, simulate(step, topo, perturbations, track_links)
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


@dataclass(frozen=True)
class StepSensitivity:
    """What the job-level model reads of the step beyond its time: ``slow_costs``, the
    step's multiplier with one GPU ``slow_factor`` times slower at each pipeline stage, and
    ``speeds``, the step-time multiplier of each of ``fleets`` draws of the scenario's
    variability (a new set of GPUs each; :mod:`simulator.stages.variability`)."""

    step_time_s: float
    slow_factor: float
    slow_costs: np.ndarray
    speeds: np.ndarray


def step_sensitivity(
    scenario: Scenario, topo: Topology, slow_factor: float, fleets: int = 8, steps: int = 4
) -> StepSensitivity:
    """:class:`StepSensitivity` of ``scenario`` from one simulated step, re-timed (with the
    scenario's stragglers placed as :func:`run` places them)."""
    scenario, perturbations = _placed(scenario, scenario_perturbations(scenario))
    step, sim = _simulated(scenario, topo, None, False, perturbations)
    base = step_metrics(sim, step).step_time_s
    r = retimable_step(step, sim.task_times)  # the dependency graph, built once for both
    costs = slow_gpu_costs(step, r, slow_factor)
    speeds = fleet_speeds(step, r, base, scenario.variability, fleets, steps, scenario.seed)
    return StepSensitivity(base, slow_factor, costs, speeds)


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
    UNREAD = {
        "cluster": {"topology"}, "name": True, "description": True, "failures": True,
        "variability": True,
    }  # fmt: skip

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


def _result(scenario, step, sim, track_links) -> RunResult:
    """The simulated step's metrics, trace, memory timeline and (tracked) link loads."""
    memory = metrics.memory_timeline(sim.memory_events, step.static_memory)
    nccl = nccl_of(step.plan)
    m = step_metrics(sim, step, memory, nccl)
    links = None
    if track_links:
        links, busiest = _link_report(sim, m.step_time_s)
        m = dataclasses.replace(m, busiest_links=busiest)
    energy = step_energy(sim.frame, scenario, step.compute_model, m.step_time_s)
    return RunResult(
        m,
        sim.frame,
        _on_device(memory, scenario.framework, nccl),
        links,
        energy=energy[0] if energy else None,
        power=energy[1] if energy else None,
    )


def write_run(result: RunResult, out: str | Path, title: str = "", on_file=None) -> list[Path]:
    """Write the run report into ``out``: summary.json, summary.md, the trace table
    (trace.parquet, or trace.csv without pyarrow), trace.json (Perfetto), hta/rank-N.json,
    memory.csv and memory.png, power.csv and power.png (where the device has a power model),
    steps.csv (the drawn steps, with ``samples``), gantt.png (and gantt.svg up to 20,000
    records), and with link tracking links.parquet and links.png. ``on_file(path)`` is called
    as each is written."""
    from simulator.report.run_report import write_report

    return write_report(
        result.summary,
        result.trace,
        result.memory,
        result.links,
        out,
        title,
        on_file,
        power=result.power,
        steps=result.samples.frame if result.samples is not None else None,
    )
