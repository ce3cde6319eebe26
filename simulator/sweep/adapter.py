"""The sweep's only door into :mod:`simulator.api`: load a scenario, simulate one step.

Kept to a few functions so that a change of the api's shape (staged functions, a frozen
``StepMetrics`` with ``as_dict()``) is one edit here.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from simulator import api
from simulator.pipelines import get_schedule
from simulator.scenario import Scenario
from simulator.scenario.schema import ClusterConfig
from simulator.topology import Topology

# Topologies a worker keeps for the points after (most recent last): points of a sweep mostly
# share their cluster (a plan study, a seed study), and a kept topology keeps what the engine
# learnt about it (its link table, collective routes: :func:`simulator.api.network_model`).
# Two, as a 16K-GPU fabric holds a few hundred MB.
KEPT_TOPOLOGIES = 2
_kept: OrderedDict[str, Topology] = OrderedDict()


def topology_of(cluster: ClusterConfig) -> Topology:
    """``build_topology(cluster)``, reused while this process keeps it (keyed by the resolved
    cluster: the same JSON, the same topology - builders are pure functions of it)."""
    key = cluster.model_dump_json(round_trip=True)
    topo = _kept.pop(key, None)
    if topo is None:
        topo = api.build_topology(cluster)
    _kept[key] = topo
    while len(_kept) > KEPT_TOPOLOGIES:
        _kept.popitem(last=False)[1].release()  # its graph's cycles, freed now
    return topo


# Steps a worker keeps for the points after: points that differ only in fabric fields the
# build does not read (oversubscription, spines, ...) share one task graph
# (:class:`simulator.api.StepCache`). One, as a large step holds a few hundred MB.
_steps = api.StepCache(size=1)


def usable_cores() -> int:
    """CPUs this process may run on (:func:`simulator.api.usable_cores`)."""
    return api.usable_cores()


def quiet_pool_worker() -> None:
    """Initialise a pool worker (:func:`simulator.api.quiet_pool_worker`)."""
    api.quiet_pool_worker()


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """A validated scenario (ScenarioError, with file:line:col, if not)."""
    return api.load_scenario(path, overrides)


def simulate(scenario: Scenario) -> tuple[dict, list[str]]:
    """Simulate one step of ``scenario``: the metrics of ``trainsim run --format json`` and the
    warnings about the study's topology (:func:`simulator.api.topology_warnings`)."""
    topo = topology_of(scenario.cluster)
    warnings = api.topology_warnings(scenario, topo)
    return api.run(scenario, topo=topo, steps=_steps).summary, warnings


def ledger_peak(scenario: Scenario) -> tuple[float, float, str]:
    """(the largest rank's ledger total, its HBM, which ranks) in bytes
    (:func:`simulator.api.ledger_peak`), planned on the kept topology."""
    timed = get_schedule(scenario.parallelism.pipeline.schedule).needs_times
    return api.ledger_peak(scenario, topology_of(scenario.cluster) if timed else None)


def memory_report(scenario: Scenario):
    """The per-rank memory ledger (:func:`simulator.api.memory_report`)."""
    return api.memory_report(scenario)


def reach(scenario: Scenario):
    """What a GPU of the scenario's cluster can receive per second, from anywhere and from
    other hosts (:func:`simulator.api.reach_of`)."""
    return api.reach_of(topology_of(scenario.cluster))


def step_lower_bound(scenario: Scenario, reach=None):
    """A lower bound on the simulated step (:func:`simulator.api.step_lower_bound`)."""
    return api.step_lower_bound(scenario, reach)
