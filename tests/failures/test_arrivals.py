"""Failure streams: Poisson counts, Weibull shape 1 is exponential, determinism per seed."""

import math

import numpy as np
import pytest

from simulator.failures.arrivals import renewal_times, rng
from simulator.failures.montecarlo import simulate_seeds
from tests.failures.helpers import job

DAY = 86400.0


def test_poisson_counts_match_rate_times_components_times_time():
    # three causes: per-GPU, per-node and per-job rates times their counts (64 GPUs, 8 nodes)
    per_component = np.array([1.0 / (64 * 5 * DAY), 1.0 / (8 * 2 * DAY), 1.0 / (1 * 10 * DAY)])
    counts = np.array([64, 8, 1])
    m = job(
        cause_names=("gpu", "node", "job"),
        cause_rate_s=per_component * counts,
        cause_shape=[1.0, 1.0, 1.0],
        cause_nodes_out=[0, 0, 0],
        cause_detect_s=[0.0, 0.0, 0.0],
    )
    days, seeds = 60, 200
    r = simulate_seeds(m, days, seeds)
    means = r.by_cause.groupby("cause")["count"].mean()
    for name, rate in zip(m.cause_names, m.cause_rate_s, strict=True):
        expected = rate * days * DAY  # 12, 30, 6 per seed
        stderr = math.sqrt(expected / seeds)  # Poisson variance = mean
        assert abs(means[name] - expected) < 4 * stderr, name  # 4 sigma: 1 in 16,000 by chance


def test_weibull_shape_one_is_the_exponential_draw_for_draw():
    a = renewal_times(rng(7, 0), 1 / 3600, 1.0, 30 * DAY)
    b = 3600 * np.cumsum(rng(7, 0).standard_exponential(len(a)))
    np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("shape", [0.7, 2.0])
def test_weibull_gaps_keep_the_mean_and_take_the_shape(shape):
    times = renewal_times(rng(3, 0), 1 / 3600, shape, 20000 * 3600.0)
    gaps = np.diff(times)
    # mean 1/rate whatever the shape (scale = mean / Gamma(1 + 1/k)); ~20,000 gaps, CV <= 1.5
    assert gaps.mean() == pytest.approx(3600, rel=0.03)
    # coefficient of variation of a Weibull: sqrt(G(1+2/k)/G(1+1/k)^2 - 1)
    cv = math.sqrt(math.gamma(1 + 2 / shape) / math.gamma(1 + 1 / shape) ** 2 - 1)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_same_seed_same_result_other_seed_other_result():
    m = job(cause_nodes_out=[1], spares=1, repair_law="exponential")
    a = simulate_seeds(m, 20, 5, first_seed=11)
    b = simulate_seeds(m, 20, 5, first_seed=11)
    c = simulate_seeds(m, 20, 5, first_seed=12)
    assert a.per_seed.equals(b.per_seed) and a.by_cause.equals(b.by_cause)
    ettr_a, ettr_c = a.per_seed["ettr"].to_numpy(), c.per_seed["ettr"].to_numpy()
    np.testing.assert_array_equal(ettr_a[1:], ettr_c[:-1])  # seeds 12-15 in both runs
    assert ettr_a[0] != ettr_c[0]  # seed 11 against seed 12


def test_a_weibull_shape_one_cause_simulates_as_the_exponential_one():
    from simulator.failures.model import resolve_job
    from simulator.scenario import load_scenario_text

    text = """\
model: llama3-8b
cluster: {accelerator: H100, gpus: 16}
training: {global_batch: 16, seq_len: 4096}
failures:
  causes: {gpu: {rate: 1 / 16 / 6 h, LAW}}
"""
    exp = load_scenario_text(text.replace("LAW", "law: exponential"))
    wei = load_scenario_text(text.replace("LAW", "law: weibull, shape: 1"))
    a = simulate_seeds(resolve_job(exp, 1.0, 1e11), 10, 5)
    b = simulate_seeds(resolve_job(wei, 1.0, 1e11), 10, 5)
    assert a.per_seed.equals(b.per_seed)


@pytest.mark.parametrize("law", ["exponential", "lognormal", "fixed"])
def test_repair_times_keep_their_mean(law):
    from simulator.failures.arrivals import RepairTimes

    repairs = RepairTimes(0, law, 2 * DAY, 1.0)
    draws = np.array([repairs.draw() for _ in range(20000)])
    # 20,000 draws, CV <= 1.31 (lognormal sigma 1): standard error of the mean < 1%
    assert draws.mean() == pytest.approx(2 * DAY, rel=0.04)


def test_periodic_maintenance_comes_every_period():
    from simulator.failures.arrivals import maintenance_times

    times = maintenance_times(5, 1 / DAY, True, 54 * DAY)
    assert len(times) == 54 and np.diff(times) == pytest.approx(DAY)
