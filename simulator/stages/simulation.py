"""A built step simulated on a topology: the engine's run, its steady state repeated."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.engine import NetworkModel, run_engine
from simulator.engine.steady_state import expand, expand_memory, find_repeat
from simulator.infeasible import InfeasibleError
from simulator.schedule.perturb import Perturbation
from simulator.schedule.step import StepGraph
from simulator.stages.facts import (
    SYMMETRIC_ORBITS,
    _degraded,
    _numbered_devices,
    _orbit_labels,
    _placement,
    network_model,
)
from simulator.stages.steady import NotRepeating
from simulator.topology import Topology
from simulator.trace import rows_array


@dataclass(frozen=True)
class Simulation:
    """What the engine returns for one step: the trace as a DataFrame, the memory events
    (an (n, 3) array of rank, time s, bytes delta), the network statistics and model (for
    link reports).

    >>> from simulator.api import SlowLink, build_plan, build_step, build_topology, load
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> topo = build_topology(s.cluster)
    >>> step = build_step(build_plan(s, topo))
    >>> sim = simulate(step, topo)
    >>> len(sim.frame), sim.memory_events.shape, round(float(sim.frame["end_s"].max()), 4)
    (9456, (1104, 3), 0.4473)
    >>> half = SlowLink(0, "nvswitch0", 0.5)  # GPU 0's NVLink up at half its bandwidth
    >>> round(float(simulate(step, topo, [half]).frame["end_s"].max()), 4)
    0.4488
    """

    frame: pd.DataFrame
    memory_events: np.ndarray
    stats: object
    network: NetworkModel
    # per task of the simulated graph its (start s, end s) as the engine ran it (the graph
    # as built: before a steady state's periods are repeated), for re-timing
    task_times: np.ndarray | None = None


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
    times = _task_times(run.trace, len(step.graph.tasks))
    if step.steady is None:
        frame = run.trace.to_frame()
        return Simulation(frame, rows_array(run.memory, 3), run.stats, model, times)
    # the repetition found and repeated on numbers (task indices, text as codes); the rows
    # made whole once, at the full step's length
    coded = run.trace.coded_frame()
    rep = find_repeat(_gpu_rows(coded, step), step.steady, step.plan.micro_batches)
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
    return Simulation(frame, memory, run.stats, model, times)


def _task_times(trace, n: int) -> np.ndarray:
    """(n, 2) start and end (s) of each of the graph's ``n`` tasks from the engine's runs."""
    task, start, end = trace.runs.arrays()
    out = np.full((n, 2), np.nan)
    out[task, 0], out[task, 1] = start, end
    return out


def _gpu_rows(coded: pd.DataFrame, step: StepGraph) -> pd.DataFrame:
    """``coded``'s GPU tasks: the repetition is the GPU's. A host stream (the CPU's launches)
    runs up to a launch queue ahead of its GPU, into later periods and the step's end, so
    its tasks are left out of the check; where the host sets the pace the GPU's tasks repeat
    only if it does. Its launches are still expanded by their micro-batch."""
    if not step.plan.policy.host:
        return coded
    host = np.fromiter((t.kind == "host" for t in step.graph.tasks), bool, len(step.graph.tasks))
    return coded[~host[coded["task"].to_numpy()]]
