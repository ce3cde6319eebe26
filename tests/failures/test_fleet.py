"""The node-level job model (failures.fleet, simulator.failures.fleet): counts against closed
forms, conservation of wall-clock time, and each mechanism moving the answer its way."""

from dataclasses import replace

import numpy as np
import pytest

from simulator.failures.fleet import FleetModel, simulate_fleet_job, with_fleet
from simulator.failures.job import CATEGORIES
from simulator.failures.model import JobModel
from simulator.failures.montecarlo import ci95, simulate_seeds, simulate_until
from simulator.scenario.fleet import FleetConfig

DAY = 86400.0
NODES = 64


def _job(node_mtbf_days=20.0, **fleet) -> JobModel:
    """64 nodes of 8 GPUs, one node-removing cause (heartbeat-detected, 5 min to find) and
    no other; 20 s steps, checkpoints every hour (1 min pause)."""
    base = JobModel(
        step_time_s=20.0, gpus=NODES * 8, nodes=NODES, dp=NODES, gpus_per_node=8,
        gpus_per_replica=8, tokens_per_step=1e6, cause_names=("node",),
        cause_rate_s=np.array([NODES / (node_mtbf_days * DAY)]), cause_shape=np.array([1.0]),
        cause_nodes_out=np.array([1]), cause_detect_s=np.array([300.0]),
        maintenance_rate_s=0.0, maintenance_periodic=True, maintenance_duration_s=0.0,
        spares=8, repair_law="fixed", repair_mean_s=0.0, repair_sigma=1.0,
        restart_fixed_s=300.0, init_per_rank_s=0.0, interval_s=3600.0, pause_s=60.0,
        drain_s=0.0, policy="restart_on_spares",
    )  # fmt: skip
    model = with_fleet(base, FleetConfig())
    plain = dict(
        lemon_fraction=0.0, retire_after=None, standbys=4, unfixed_auto=0.0,
        unfixed_manual=0.0, slow_rate_s=0.0,
    )  # fmt: skip
    return replace(model, fleet=replace(model.fleet, **{**plain, **fleet}))


def _counts(model, days=60.0, seeds=20):
    r = simulate_seeds(model, days, seeds)
    node = r.by_cause[r.by_cause["cause"] == "node_failure"]["count"].to_numpy()
    return r, node


def test_node_failures_come_at_each_nodes_rate():
    """Exponential lifetimes, every repair fixing: each node's failures are a Poisson
    process of rate 1/MTBF while it trains (a node out for repair does not fail; the job's
    64 nodes are always in), so the mean count is 64 x 60 / 20 = 192 per seed. 20 seeds:
    the mean's standard error is sqrt(192 / 20) = 3.1; within 4 of them."""
    _, node = _counts(_job())
    assert node.mean() == pytest.approx(192, abs=4 * np.sqrt(192 / 20))


def test_every_second_of_wall_clock_is_accounted_for():
    """Productive time plus every category of loss is the wall clock, seed by seed, with
    slow nodes, lemons, misdiagnosis and an empty pool all at work."""
    model = _job(
        lemon_fraction=0.2, retire_after=2, misdiagnosis=0.3, slow_rate_s=1 / (5 * DAY),
        slow_costs=(1.2, 1.02), standbys=0, speeds=(1.01, 1.03),
    )  # fmt: skip
    model = replace(model, spares=1)
    for seed in range(5):
        res = simulate_fleet_job(model, 30 * DAY, seed)
        total = res.productive_s + sum(res.lost_s[k] for k in CATEGORIES)
        assert total == pytest.approx(30 * DAY, rel=1e-9)


def test_retiring_lemons_cuts_failures():
    """A fifth of the nodes fail 5x as often (the mean rate unchanged); retired after their
    second failure, the job's failures fall well below the count kept by every lemon."""
    lemons = dict(lemon_fraction=0.2, lemon_multiplier=5.0)
    _, kept = _counts(_job(**lemons, retire_after=None))
    _, retired = _counts(_job(**lemons, retire_after=2))
    assert retired.mean() < 0.85 * kept.mean()


def test_a_repair_that_does_not_fix_brings_the_node_back_failing():
    _, fixed = _counts(_job(lemon_multiplier=10.0))
    _, unfixed = _counts(_job(lemon_multiplier=10.0, unfixed_auto=1.0, unfixed_manual=1.0))
    assert unfixed.mean() > 1.5 * fixed.mean()


def test_misdiagnosis_leaves_the_faulty_node_in_the_job():
    """Blaming the wrong node drains a healthy one and keeps the faulty one, which fails
    again at the lemon rate: more failures than with a right diagnosis."""
    _, right = _counts(_job())
    _, wrong = _counts(_job(misdiagnosis=0.5))
    assert wrong.mean() > 1.2 * right.mean()


def test_standbys_save_the_wait_for_the_pool():
    """With no warm standby every replacement waits the pool's 20 min; with standbys (and
    repairs quick enough to refill them) almost none does."""
    none, _ = _counts(_job(standbys=0))
    some, _ = _counts(_job(standbys=8, manual_s=3600.0))
    assert some.per_seed["waiting_h"].mean() < 0.2 * none.per_seed["waiting_h"].mean()


def test_infant_mortality_per_node_fails_fresh_nodes_sooner():
    """Weibull shape 0.5 at the same mean lifetime: each node starts fresh, and a decreasing
    hazard fails fresh nodes early (a renewal process's count exceeds t / mean for such
    lifetimes): more failures over 60 days than the exponential's."""
    _, exponential = _counts(_job(node_mtbf_days=60.0))
    _, infant = _counts(_job(node_mtbf_days=60.0, shape=0.5))
    assert infant.mean() > 1.2 * exponential.mean()


