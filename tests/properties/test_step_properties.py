"""Invariants of simulated training steps built from real scenarios: no overlap on a stream,
every task after its dependencies, deterministic traces, and the memory timeline matching the
ledger where the ledger is exact."""

import pytest

from simulator import api
from simulator.engine.executor import Executor
from simulator.model.compute import ComputeModel
from simulator.plan.memory import memory_ledger
from simulator.plan.plan import build_plan
from simulator.scenario import load_scenario_text
from simulator.schedule.step import build_step

CASES = [
    ("1f1b", 0, "none", 1),
    ("interleaved", 1, "selective", 2),
    ("zb-h1", 2, "full", 1),
    ("zb-h2", 3, "none", 1),
    ("gpipe", 3, "full", 1),
    ("zb-1p", 3, "full", 1),  # searched for the plan's pass times
    ("zb-2p", 2, "selective", 1),
    ("zb-v", 1, "none", 1),  # a V: two chunks per stage, the turn on the last
]


def _scenario(schedule, zero, recompute, v):
    return load_scenario_text(f"""
model: {{name: llama3-8b, layers: 8}}
cluster: {{accelerator: H100, topology: {{include: topologies/dgx-h100-superpod.yaml, nodes: 2}}}}
parallelism: {{tp: 2, pp: 2, zero: {zero}, recompute: {recompute}, sequence_parallel: true,
              pipeline: {{schedule: {schedule}, virtual_stages: {v}}}}}
training: {{global_batch: 16, micro_batch: 1, seq_len: 2048}}
""")


class _Recording(Executor):
    """Remembers each task's start and end."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.times = {}

    def _finish(self, i, start):
        self.times[i] = (start, self.env.now)
        super()._finish(i, start)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_streams_and_causality_on_real_steps(case):
    s = _scenario(*case)
    topo = api.build_topology(s.cluster)
    model = api.network_model(topo)
    step = build_step(build_plan(s), ComputeModel.for_accelerator(s.cluster.accelerator))
    env, _, runner = model.new_run()
    ex = _Recording(
        env, step.graph, runner, {r: r for r in range(step.plan.grid.size)}, model.locality
    )
    ex.run()
    by_stream = {}
    for i, t in enumerate(step.graph.tasks):
        start, end = ex.times[i]
        assert start <= end
        for d in t.deps:
            assert start >= ex.times[d][1] - 1e-15, (t.name, step.graph.tasks[d].name)
        by_stream.setdefault((t.rank, t.stream), []).append((start, end))
    for spans in by_stream.values():  # in stream order, each starts after the previous ends
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1e-15


@pytest.mark.parametrize("case", CASES[:2], ids=[c[0] for c in CASES[:2]])
def test_same_scenario_same_trace(case):
    a = api.run(_scenario(*case)).trace
    b = api.run(_scenario(*case)).trace
    assert a.equals(b)


def test_timeline_peak_matches_the_ledger_without_recompute():
    # DDP, no recompute, one micro-batch in flight: the ledger's sum (state + one
    # micro-batch's activations + logits) is what the timeline reaches at the loss.
    s = load_scenario_text("""
model: megatron-1.7b
cluster: {accelerator: A100-80GB, topology: {include: topologies/dgx-a100-superpod.yaml, nodes: 1}}
parallelism: {zero: 0}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048, flash_attention: false}
precision: zero-mixed
""")
    [ledger] = memory_ledger(s)
    assert api.run(s).summary["peak_memory_bytes"] == pytest.approx(ledger.total, rel=1e-9)
