"""Later runs on one network model find the rates earlier runs water-filled
(:class:`~simulator.engine.network.RatingMemory`) and are the runs a fresh model gives, to
the bit and to the engine's counters."""

import simpy

from simulator import api
from simulator.engine import network
from simulator.engine.network import FlowNetwork, LinkTable, RatingMemory

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
        real = getattr(network, name)

        def spy(*args, _real=real, _name=name):
            filled.append(_name)
            return _real(*args)

        monkeypatch.setattr(network, name, spy)
    return filled


def _counters(result) -> tuple:
    return result.summary["network_rerates"], result.summary["tasks"]


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
