"""The perturbation seam: a slow GPU and a slow link change a step the way physics says."""

import pytest

from simulator import api
from simulator.scenario import load_scenario_text
from simulator.schedule.perturb import SlowCompute, SlowLink, perturb
from simulator.stages import stragglers

TP_JOB = """
model: {layers: 4, hidden: 2048, heads: 16, ffn: 8192, vocab: 1024, activation: gelu,
        norm: layernorm}
cluster:
  accelerator: H100
  topology: {kind: nvswitch, node: {gpus: 8}}
parallelism: {tp: 4, dp: 2}
training: {global_batch: 4, micro_batch: 1, seq_len: 2048}
simulation: {mode: full}
"""


def _compute_time(result, rank):
    f = result.trace[(result.trace["rank"] == rank) & (result.trace["kind"] == "compute")]
    return (f["end_s"] - f["start_s"]).sum()


def test_slow_compute_scales_only_that_ranks_tasks():
    s = load_scenario_text(TP_JOB)
    step = api.build_step(api.build_plan(s))
    slowed = perturb(step, [SlowCompute(rank=1, factor=3.0)])
    for a, b in zip(step.graph.tasks, slowed.graph.tasks, strict=True):
        k = 3.0 if (a.rank == 1 and a.kind == "compute") else 1.0
        assert b.duration_s == pytest.approx(a.duration_s * k, rel=1e-15)
    assert perturb(step, []) is step


def test_a_straggler_in_a_tp_group_gates_the_step():
    # Rank 1 is in the first TP group: every layer's all-reduce waits for it, and the second
    # replica waits at the gradient all-reduce, so the step slows by close to k (the
    # communication that does not scale keeps it a little under).
    # without interference a compute task's span is its duration, whatever overlaps it
    s = load_scenario_text(TP_JOB.replace("{mode: full}", "{mode: full, comm_interference: 0}"))
    healthy = api.run(s)
    k = 2.0
    slow = api.run(s, perturbations=[SlowCompute(1, k)])
    ratio = slow.summary["step_time_s"] / healthy.summary["step_time_s"]
    compute_share = _compute_time(healthy, 1) / healthy.summary["step_time_s"]
    # lower bound: the compute part doubles; upper: everything doubles
    assert 1 + (k - 1) * compute_share * 0.95 < ratio <= k
    # the healthy peer of the other replica now waits: its idle time grows
    assert _compute_time(slow, 5) == pytest.approx(_compute_time(healthy, 5), rel=1e-9)


def test_symmetric_mode_refuses_an_unsimulated_rank():
    s = load_scenario_text(TP_JOB.replace("simulation: {mode: full}", ""))
    step = api.build_step(api.build_plan(s))
    with pytest.raises(ValueError, match="not simulated"):
        perturb(step, [SlowCompute(rank=5, factor=2.0)])


def test_a_slow_link_slows_the_collectives_that_cross_it():
    s = load_scenario_text(TP_JOB)
    topo = api.build_topology(s.cluster)
    step = api.build_step(api.build_plan(s, topo))
    healthy = api.step_metrics(api.simulate(step, topo), step)
    src, dst = 0, next(iter(topo.graph.successors(0)))  # GPU 0's NVLink into the switch
    slowed = api.step_metrics(api.simulate(step, topo, [SlowLink(src, dst, 0.25)]), step)
    assert slowed.step_time_s > healthy.step_time_s
    assert slowed.exposed_comm_fraction > healthy.exposed_comm_fraction
    with pytest.raises(ValueError, match="fraction"):
        SlowLink(src, dst, 0.0)


STRAGGLER = "failures: {stragglers: {gpus: [{rank: 5, factor: 2}]}}"


def test_configured_straggler_reports_the_slowdown():
    s = load_scenario_text(TP_JOB.replace("simulation: {mode: full}", STRAGGLER))
    r = api.run(s)
    assert r.summary["healthy_step_time_s"] == pytest.approx(
        api.run(load_scenario_text(TP_JOB)).summary["step_time_s"], rel=1e-12
    )
    assert r.summary["straggler_slowdown"] == pytest.approx(
        r.summary["step_time_s"] / r.summary["healthy_step_time_s"]
    )
    assert 1.5 < r.summary["straggler_slowdown"] <= 2.0
    assert r.summary["simulated_ranks"] == 8  # a small job: every rank simulated


def test_large_jobs_slow_the_stragglers_stage_representative(monkeypatch):
    # Past FULL_MODE_MAX_GPUS a slow rank stands for its stage in every replica: synchronous
    # training makes every replica wait for it at the gradient all-reduce. Here that
    # approximation gives the full simulation's step time exactly.
    s = load_scenario_text(TP_JOB.replace("simulation: {mode: full}", STRAGGLER))
    full = api.run(s).summary["step_time_s"]
    monkeypatch.setattr(stragglers, "FULL_MODE_MAX_GPUS", 4)
    approx = api.run(s)
    assert approx.summary["simulated_ranks"] == 1
    assert approx.summary["step_time_s"] == pytest.approx(full, rel=1e-9)


def test_a_straggler_in_another_replica_costs_the_healthy_ones_only_waiting():
    # Rank 5 is in the second DP replica: rank 1 (first replica) computes as fast as before
    # and waits for rank 5 at the gradient all-reduce instead.
    # (without interference, so that a compute task's span is its duration)
    quiet = "simulation: {comm_interference: 0}"
    s = load_scenario_text(TP_JOB.replace("simulation: {mode: full}", STRAGGLER + "\n" + quiet))
    no_interference = TP_JOB.replace("{mode: full}", "{mode: full, comm_interference: 0}")
    healthy = api.run(load_scenario_text(no_interference))
    slow = api.run(s)
    assert _compute_time(slow, 1) == pytest.approx(_compute_time(healthy, 1), rel=1e-9)
    waited = slow.trace[(slow.trace["rank"] == 1) & (slow.trace["name"] == "dp_all_reduce")]
    before = healthy.trace[
        (healthy.trace["rank"] == 1) & (healthy.trace["name"] == "dp_all_reduce")
    ]
    assert waited["start_s"].min() > before["start_s"].min() * 1.5


def test_down_links_and_ranks_outside_the_job_are_refused():
    s = load_scenario_text(
        TP_JOB.replace(
            "simulation: {mode: full}",
            "failures: {stragglers: {links: [{src: 0, dst: nvswitch0, down: true}]}}",
        )
    )
    with pytest.raises(ValueError, match="down needs rerouting"):
        api.run(s)
    with pytest.raises(ValueError, match="not in the job"):
        api.run(load_scenario_text(TP_JOB), perturbations=[SlowCompute(99, 2.0)])


def test_stragglers_of_one_stage_in_different_replicas_do_not_multiply(monkeypatch):
    # Review finding: standing in for their stage, two 1.2x GPUs of different replicas became
    # one rank slowed 1.44x; synchronous replicas wait for the slowest: 1.2x.
    monkeypatch.setattr(stragglers, "FULL_MODE_MAX_GPUS", 4)
    s = load_scenario_text(TP_JOB.replace("simulation: {mode: full}", ""))
    _, placed = stragglers._placed(
        s, [SlowCompute(1, 1.2), SlowCompute(5, 1.2), SlowCompute(6, 1.1)]
    )
    assert placed == [SlowCompute(0, 1.2)]
