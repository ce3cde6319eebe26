"""Resolving a scenario's failures section into the job model: counts, costs, stragglers."""

import math

import numpy as np
import pytest

from simulator.failures.job import simulate_job
from simulator.failures.model import resolve_job, straggler_slowdown
from simulator.scenario import load_scenario_text

SCENARIO = """\
model: llama3-8b
cluster: {accelerator: H100, gpus: 64}
parallelism: {tp: 8, pp: 2}
training: {global_batch: 64, micro_batch: 1, seq_len: 4096}
failures:
  causes:
    gpu: {rate: 1 / 64 / d, per: gpu}
    node: {rate: 2 / 8 / d, per: node, takes_out: host}
    sw: {rate: 1 / d, per: job, takes_out: software, detected_by: watchdog}
  detection: {diagnosis: 30 s}
  restart: {scheduling: 1 min, process_start: 1 min, init_fixed: 5 s, init_per_rank: 1 ms}
  checkpoint: {write_bandwidth: 100 GB/s, read_bandwidth: 200 GB/s, overhead: 2 s}
"""


def _model(extra: str = "", step: float = 2.0, state: float = 1e12):
    s = load_scenario_text(SCENARIO + extra)
    return resolve_job(s, step, state)


def test_rates_counts_and_costs():
    m = _model()
    day = 86400.0
    np.testing.assert_allclose(m.cause_rate_s * day, [1.0, 2.0, 1.0], rtol=1e-12)
    assert m.cause_nodes_out.tolist() == [1, 1, 0]  # GPU and host take a node, software none
    # heartbeat 15 s or NCCL watchdog 600 s, plus 30 s diagnosis
    assert m.cause_detect_s.tolist() == [45.0, 45.0, 630.0]
    assert m.pause_s == pytest.approx(2 + 1e12 / 100e9)  # blocking: overhead + bytes / write bw
    # restart: 60 + 60 + 5 + 64 x 1 ms + load 1e12 / 200e9
    assert m.restart_s(64) == pytest.approx(60 + 60 + 5 + 0.064 + 5.0)
    assert m.dp == 4 and m.gpus_per_replica == 16 and m.nodes == 8


def test_default_interval_is_daly_rounded_up_to_whole_steps():
    m = _model()
    delta, mtti = m.pause_s, 86400.0 / 4
    x = delta / (2 * mtti)
    daly = math.sqrt(2 * delta * mtti) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    assert daly <= m.interval_s < daly + 2.0  # 2 s steps
    assert m.interval_s / 2.0 == pytest.approx(round(m.interval_s / 2.0))


def test_async_checkpoint_pauses_for_the_copy_and_drains_later():
    m = _model()
    a = resolve_job(
        load_scenario_text(SCENARIO.replace("overhead: 2 s", "overhead: 2 s, mode: async")),
        2.0,
        1e12,
    )
    assert a.pause_s == pytest.approx(2 + 1e12 / 64 / 64e9)  # each GPU's share over PCIe
    assert a.drain_s == pytest.approx(1e12 / 100e9)
    assert a.pause_s < m.pause_s


def test_node_rate_is_one_cause_per_node():
    text = SCENARIO.split("  causes:")[0] + "  node_rate: 6.5 / 1000 / d\n"
    m = resolve_job(load_scenario_text(text), 2.0, 1e12)
    assert m.cause_names == ("node",)
    assert m.cause_rate_s[0] * 86400 == pytest.approx(8 * 6.5e-3, rel=1e-12)


def test_random_straggler_inflation_matches_sampling_per_step():
    # 1,024 GPUs, each slow in a step with probability 2e-4, 3x slower when slow
    gpus, fraction, factor = 1024, 2e-4, 3.0
    gen = np.random.default_rng(0)
    steps = 200_000
    slow = gen.binomial(gpus, fraction, size=steps) > 0
    sampled = np.where(slow, factor, 1.0).mean()
    # 200,000 steps: the sampled mean has a standard error ~0.0015 (p ~ 0.185)
    assert straggler_slowdown(fraction, factor, 1.0, gpus) == pytest.approx(sampled, abs=0.006)


def test_random_stragglers_slow_the_job_by_their_expected_inflation():
    extra = "  stragglers: {random: {fraction: 0.001, factor: 2}}\n"
    text = SCENARIO.split("  causes:")[0] + extra
    m = resolve_job(load_scenario_text(text), 2.0, 1e12)
    expected = 1 + (1 - (1 - 0.001) ** 64)  # a step is 2x when any of 64 GPUs is slow
    assert m.slowdown == pytest.approx(expected, rel=1e-12)
    r = simulate_job(m, 86400.0, 0)  # no failures: only slowed steps (no checkpoints)
    assert r.ettr == pytest.approx(1 / expected, rel=1e-9)
    assert r.lost_s["degraded"] == pytest.approx(86400 * (1 - 1 / expected), rel=1e-9)


def test_fixed_stragglers_enter_the_step():
    from simulator import api
    from simulator.schedule.perturb import SlowCompute, SlowLink

    extra = (
        "  stragglers:\n"
        "    gpus: [{rank: 5, factor: 2}, {rank: 9, power_cap: 0.8}]\n"
        "    links: [{src: 0, dst: 1, fraction: 0.5}]\n"
    )
    s = load_scenario_text(SCENARIO.split("  causes:")[0] + extra)
    assert s.failures.stragglers.in_step() == [
        ("slow_compute", 5, 2.0),
        ("slow_compute", 9, 1.25),  # capped at 80% of peak: 1 / 0.8 slower
        ("slow_link", 0, 1, 0.5),
    ]
    assert api.scenario_perturbations(s) == [
        SlowCompute(5, 2.0),
        SlowCompute(9, 1.25),
        SlowLink(0, 1, 0.5),
    ]