def test_slow_nodes_evicted_only_when_the_step_shows_them():
    """A slow node costing 1% of the step stays (below the 5% threshold); one costing 30%
    is found and drained, which pays for its restarts many times over against keeping it
    (with repairs quick enough that the pool keeps up: a drained node is repaired too)."""
    slow = dict(slow_rate_s=1 / (30 * DAY), slow_threshold=1.05, escalate=0.1)
    hidden, _ = _counts(_job(**slow, slow_costs=(1.01,)))
    shown, _ = _counts(_job(**slow, slow_costs=(1.3,)))
    kept, _ = _counts(_job(**slow, slow_costs=(1.3,), slow_evict=False))
    count = lambda r: r.by_cause[r.by_cause["cause"] == "slow_node"]["count"].mean()  # noqa: E731
    assert count(hidden) == 0 and count(shown) > 10
    assert shown.per_seed["ettr"].mean() > kept.per_seed["ettr"].mean() + 0.02


def test_the_jobs_pace_is_drawn_from_the_fleets():
    """Every run draws its step-time multiplier from ``speeds``: with no failures at all and
    one fleet 2% slow, the job runs at 1/1.02 of the healthy speed, lost as degraded."""
    model = _job(node_mtbf_days=1e9, speeds=(1.02,))
    r = simulate_seeds(model, 10, 2)
    assert r.per_seed["ettr"].mean() == pytest.approx(1 / 1.02 * (3600 / 3660), rel=1e-3)


def test_seeds_auto_runs_until_the_interval_is_narrow():
    model = _job()
    r = simulate_until(model, 30, 0.002, 200)
    assert len(r.per_seed) % 10 == 0 or len(r.per_seed) == 200
    assert ci95(r.per_seed["ettr"].to_numpy()) <= 0.002 or len(r.per_seed) == 200
    wide = simulate_until(model, 30, 0.5, 200)
    assert len(wide.per_seed) == 20  # the fewest judged on: two batches


def test_fleet_defaults_are_the_documented_ones():
    f = with_fleet(_plain(), FleetConfig()).fleet
    assert isinstance(f, FleetModel)
    assert (f.lemon_fraction, f.lemon_multiplier, f.retire_after) == (0.15, 5.0, 3)
    assert (f.auto_s, f.manual_s, f.escalate) == (7200.0, 172800.0, 0.8)
    assert (f.unfixed_auto, f.unfixed_manual, f.standbys, f.pool_wait_s) == (0.4, 0.2, 16, 1200.0)
    # the good nodes' rate averages with the lemons' back to the mean
    assert 0.85 * f.good_rate_s + 0.15 * 5 * f.good_rate_s == pytest.approx(f.node_rate_s)


def _plain() -> JobModel:
    m = _job()
    rate = np.array([NODES / (20 * DAY)])
    return replace(
        m, fleet=None, cause_names=("node",), cause_rate_s=rate, cause_shape=np.array([1.0]),
        cause_nodes_out=np.array([1]), cause_detect_s=np.array([300.0]),
    )  # fmt: skip


def test_the_job_restarts_only_with_every_replacement_in():
    """A failure during a recovery keeps the wait for a replacement still on its way: no
    run begins while a job node's joining time lies ahead (no standbys, no pool, repairs of
    2 h or 2 d)."""
    model = _job(node_mtbf_days=10.0, standbys=0, escalate=0.5)
    model = replace(model, spares=0)
    from simulator.failures.fleet import FleetJob

    starts = []
    original = FleetJob.begin_run

    def watched(self):
        starts.append(self.whole_at - self.env.now)
        original(self)

    FleetJob.begin_run = watched
    try:
        for seed in range(3):
            simulate_fleet_job(model, 30 * DAY, seed)
    finally:
        FleetJob.begin_run = original
    assert starts and max(starts) <= 1e-6


def test_a_job_with_no_node_left_to_bring_in_stalls():
    """Every failure retires its node and nothing replaces it: the job cannot run whole
    again and waits to the end (it does not train on fewer nodes for free)."""
    model = replace(_job(retire_after=1, standbys=0), spares=0)
    r = simulate_seeds(model, 60, 3)
    assert r.per_seed["waiting_h"].mean() > 0.8 * 60 * 24
    assert r.per_seed["ettr"].mean() < 0.1


def test_a_healthy_node_blamed_by_mistake_comes_back_sound():
    """Misdiagnosis drains a healthy node: its failure does not count towards retiring it,
    and repair does not leave it faulty."""
    from simulator.failures.fleet import FleetJob

    model = replace(_job(misdiagnosis=1.0, unfixed_auto=1.0, unfixed_manual=1.0), spares=8)
    job = FleetJob(model, 20 * DAY, 0, False)
    job.run()
    blamed_healthy = (job.failures == 0) & (job.where != 0)  # drained, never counted failing
    assert blamed_healthy.sum() > 10
    assert not job.faulty[blamed_healthy].any()


def test_kept_work_is_priced_at_its_own_speed():
    """A node turning slow late in a run that then fails: the work kept (before the last
    checkpoint) ran at full speed, and is priced so; the mean over a span is piecewise."""
    from simulator.failures.fleet import FleetJob

    job = FleetJob(_job(), DAY, 0, False)
    job.t0, job.speed = 0.0, 1.0
    job.segments_at = [(0.0, 1.0)]
    job.set_speed(100.0, 0.5)
    assert job.mean_speed(50.0) == 1.0
    assert job.mean_speed(200.0) == pytest.approx(0.75)
