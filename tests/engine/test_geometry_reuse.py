"""Later runs on one network model reuse the collectives routed with a run's copies (keyed by
the copies' devices, the run's link orbits and link tracking) and give the runs a fresh
model gives."""

import dataclasses

import numpy as np

from simulator import api
from simulator.engine import collective
from simulator.engine.placement import DeviceLabels
from simulator.engine.routed import Geometry, devices_key, geometry_bytes, shape_bytes
from simulator.engine.simulate import ORBIT_LABELLINGS
from simulator.stages import facts

SCENARIO = "scenarios/examples/gpt3-175b-dgx-a100.yaml"
# 64 nodes, two stages, 32-rank data-parallel groups through the spines with 7 rail copies
LAYOUT = ["cluster.gpus=512", "cluster.topology.nodes=64", "parallelism.pp=2", "model.layers=12"]


def _counting(monkeypatch):
    routed = []
    real = collective.CollectiveRunner._route_plan

    def count(self, plan, copies, this_run=False):
        routed.append((plan.kind, len(plan.group), this_run))
        return real(self, plan, copies, this_run)

    monkeypatch.setattr(collective.CollectiveRunner, "_route_plan", count)
    return routed


def test_a_later_run_reuses_the_routed_copies_and_is_the_same_run(monkeypatch):
    routed = _counting(monkeypatch)
    scenario = api.load(SCENARIO, [*LAYOUT, "training.global_batch=256"])
    topo = api.build_topology(scenario.cluster)
    first = api.run(scenario, topo)
    assert any(this_run for *_, this_run in routed)  # routed with the run's copies
    routed.clear()
    again = api.run(scenario, topo)
    assert routed == []  # every collective found again
    assert first.trace.equals(again.trace)


def test_another_plan_of_the_same_layout_reuses_them_and_equals_a_fresh_run(monkeypatch):
    routed = _counting(monkeypatch)
    topo = api.build_topology(api.load(SCENARIO, LAYOUT).cluster)
    api.run(api.load(SCENARIO, [*LAYOUT, "training.global_batch=256"]), topo)
    # twice the micro-batches per replica: the same groups, copies and orbits
    other = api.load(SCENARIO, [*LAYOUT, "training.global_batch=512"])
    routed.clear()
    reused = api.run(other, topo).trace
    assert not any(this_run for *_, this_run in routed)
    fresh = api.run(other, api.build_topology(other.cluster)).trace
    assert routed and reused.equals(fresh)  # the fresh model routed them anew: the same run


def test_tracked_links_and_another_layout_route_anew(monkeypatch):
    routed = _counting(monkeypatch)
    scenario = api.load(SCENARIO, [*LAYOUT, "training.global_batch=256"])
    topo = api.build_topology(scenario.cluster)
    api.run(scenario, topo)
    routed.clear()
    api.run(scenario, topo, track_links=True)  # unfolded classes: not the folded ones
    assert any(this_run for *_, this_run in routed)
    routed.clear()
    stages4 = api.load(SCENARIO, [*LAYOUT, "parallelism.pp=4", "training.global_batch=256"])
    api.run(stages4, topo)  # other groups, copies and orbits
    assert any(this_run for *_, this_run in routed)


