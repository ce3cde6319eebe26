"""The pass durations the plan gives the searched zero-bubble schedules, against the compute
model's own costs of the stage's ops."""

import pytest

from simulator import api
from simulator.model.compute import ComputeModel
from simulator.pipelines.zb_auto import search
from simulator.plan.pass_times import stage_ops
from simulator.scenario import load_scenario_text
from simulator.stages import memory as memory_stage

SCENARIO = """
model: {{layers: 8, hidden: 1024, heads: 16, ffn: 4096, vocab: 32000,
        activation: gelu, norm: layernorm}}
cluster:
  accelerator: H100
  topology: {{kind: fat_tree, nodes: 4, node: {{gpus: 2}}}}
parallelism: {{pp: 4, recompute: {recompute}, pipeline: {{schedule: zb-2p}}}}
training: {{global_batch: 8, micro_batch: 1, seq_len: 1024}}
"""


def _plan(recompute="none"):
    s = load_scenario_text(SCENARIO.format(recompute=recompute))
    return s, api.build_plan(s, api.build_topology(s.cluster))


def test_pass_times_are_the_stage_ops_costs_and_the_orders_are_searched_for_them():
    s, plan = _plan()
    t = plan.schedule.times
    cm = ComputeModel.for_scenario(s)
    layers = {(st.stage, 0): st.chunks[0].layers for st in plan.stages}
    for r in range(4):
        ops, head, _ = stage_ops(s, plan.schedule, layers, r, plan.micro_batch, plan.sharding)
        assert bool(head) == (r == 3)  # the output layer and loss on the last stage only
        assert t.f[r] == pytest.approx(cm.seconds(ops, "f") + cm.seconds(head, "f"), rel=1e-12)
        # W split off: the output layer's weight gradient waits for the W pass too
        b = cm.seconds(ops, "b") + cm.seconds(head, "b")
        assert t.b[r] == pytest.approx(b, rel=1e-12)
        assert t.w[r] == pytest.approx(cm.seconds(ops, "w") + cm.seconds(head, "w"), rel=1e-12)
    # the ends carry more: the embedding (its lookup in F, its gradient in W), the head
    assert t.f[0] > t.f[1] and t.w[0] > t.w[1] and t.b[3] > t.b[1] and t.w[3] > t.w[1]
    # one stage per 2-GPU host: the trip is an activation over the NIC plus a hop's latency
    facts = plan.network
    assert t.comm == pytest.approx(plan.send_bytes / facts.inter_Bps + facts.inter_latency_s)
    orders = search(4, plan.micro_batches, t, 8)[0]
    assert [st.order for st in plan.stages] == list(orders)


def test_full_recompute_adds_the_forward_to_b():
    _, plain = _plan()
    _, full = _plan("full")
    t0, t1 = plain.schedule.times, full.schedule.times
    assert t1.f == t0.f and t1.w == t0.w
    for r in (1, 2):  # the middle stages' forward is all layers
        assert t1.b[r] - t0.b[r] == pytest.approx(t0.f[r], rel=1e-9)
    for r in (0, 3):  # the embedding and the head are not recomputed
        assert 0 < t1.b[r] - t0.b[r] < t0.f[r]


def test_the_memory_report_holds_the_order_run_simulates(monkeypatch):
    # review finding: the ledger built its plan without the network, so the search ran
    # with a free trip and gave other orders than `run` simulates
    from simulator.plan import memory

    s, plan = _plan()
    assert plan.schedule.times.comm > 0
    seen = []
    real = memory_stage.memory_ledger

    def spy(arg):
        seen.append(arg)
        return real(arg)

    monkeypatch.setattr(memory_stage, "memory_ledger", spy)
    report = {st: r.total for r in api.memory_report(s).ranks for st in r.stages}
    (ledger_plan,) = seen
    assert [st.order for st in ledger_plan.stages] == [st.order for st in plan.stages]
    assert report == {r.stages[0]: r.total for r in memory.memory_ledger(plan)}
