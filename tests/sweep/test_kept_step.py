"""A worker keeps the step it built last: a point that builds the same graph reuses it, and
reusing it must not change a result."""

import pytest

from simulator import api
from simulator.stages import step_build
from simulator.sweep import adapter

# Four DGX A100 nodes, two per leaf (the leaves' uplinks carry the data-parallel rings, so
# oversubscription changes the step, but not the first inter-host hop the plan reads),
# TP 2 x PP 2 x DP 8.
SCENARIO = "scenarios/examples/ddp-megatron-1.7b.yaml"
BASE = ["cluster.topology.nodes_per_leaf=2", "parallelism.tp=2", "parallelism.pp=2"]


def _load(*extra: str):
    return api.load(SCENARIO, [*BASE, *extra])


@pytest.fixture(autouse=True)
def empty_keep(monkeypatch):
    """Each test starts with no kept step or topology and leaves none behind."""
    monkeypatch.setattr(adapter, "_steps", api.StepCache(size=1))
    monkeypatch.setattr(adapter, "_kept", type(adapter._kept)())


def test_a_fabric_change_that_leaves_the_plan_alone_reuses_the_step_and_gives_the_fresh_result():
    first, second = _load(), _load("cluster.topology.oversubscription=[4, 1]")
    assert (
        api.build_plan(first, api.build_topology(first.cluster)).network
        == api.build_plan(second, api.build_topology(second.cluster)).network
    )  # the facts the build reads are the same
    adapter.simulate(first)
    kept, _ = adapter.simulate(second)
    assert adapter._steps.hits == 1
    fresh = api.run(second).summary
    # oversubscription 4:1 slows the cross-leaf rings: the kept step ran on the new fabric
    assert kept["step_time_s"] > api.run(first).summary["step_time_s"]
    assert kept == fresh


def test_changes_the_build_reads_build_anew():
    cache = api.StepCache(size=4)
    points = [
        _load(),
        _load("training.global_batch=64"),  # the scenario (fewer micro-batches)
        _load("cluster.topology.nic_bandwidth=100 Gb/s"),  # the facts (inter-host bandwidth)
        _load("cluster.accelerator=A100-SXM4-40GB"),  # the compute model's GPU
    ]
    for s in points:
        api.run(s, steps=cache)
    assert cache.hits == 0
    for s in points:
        assert api.run(s, steps=cache).summary == api.run(s).summary
    assert cache.hits == len(points)


def test_a_kept_step_carries_the_new_runs_plan():
    cache = api.StepCache(size=1)
    first, second = _load(), _load("cluster.topology.oversubscription=[2, 1]")
    plan = api.build_plan(second, api.build_topology(second.cluster))
    cache.build(api.build_plan(first, api.build_topology(first.cluster)), True)
    step = cache.build(plan, True)
    assert cache.hits == 1
    assert step.plan is plan


def test_at_most_size_steps_are_kept():
    cache = api.StepCache(size=2)
    for batch in (32, 64, 128):
        s = _load(f"training.global_batch={batch}")
        cache.build(api.build_plan(s, api.build_topology(s.cluster)), True)
    assert len(cache._kept) == 2
    s = _load("training.global_batch=32")  # the oldest, dropped
    cache.build(api.build_plan(s, api.build_topology(s.cluster)), True)
    assert cache.hits == 0


def test_fields_the_build_never_reads_share_the_step(monkeypatch):
    # its name and a failures section (stragglers slow a built step afterwards) leave the
    # graph alone; a kept step is built once, and the slowed run is still the fresh one's
    cache = api.StepCache(size=1)
    first = _load("name=a")
    slowed = _load("name=b", "failures={stragglers: {gpus: [{rank: 0, factor: 1.5}]}}")
    a = api.run(first, steps=cache).summary
    b = api.run(slowed, steps=cache).summary
    assert cache.hits >= 1
    assert b == api.run(slowed).summary
    assert b["step_time_s"] > a["step_time_s"]


def test_a_new_build_makes_room_before_it_starts(monkeypatch):
    # the review: a miss built the new graph beside the kept one, twice the memory
    cache = api.StepCache(size=1)
    seen = []
    real = api.build_step

    def build(*args, **kwargs):
        seen.append(len(cache._kept))
        return real(*args, **kwargs)

    monkeypatch.setattr(step_build, "build_step", build)  # where StepCache finds it
    for batch in (32, 64):
        s = _load(f"training.global_batch={batch}")
        cache.build(api.build_plan(s, api.build_topology(s.cluster)), True)
    assert seen == [0, 0] and len(cache._kept) == 1
