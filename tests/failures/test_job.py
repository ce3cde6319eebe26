"""The job over days: accounting, closed forms, spares and repair, elastic, async checkpoints."""

import numpy as np
import pytest

from simulator.failures.job import CATEGORIES, simulate_job
from simulator.failures.montecarlo import simulate_seeds, summarise, sweep_intervals
from simulator.failures.optimum import daly_interval, kokolis_ettr
from tests.failures.helpers import job

DAY = 86400.0


def test_time_adds_up_to_the_wall_clock():
    m = job(
        cause_nodes_out=[1],
        spares=1,
        repair_law="exponential",
        repair_mean_s=DAY,
        maintenance_rate_s=1 / DAY,
        maintenance_duration_s=600.0,
        drain_s=0.0,
    )
    for seed in range(5):
        r = simulate_job(m, 30 * DAY, seed)
        total = r.productive_s + sum(r.lost_s.values())
        assert total == pytest.approx(30 * DAY, rel=1e-9)  # only rounding of float sums
        assert set(r.lost_s) == set(CATEGORIES)


def test_no_failures_only_checkpoints_cost():
    m = job(cause_rate_s=[0.0])
    r = simulate_job(m, 10 * DAY, 0)
    # 3,600 s of training then a 60 s pause, exactly: ETTR = 3600 / 3660 up to the last cycle
    assert r.ettr == pytest.approx(3600 / 3660, abs=3660 / (10 * DAY))


def test_monte_carlo_mean_agrees_with_kokolis_where_its_assumptions_hold():
    # exponential failures, MTTI (10 h) >> restart (10 min) + interval (1 h), no spares to wait
    # for: the first-order formula leaves out failures during restarts and writes, O(lambda w)
    rate, u0, dt, w = 1 / 36000, 600.0, 3600.0, 60.0
    m = job(cause_rate_s=[rate], restart_fixed_s=u0, interval_s=dt, pause_s=w)
    simulated = simulate_seeds(m, 54, 50).per_seed["ettr"].mean()
    assert simulated == pytest.approx(kokolis_ettr(rate, u0, dt, w), rel=0.01)


def test_kokolis_underestimates_when_mtti_nears_restart_plus_interval():
    # MTTI 1 h against 10 min restart + 30 min interval: the linear term overcharges by > 5%
    rate, u0, dt, w = 1 / 3600, 600.0, 1800.0, 60.0
    m = job(cause_rate_s=[rate], restart_fixed_s=u0, interval_s=dt, pause_s=w)
    simulated = simulate_seeds(m, 54, 30).per_seed["ettr"].mean()
    assert simulated > 1.05 * kokolis_ettr(rate, u0, dt, w)


def test_ettr_against_interval_peaks_within_one_grid_step_of_daly():
    # exponential failures, MTTI 3 h, 5 min blocking checkpoints, 10 min restarts
    m = job(cause_rate_s=[1 / 10800], restart_fixed_s=600.0, pause_s=300.0)
    grid = np.arange(1000.0, 6001.0, 500.0)
    sweep = sweep_intervals(m, list(grid), 54, 40)
    best = sweep.loc[sweep["ettr_mean"].idxmax(), "effective_interval_s"]
    assert abs(best - daly_interval(300.0, 10800.0)) <= 500.0  # one grid step (Daly: 2,350 s)
    assert sweep["ettr_mean"].iloc[0] < sweep["ettr_mean"].max() > sweep["ettr_mean"].iloc[-1]


def test_without_spares_a_node_failure_waits_for_its_repair():
    # one failure every ~10 h taking out a node, 1 day fixed repair, no spares: every failure
    # waits repair - detection; with plenty of spares nobody waits
    waiting = job(cause_nodes_out=[1], repair_law="fixed", repair_mean_s=DAY, spares=0)
    spared = job(cause_nodes_out=[1], repair_law="fixed", repair_mean_s=DAY, spares=8)
    w = summarise(simulate_seeds(waiting, 20, 10))
    s = summarise(simulate_seeds(spared, 20, 10))
    assert s["lost_hours_by_category"]["waiting"] == 0.0
    assert w["lost_hours_by_category"]["waiting"] > 0.5 * 20 * 24  # most of the time waiting
    assert s["ettr_mean"] > w["ettr_mean"] + 0.4


def test_elastic_continues_on_fewer_replicas_and_scales_back_up():
    # same failures and repairs: elastic runs degraded (step time for 7 of 8 replicas: 8/7
    # longer) instead of waiting for the repair, then restarts at full size when it is back
    base = dict(cause_nodes_out=[1], repair_law="fixed", repair_mean_s=DAY, spares=0)
    calls = []

    def step_time_for(dp):
        calls.append(dp)
        return 10.0 * 8 / dp

    wait = summarise(simulate_seeds(job(**base), 20, 10))
    elastic = summarise(
        simulate_seeds(job(**base, policy="elastic", step_time_for=step_time_for), 20, 10)
    )
    # it waits only when all but one replica are gone (8 nodes in repair at once: rare)
    waited = elastic["lost_hours_by_category"]["waiting"]
    assert waited < 0.05 * wait["lost_hours_by_category"]["waiting"]
    assert elastic["lost_hours_by_category"]["degraded"] > 0.0
    assert elastic["ettr_mean"] > wait["ettr_mean"] + 0.3
    assert set(calls) <= set(range(1, 8)) and 7 in calls


def test_async_checkpoint_lost_if_the_failure_comes_before_the_drain_ends():
    # async: a 1 s copy pause then a 30 min drain, 30 min interval: each failure loses on
    # average half an interval more than with an instantly durable checkpoint
    blocking = job(pause_s=1.0, drain_s=0.0, interval_s=1800.0)
    slow_drain = job(pause_s=1.0, drain_s=1800.0, interval_s=1800.0)
    b = summarise(simulate_seeds(blocking, 54, 20))["lost_hours_by_category"]["lost_work"]
    a = summarise(simulate_seeds(slow_drain, 54, 20))["lost_hours_by_category"]["lost_work"]
    failures = 54 * 24 / 10  # 1 per 10 h
    # lost work per failure: ~I/2 blocking, ~I/2 + drain async (1,800 s more), in hours
    assert (a - b) / failures == pytest.approx(0.5, rel=0.15)


def test_planned_maintenance_saves_first_and_loses_no_work():
    # only maintenance, once a day at a fixed period: each costs a save (60 s), 10 min down
    # and a restart (600 s); no training is ever rolled back
    m = job(cause_rate_s=[0.0], maintenance_rate_s=1 / DAY, maintenance_duration_s=600.0)
    r = simulate_job(m, 10 * DAY, 3)
    assert r.counts[-1] == 10 and r.lost_s["lost_work"] == 0.0
    completed = r.counts[-1] - 1  # the last one may run past the horizon
    assert completed * 1260.0 <= r.lost_s["maintenance"] <= 10 * 1260.0
