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

import pandas as pd

from simulator import metrics
from simulator.hardware import get_accelerator
from simulator.infeasible import InfeasibleError
from simulator.model.compute import ComputeModel
from simulator.plan.topology_warnings import topology_warnings as plan_topology_warnings
from simulator.scenario import Scenario, load_scenario, load_topology
from simulator.scenario.schema import ClusterConfig
from simulator.schedule.perturb import Perturbation, SlowCompute, SlowLink, perturb
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
from simulator.stages.sensitivity import StepSensitivity, step_sensitivity  # noqa: F401
from simulator.stages.simulation import (  # noqa: F401 - the api's names, re-exported
    Simulation,
    _gpu_rows,
    simulate,
)
from simulator.stages.steady import (  # noqa: F401 - the api's names, re-exported
    NotRepeating,
    _steady_state_retries,
)
from simulator.stages.step_build import StepCache, build_plan, build_step  # noqa: F401
from simulator.stages.step_metrics import nccl_of, step_metrics  # noqa: F401
from simulator.stages.step_run import simulated
from simulator.stages.stragglers import (  # noqa: F401 - the api's names, re-exported
    _placed,
    scenario_perturbations,
    straggler_link_findings,
)
from simulator.stages.variability import (
    StepSamples,
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
    in the file comes from ``accelerator``), with ``overrides`` as ``--set`` takes them.

    >>> pod = topology_from_file("topologies/dgx-h100-superpod.yaml", overrides=["nodes=4"])
    >>> pod.num_devices, pod.meta["kind"]
    (32, 'fat_tree')
    """
    config = load_topology(path, overrides)
    cluster = ClusterConfig(accelerator=get_accelerator(accelerator), topology=config)
    return build_topology(cluster)


def step_lower_bound(scenario: Scenario, reach=None):
    """A lower bound on the simulated step of ``scenario``
    (:func:`simulator.stages.bounds.step_lower_bound`), for the plan search's screen;
    ``reach``: :func:`reach_of` its topology (or a GPU's ingress alone, B/s).

    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> bound = step_lower_bound(s)
    >>> bound.limit, bound.seconds <= run(s).metrics.step_time_s  # set by the pipeline's drain
    ('drain', True)
    """
    from simulator.stages.bounds import step_lower_bound as bound

    return bound(scenario, reach)


def topology_warnings(scenario: Scenario, topo: Topology | None = None) -> list[str]:
    """Where a study of this scenario would mislead (oversubscription that touches no traffic,
    a NIC faster than its host link, groups straddling the NVLink domain):
    :func:`simulator.plan.topology_warnings.topology_warnings`.

    >>> [w] = topology_warnings(load("scenarios/studies/exercise-400b-dense.yaml"))
    >>> w[:78]  # its CP groups are strided by TP 4: two hosts each
    '128 of 128 CP groups (4 ranks each) straddle NVLink domains of 8 GPUs although'
    """
    return plan_topology_warnings(scenario, topo or build_topology(scenario.cluster))


# -- the staged run: load -> build_plan -> build_step -> perturb -> simulate -> step_metrics --


@dataclass(frozen=True)
class RunResult:
    """One simulated step: its metrics, the trace, the memory timeline (DataFrames).

    With perturbations (stragglers, slow links), ``healthy_step_time_s`` is the same step
    without them, for the slowdown.

    >>> slow = "failures={stragglers: {gpus: [{rank: 1, factor: 1.5}]}}"
    >>> result = run(load("scenarios/examples/pipeline-1f1b.yaml", [slow]))
    >>> round(result.summary["straggler_slowdown"], 3), round(result.healthy_step_time_s, 4)
    (1.215, 0.4473)
    """

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
    step, sim = simulated(scenario, topo, compute_model, track_links, perturbations, steps)
    result = _result(scenario, step, sim, track_links)
    if samples:
        drawn = step_samples(
            step, sim.task_times, result.metrics.step_time_s, scenario.variability, samples,
            scenario.seed,
        )  # fmt: skip
        result = dataclasses.replace(result, samples=drawn)
    return result


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
    as each is written.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as out:
    ...     written = write_run(run(load("scenarios/examples/pipeline-1f1b.yaml")), out)
    >>> sorted(p.name for p in written)[:6]
    ['gantt.png', 'gantt.svg', 'hta', 'memory.csv', 'memory.png', 'power.csv']
    """
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
