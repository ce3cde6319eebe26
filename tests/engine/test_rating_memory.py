"""Later runs on one network model find the rates earlier runs water-filled
(:class:`~simulator.engine.rating_memory.RatingMemory`) and are the runs a fresh model gives, to
the bit and to the engine's counters."""

import networkx as nx
import numpy as np
import simpy

from simulator import api
from simulator.engine import rating
from simulator.engine.clock import Clock
from simulator.engine.kept import KeptWithin
from simulator.engine.links import FlowClass, LinkTable
from simulator.engine.network import FlowNetwork
from simulator.engine.rating_memory import RatingMemory

SCENARIO = "scenarios/examples/gpt3-175b-dgx-a100.yaml"
# 64 nodes, two stages: data-parallel groups through the spines, sharing links with the
# pipeline sends (components of several groups, water-filled with numpy and in Python)
LAYOUT = [
    "cluster.gpus=512",
    "cluster.topology.nodes=64",
    "parallelism.pp=2",
    "model.layers=12",
    "training.global_batch=256",
]


def _counting(monkeypatch) -> list[str]:
    """Record each water-filling the network runs (the two solvers it calls by name)."""
    filled: list[str] = []
    for name in ("max_min_rates_lists", "max_min_rates_segments"):
        real = getattr(rating, name)

        def spy(*args, _real=real, _name=name):
            filled.append(_name)
            return _real(*args)

        monkeypatch.setattr(rating, name, spy)
    return filled


def _counters(result) -> tuple:
    return result.summary["network_rerates"], result.summary["tasks"]


def _engine_run(scenario, topo):
    """The full step's trace and the engine's counters (water-fillings, cache hits,
    symmetric fillings)."""
    sim = api.simulate(api.build_step(api.build_plan(scenario, topo)), topo)
    stats = sim.stats
    return sim.frame, (stats.rerates, stats.cache_hits, stats.symmetric_fillings)


def test_a_later_run_water_fills_nothing_and_is_the_same_run(monkeypatch):
    filled = _counting(monkeypatch)
    scenario = api.load(SCENARIO, LAYOUT)
    topo = api.build_topology(scenario.cluster)
    first = api.run(scenario, topo)
    assert "max_min_rates_segments" in filled  # large components met
    filled.clear()
    again = api.run(scenario, topo)
    assert filled == []  # every rate found in the model's memory
    assert api.network_model(topo).ratings.crossed  # and the links each key crosses
    assert again.trace.equals(first.trace)
    # the counters count what a fresh run rates, whatever ran before
    assert _counters(again) == _counters(first)
    assert first.summary["network_rerates"] > 0


def test_the_engine_counters_of_a_later_run_are_a_fresh_runs():
    scenario = api.load(SCENARIO, LAYOUT)
    topo = api.build_topology(scenario.cluster)
    frame, counters = _engine_run(scenario, topo)
    again, counters_again = _engine_run(scenario, topo)
    assert again.equals(frame) and counters_again == counters
    assert counters[2] > 0  # symmetric fillings among them, found again and counted


def test_another_scenario_on_the_model_equals_a_fresh_run():
    """A sweep's points: a run after another scenario on the same topology (the same
    collectives, other timing: its fillings meet their groups in other orders) is the run a
    fresh topology gives, trace and counters."""
    plain = api.load(SCENARIO, LAYOUT)
    fresh = _engine_run(plain, api.build_topology(plain.cluster))
    topo = api.build_topology(plain.cluster)
    api.run(api.load(SCENARIO, [*LAYOUT, "simulation.comm_interference=0.6"]), topo)
    frame, counters = _engine_run(plain, topo)
    assert frame.equals(fresh[0]) and counters == fresh[1]


def test_rates_are_reused_only_for_groups_met_in_the_same_order():
    """A water-filling's last bit depends on the order of its groups (weights are added and
    bandwidth taken away class by class): a run that meets two batches in the order B, A
    finishes them when a fresh run does, though an earlier run filled the same pair as A, B
    (with the rates kept by the set of groups, B ended 2 ulp early here)."""
    graph = nx.DiGraph()
    for (u, v), bandwidth in zip([(0, 1), (1, 2), (2, 3)], [0.7, 3.0, 10 / 3], strict=True):
        graph.add_edge(u, v, bandwidth=bandwidth)
    links = LinkTable(graph)
    batch_a = [FlowClass(np.array([0, 1]), np.array([0.3, 3.0]), 1.0, pattern=("a", 0))]
    batch_b = [
        FlowClass(np.array([0, 2]), np.array([0.6, 0.7]), 1.0, pattern=("b", 0)),
        FlowClass(np.array([0]), np.array([0.1]), 1.0, pattern=("b", 1)),
    ]

    def run(order: str, memory: RatingMemory | None):
        clock = Clock()
        net = FlowNetwork(clock, links, memory=memory)
        ends = {}
        for name in order:
            classes = batch_a if name == "A" else batch_b
            net.submit(classes, lambda name=name: ends.__setitem__(name, clock.now))
        clock.run()
        return ends, net.stats.rerates

    fresh = run("BA", None)
    memory = RatingMemory(links)
    assert run("AB", memory)[0] != fresh[0]  # the other order: other bits
    assert run("BA", memory) == fresh
    assert run("BA", memory) == fresh  # and found again in that order


def test_runs_equal_a_fresh_model_when_the_memory_drops_entries_mid_run(monkeypatch):
    scenario = api.load(SCENARIO, LAYOUT)
    fresh = api.run(scenario, api.build_topology(scenario.cluster))
    topo = api.build_topology(scenario.cluster)
    model = api.network_model(topo)
    # room for one entry: keys and rates dropped as soon as the next is kept
    monkeypatch.setattr(model, "ratings", RatingMemory(model.links, budget=1))
    runs = [api.run(scenario, topo) for _ in range(2)]
    for run in runs:
        assert run.trace.equals(fresh.trace)
        assert _counters(run) == _counters(fresh)
    assert len(model.ratings.rates) == 1


def test_a_memory_of_other_links_is_not_read():
    topo = api.build_topology(api.load(SCENARIO, LAYOUT).cluster)
    links = LinkTable(topo.graph)
    memory = RatingMemory(LinkTable(topo.graph))  # equal links, another table
    net = FlowNetwork(simpy.Environment(), links, memory=memory)
    assert net._memory is None
    assert FlowNetwork(simpy.Environment(), links, memory=RatingMemory(links))._memory is not None


def test_an_entry_found_is_dropped_last():
    kept = KeptWithin(2, lambda key, value: 1)
    kept["a"], kept["b"] = 1, 2
    assert kept.get("a") == 1 and kept.get("z", 0) == 0
    kept["c"] = 3  # over budget: the oldest goes, "b" (a was found since)
    assert list(kept) == ["a", "c"] and kept.nbytes == 2