def test_one_orbits_object_per_labelling():
    scenario = api.load(SCENARIO, LAYOUT)
    model = api.network_model(api.build_topology(scenario.cluster))
    devices = np.arange(512)
    two = DeviceLabels(devices, devices // 256)
    assert model._orbits(two) is model._orbits(DeviceLabels(devices.copy(), devices // 256))
    four = DeviceLabels(devices, devices // 128)
    assert model._orbits(four) is not model._orbits(two)
    as_dict = dict(zip(range(512), (devices // 256).tolist(), strict=True))
    assert model._orbits(as_dict) is model._orbits(dict(as_dict))
    # the same orbits either way
    assert model._orbits(as_dict).of_link.tolist() == model._orbits(two).of_link.tolist()
    for k in range(40):  # at most ORBIT_LABELLINGS kept, the oldest dropped first
        model._orbits(DeviceLabels(devices, devices // 256 + k))
    assert len(model.orbits_cache) == ORBIT_LABELLINGS


def test_routed_shapes_keep_a_budget_of_bytes_oldest_dropped_first():
    import pytest

    from simulator.engine.links import FlowClass

    def shape(n):  # one phase, one class over n links: 2 x 8 n bytes (+ its rating, the same)
        links = np.arange(n, dtype=np.int64)
        cls = FlowClass(links, np.ones(n), 1.0, 0.0, None)
        return [Geometry([cls])]

    def key(name, devices=((1, 2), b"")):  # (shape, first size), as geometry names a run's
        return (("all_reduce", "ring", (0, 1), (devices, 7, False), ((2, 1, 1, True, 0, 2),)), name)

    assert geometry_bytes(shape(10)) == 4 * 8 * 10  # links, counts, rating's two
    assert shape_bytes(key(1.0), shape(10)) == 320
    rows = devices_key((0, 1), [(2, 3), (4, 5)])  # the group and two copies
    assert rows == ((3, 2), np.arange(6, dtype=np.int64).tobytes())
    assert shape_bytes((key(1.0, rows), (0.0, 0.0)), shape(10)) == 320 + 48  # floored
    kept = collective.RoutedShapes(budget=1000)
    kept[key("a")] = shape(10)  # 320 bytes
    kept[key("b")] = shape(10)
    kept[key("c")] = shape(10)
    assert [k[1] for k in kept] == ["a", "b", "c"] and kept.nbytes == 960
    kept[key("d")] = shape(5)  # 1,120 > 1,000: the oldest goes
    assert [k[1] for k in kept] == ["b", "c", "d"] and kept.nbytes == 800
    kept[key("b")] = shape(1)  # replaced in place: its bytes recounted
    assert kept.nbytes == 800 - 320 + 32
    del kept[key("c")]
    assert kept.pop(key("d")) is not None and kept.pop(key("zz"), None) is None
    assert kept.nbytes == 32 and len(kept) == 1
    kept[key("huge")] = shape(100)  # alone over the budget: kept, every other dropped
    assert [k[1] for k in kept] == ["huge"] and kept.nbytes == 3200
    with pytest.raises(TypeError):
        kept.update({key("e"): shape(1)})  # would not count: refused
    kept.clear()
    assert kept.nbytes == 0 and not kept


def test_a_run_is_the_same_whatever_sizes_ran_before_on_the_model():
    # a class's bytes are a fraction of its collective's size, to the last bit a function of
    # it (a 24-rank ZeRO reduce-scatter: 0.95833...34 at one size, ...33 at another): a run
    # after another whose buckets differ gets what it gets on a fresh model
    over = ["cluster.gpus=384", "cluster.topology.nodes=48", "parallelism.pp=2"]
    over += ["training.global_batch=48", "parallelism.zero=1"]
    before = api.load(SCENARIO, [*over, "model.layers=12"])
    after = api.load(SCENARIO, [*over, "model.layers=18"])
    topo = api.build_topology(before.cluster)
    api.run(before, topo)
    warm = api.run(after, topo).trace
    fresh = api.run(after, api.build_topology(after.cluster)).trace
    assert warm.equals(fresh)


def test_a_later_run_plans_nothing_and_a_foreign_locality_keeps_its_own(monkeypatch):
    from simulator.engine import executor

    planned = []
    real = executor.plan_collective

    def count(*args, **kw):
        planned.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(executor, "plan_collective", count)
    scenario = api.load(SCENARIO, [*LAYOUT, "training.global_batch=256"])
    topo = api.build_topology(scenario.cluster)
    first = api.run(scenario, topo)
    assert planned
    planned.clear()
    assert api.run(scenario, topo).trace.equals(first.trace) and planned == []
    model = api.network_model(topo)
    kept = len(model.plan_cache)
    # an executor given a locality that is not its runner's plans for itself
    env, net, runner = model.new_run()
    foreign = dataclasses.replace(model.locality, host_of=dict(model.host_of))
    step = api.build_step(api.build_plan(scenario, topo))
    run = executor.Executor(
        env, step.graph, runner, facts._placement(step.plan.grid.size, topo.devices), foreign
    )
    assert run._known is not model.plan_cache
    run.run()
    assert planned and len(model.plan_cache) == kept
