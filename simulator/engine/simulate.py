"""Entry points: time one collective, or run a TaskGraph, on a network model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

from simulator.collectives import CollectivePlan, Locality
from simulator.collector import paused_gc
from simulator.engine.clock import Clock
from simulator.engine.collective import CollectiveRunner, KeptPlans, RoutedShapes
from simulator.engine.executor import Executor
from simulator.engine.kept import KeptWithin
from simulator.engine.links import LinkTable
from simulator.engine.network import FlowNetwork
from simulator.engine.network_stats import NetworkStats
from simulator.engine.orbits import link_orbits
from simulator.engine.rating_memory import RatingMemory
from simulator.schedule.taskgraph import TaskGraph
from simulator.trace import Trace

ORBIT_LABELLINGS = 16  # device labellings whose link orbits a NetworkModel keeps


@dataclass
class NetworkModel:
    """What the engine needs of a topology, prepared once and reused across runs.

    ``router.path(src, dst, key)`` gives a flow's edges; ``host_of`` and ``nvls_switch`` say
    where devices sit. Routes, routed collective shapes, plans, link orbits and
    water-fillings' rates are kept here for every run.
    """

    graph: nx.DiGraph
    router: object
    host_of: dict[int, int]
    nvls_switch: dict = field(default_factory=dict)
    torus_shape: tuple[int, ...] | None = None
    links: LinkTable = field(init=False)
    # water-fillings' rates found by the runs so far, for the runs after (made with links)
    ratings: RatingMemory = field(init=False)
    geometry_cache: dict = field(default_factory=dict)
    route_cache: dict = field(default_factory=dict)
    # collectives routed with a run's copies (CollectiveRunner.geometry), and the link
    # orbits of each labelling of the devices met (one object each, so those shapes are
    # found again by the runs that follow: a sweep's points of one layout, failure trials)
    copies_cache: dict = field(default_factory=RoutedShapes)
    plan_cache: dict = field(default_factory=KeptPlans)
    orbits_cache: dict = field(
        default_factory=lambda: KeptWithin(ORBIT_LABELLINGS, lambda key, orbits: 1)
    )
    # the builder's numbering of ``graph``'s links (Topology.own_layout), or None: read them
    # from the graph
    layout: object = None

    def __post_init__(self):
        if self.layout is not None and self.layout.graph is self.graph:
            self.links = LinkTable.from_layout(self.layout)
        else:
            self.links = LinkTable(self.graph)
        self.ratings = RatingMemory(self.links)

    @property
    def locality(self) -> Locality:
        return Locality(self.host_of, self.nvls_switch, self.torus_shape)

    def new_run(
        self,
        track_links: bool = False,
        orbit_labels: Mapping[int, int] | None = None,
        reference: bool = False,
    ) -> tuple[simpy.Environment, FlowNetwork, CollectiveRunner]:
        """A clock, a flow network and a collective runner for one simulation; routes,
        routed collective shapes (those of a run's copies keyed by their devices and the
        run's orbits: :meth:`CollectiveRunner.geometry`), collective plans, link orbits and
        water-fillings' rates (:class:`RatingMemory`) are shared by every run on this model.
        ``orbit_labels`` (device -> label, symmetric mode: the stage of its rank) name the
        equivalent GPUs whose own links a water-filling may keep one of
        (:mod:`simulator.engine.orbits`), where the router can list them.

        ``reference``: the engine with every shortcut off (:mod:`simulator.engine.network`),
        no orbits, and nothing shared with other runs (caches of its own)."""
        env = Clock()
        if reference:
            net = FlowNetwork(env, self.links, track_links, shortcuts=False)
            runner = CollectiveRunner(net, self.router, self.host_of, self.nvls_switch)
            return env, net, runner
        net = FlowNetwork(env, self.links, track_links, self.ratings)
        orbits = self._orbits(orbit_labels) if orbit_labels else None
        runner = CollectiveRunner(
            net,
            self.router,
            self.host_of,
            self.nvls_switch,
            self.geometry_cache,
            self.route_cache,
            orbits,
            self.copies_cache,
            self.plan_cache,
        )
        return env, net, runner

    def _orbits(self, orbit_labels: Mapping[int, int]):
        """:func:`link_orbits` of ``orbit_labels``, one object per labelling (its devices and
        labels, and how many links the router names dominated so far: a table that learns
        its devices as they come names more) and kept, at most ORBIT_LABELLINGS of them."""
        devices = getattr(orbit_labels, "devices", None)  # DeviceLabels: its arrays
        if devices is not None:
            key: tuple = (devices.tobytes(), orbit_labels.labels.tobytes())
        else:
            key = (tuple(orbit_labels.keys()), tuple(orbit_labels.values()))
        find = getattr(self.router, "spread_dominated", None)
        dominated = None if find is None else find(self.links)
        key += (-1 if dominated is None else int(np.count_nonzero(dominated)),)
        orbits = self.orbits_cache.get(key)
        if orbits is None:  # kept, the least recently used dropped past ORBIT_LABELLINGS
            orbits = link_orbits(orbit_labels, self.router, self.links, self.links.capacity)
            self.orbits_cache[key] = orbits
        return orbits


def time_collective(
    model: NetworkModel, plan: CollectivePlan, copies: Sequence[Sequence[int]] = ()
) -> tuple[float, NetworkStats]:
    """Seconds ``plan`` takes alone on the network (with its symmetric ``copies``)."""
    env, net, runner = model.new_run(track_links=True)
    runner.run(plan, lambda: None, copies)
    env.run()
    return env.now, net.stats


def run_taskgraph(
    model: NetworkModel, graph: TaskGraph, device_of: Mapping[int, int]
) -> tuple[Trace, NetworkStats]:
    """Simulate ``graph`` with ranks placed by ``device_of``; return its trace."""
    trace, stats, _ = run_taskgraph_with_memory(model, graph, device_of)
    return trace, stats


def run_taskgraph_with_memory(
    model: NetworkModel,
    graph: TaskGraph,
    device_of: Mapping[int, int],
    track_links: bool = False,
    interference: float = 0.0,
) -> tuple[Trace, NetworkStats, list[tuple[int, float, float]]]:
    """As :func:`run_taskgraph`, plus the memory events (rank, time s, bytes delta); with
    ``track_links`` the stats also hold each link's load over time. ``interference``: the
    compute slowdown while a rank communicates (:class:`~simulator.engine.executor.Executor`)."""
    run = run_engine(model, graph, device_of, track_links, interference)
    return run.trace, run.stats, run.memory


@dataclass(frozen=True)
class EngineRun:
    """What one run of a TaskGraph gives: the trace, the network's counters, the memory
    events (rank, time s, bytes delta) and the micro-batch of each event's task (-1: none)."""

    trace: Trace
    stats: NetworkStats
    memory: list[tuple[int, float, float]]
    memory_microbatch: list[int]


def run_engine(
    model: NetworkModel,
    graph: TaskGraph,
    device_of: Mapping[int, int],
    track_links: bool = False,
    interference: float = 0.0,
    orbit_labels: Mapping[int, int] | None = None,
    reference: bool = False,
) -> EngineRun:
    """Simulate ``graph`` (arguments as :func:`run_taskgraph_with_memory`; ``orbit_labels``
    and ``reference``, every shortcut off, as :meth:`NetworkModel.new_run`)."""
    env, net, runner = model.new_run(track_links, orbit_labels, reference)
    with paused_gc():
        executor = Executor(env, graph, runner, device_of, model.locality, interference)
        trace = executor.run(progress=True)
        tasks = graph.tasks
        microbatch = [tasks[i].microbatch for i in executor.memory_task]
    return EngineRun(trace, net.stats, executor.memory, microbatch)
