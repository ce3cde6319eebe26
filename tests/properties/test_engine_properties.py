"""Engine invariants on random task graphs and collectives (property tests):
no overlap on a stream, causality, rendezvous, determinism, conservation, monotonicity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.collectives import plan_collective
from simulator.engine import NetworkModel, run_taskgraph, time_collective
from simulator.engine.simulate import run_engine
from simulator.schedule import CommSpec, Task, TaskGraph
from tests.fat_trees import fat_tree as fat_tree_topology

TOPO = fat_tree_topology(
    nodes=2, gpus_per_node=4, nodes_per_leaf=1, rail_optimized=False, oversubscription=(2,)
)
STREAMS = ["compute", "comm0", "comm1"]


def _model(scale: float = 1.0) -> NetworkModel:
    g = TOPO.graph.copy()
    for _, _, d in g.edges(data=True):
        d["bandwidth"] *= scale
    return NetworkModel(g, TOPO.router, TOPO.host_of)


@st.composite
def task_graphs(draw):
    ranks = draw(st.integers(2, 6))
    g = TaskGraph()
    instance = 0
    for _ in range(draw(st.integers(1, 25))):
        deps = (
            tuple(sorted(set(draw(st.lists(st.integers(0, max(len(g.tasks) - 1, 0)), max_size=3)))))
            if g.tasks
            else ()
        )
        if draw(st.booleans()):
            rank = draw(st.integers(0, ranks - 1))
            g.add(
                Task(
                    rank,
                    "compute",
                    "compute",
                    f"c{len(g.tasks)}",
                    draw(st.floats(0.0, 1e-3)),
                    deps=deps,
                )
            )
        else:
            members = draw(
                st.lists(st.integers(0, ranks - 1), min_size=2, max_size=ranks, unique=True)
            )
            spec = CommSpec(
                draw(st.sampled_from(["all_reduce", "all_gather", "all_to_all"])),
                tuple(members),
                draw(st.floats(1.0, 1e8)),
                instance,
            )
            stream = draw(st.sampled_from(STREAMS[1:]))
            for r in members:  # members added together; deps only on earlier tasks
                g.add(Task(r, stream, "comm", f"x{instance}", deps=deps, comm=spec))
            instance += 1
    return g, ranks


def _run(graph, ranks, scale=1.0):
    placement = {r: r for r in range(ranks)}
    return run_taskgraph(_model(scale), graph, placement)[0].to_frame()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs())
def test_streams_causality_rendezvous(case):
    graph, ranks = case
    frame = _run(graph, ranks)
    assert len(frame) == len(graph.tasks)  # everything ran
    # No overlap on a stream (records sorted by start on each rank's stream).
    for _, s in frame.sort_values(["start_s", "end_s"]).groupby(["rank", "stream"]):
        assert np.all(s["start_s"].to_numpy()[1:] >= s["end_s"].to_numpy()[:-1] - 1e-15)
    # Causality: a task starts after its dependencies end. Records are in end order, so map
    # task index -> record through (rank, stream, name) which is unique per task here.
    by_key = {(r.rank, r.stream, r.name): r for r in frame.itertuples()}
    for t in graph.tasks:
        mine = by_key[(t.rank, t.stream, t.name)]
        for d in t.deps:
            dep = graph.tasks[d]
            assert mine.start_s >= by_key[(dep.rank, dep.stream, dep.name)].end_s - 1e-15
    # Members of one collective start and end together.
    comm = frame[frame["kind"] == "comm"]
    for _, s in comm.groupby("name"):
        assert s["start_s"].nunique() == 1 and s["end_s"].nunique() == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs())
def test_deterministic(case):
    graph, ranks = case
    a, b = _run(graph, ranks), _run(graph, ranks)
    assert a.equals(b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs(), st.floats(1.0, 8.0))
def test_uniformly_more_bandwidth_never_slows_a_graph(case, scale):
    graph, ranks = case
    base = _run(graph, ranks)["end_s"].max()
    faster = _run(graph, ranks, scale)["end_s"].max()
    assert faster <= base * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["ring", "direct", "tree"]),
    st.integers(2, 8),
    st.lists(st.integers(0, 200), min_size=1, max_size=30),
    st.floats(1.0, 16.0),
)
def test_faster_links_never_slow_a_collective(algo, n, boosted, factor):
    group = list(range(n))
    plan = plan_collective("all_reduce", group, 1e8, algo)
    base = time_collective(_model(), plan)[0]
    g = TOPO.graph.copy()
    edges = list(g.edges)
    for i in boosted:
        g.edges[edges[i % len(edges)]]["bandwidth"] *= factor
    boosted_t = time_collective(NetworkModel(g, TOPO.router, TOPO.host_of), plan)[0]
    assert boosted_t <= base * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["ring", "direct", "halving_doubling"]),
    st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]),
    st.sampled_from([2, 4, 8]),
    st.floats(1.0, 1e9),
)
def test_bytes_sent_equal_bytes_received(algo, kind, n, size):
    model = _model()
    plan = plan_collective(kind, list(range(n)), size, algo, protocol_efficiency=False)
    _, stats = time_collective(model, plan)
    # Every byte crosses each link of its path once: the link counters add up to each
    # transfer's bytes x its path's links (spread fractions included), and what leaves the
    # senders' first links equals what enters the receivers' last links.
    expected = np.zeros(len(model.links))
    total = 0.0
    for phase in plan.phases:
        for j, t in enumerate(phase.transfers):
            for e, w in TOPO.router.spread(t.src, t.dst, j):
                expected[model.links.index[e]] += t.bytes_ * phase.steps * w
            total += t.bytes_ * phase.steps
    assert np.allclose(stats.link_bytes, expected, rtol=1e-9, atol=1e-6)
    sent = sum(
        stats.link_bytes[model.links.index[(d, nb)]]
        for d in range(n)
        for nb in TOPO.graph.successors(d)
    )
    received = sum(
        stats.link_bytes[model.links.index[(nb, d)]]
        for d in range(n)
        for nb in TOPO.graph.predecessors(d)
    )
    # measured on the senders' out-links and the receivers' in-links, independently
    assert sent == pytest.approx(received, rel=1e-9)
    assert sent == pytest.approx(total, rel=1e-9)


# -- the shortcuts change no result: the engine against its reference mode ------------------
# Each shortcut is claimed to give what the plain path gives (lone groups, kept finishes,
# remembered water-fillings, reduced and folded entries, orbits). The reference mode has them
# all off. The tolerance: the plain path re-rates groups whose rates did not change, which
# recomputes their finish from bytes left and may move it by a few ulps (1e-12 relative);
# nothing else may differ.
REL = 1e-9


def _times(run) -> np.ndarray:
    task, start, end = run.trace.runs.arrays()
    order = np.argsort(task, kind="stable")
    return np.stack([np.asarray(task)[order], np.asarray(start)[order], np.asarray(end)[order]])


def _same_times(fast, ref) -> None:
    a, b = _times(fast), _times(ref)
    assert np.array_equal(a[0], b[0])  # the same tasks ran
    scale = max(float(np.abs(b[2]).max(initial=0.0)), 1e-12)
    assert np.allclose(a[1:], b[1:], rtol=REL, atol=REL * scale)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs())
def test_shortcuts_change_no_result(case):
    graph, ranks = case
    placement = {r: r for r in range(ranks)}
    fast = run_engine(_model(), graph, placement)
    ref = run_engine(_model(), graph, placement, reference=True)
    _same_times(fast, ref)


@pytest.mark.parametrize(
    "example, overrides",
    [
        ("pipeline-1f1b.yaml", []),
        ("tp-sp-llama3-70b.yaml", []),
        ("mixtral-8x22b.yaml", []),
        ("gpt3-175b-dgx-a100.yaml", ["training.global_batch=128"]),  # 8 micro-batches
    ],
)
def test_shortcuts_change_no_step(example, overrides):
    # real steps: copies of every group, folded routes (GPT-3's 1,024 GPUs through spines),
    # orbits of equivalent GPUs, rings alone in a node (lone groups), rates remembered
    # across the step's repeated phases; the reference mode takes none of them
    from simulator import api
    from simulator.stages import facts
    from simulator.topology import build_topology

    scenario = api.load(f"scenarios/examples/{example}", overrides)
    topo = build_topology(scenario.cluster)
    step = api.build_step(api.build_plan(scenario, topo))
    n = step.plan.grid.size
    device_of = facts._placement(n, topo.devices, facts._numbered_devices(topo))
    labels = facts._orbit_labels(step.plan, device_of)
    fast = run_engine(facts.network_model(topo), step.graph, device_of, orbit_labels=labels)
    ref = run_engine(facts.network_model(topo), step.graph, device_of, reference=True)
    assert fast.stats.cache_hits > 0 and ref.stats.cache_hits == 0
    assert ref.stats.symmetric_fillings == 0
    if example.startswith(("gpt3", "mixtral")):
        assert fast.stats.symmetric_fillings > 0
    _same_times(fast, ref)
