"""The step-time distribution of `run --steps N` (simulator.stages.variability) and where a
slow GPU sits (the engine's answer, simulator.api.run with a SlowCompute)."""

import numpy as np
import pytest

from simulator import api

TP = "scenarios/examples/tp-sp-llama3-70b.yaml"  # TP 8 with sequence parallelism
ONE_STAGE = ["model.layers=8", "parallelism.pp=1", "training.global_batch=1", "cluster.gpus=8"]
NO_SPREAD = ["variability.gpu_spread=0"]


def _compute_busy(result, rank=0) -> float:
    t = result.trace
    own = t[(t["rank"] == rank) & (t["kind"] == "compute")]
    return float((own["end_s"] - own["start_s"]).sum())


def test_without_variability_every_drawn_step_is_the_simulated_one_exactly():
    s = api.load(TP, [*ONE_STAGE, "variability.gpu_spread=0", "variability.kernel_jitter=0"])
    r = api.run(s, samples=4)
    assert (r.samples.frame["step_time_s"] == r.metrics.step_time_s).all()
    assert r.summary["variability"]["variability_cost"] == 0.0


def test_a_tensor_parallel_group_pays_the_slowest_of_its_draws():
    """Each compute task of a TP-8 group ends when the slowest of 8 GPUs' draws does: the
    step's compute grows by E[exp(sigma * max of 8 normals)] - 1 (7.4% at sigma 0.05),
    which direct draws of 8 normals give independently of the inverse-CDF sampler used.
    The communication is serial with the compute under sequence parallelism, so nothing
    absorbs it: within 1% of that growth (measured 0.03%, 200 steps: the mean's own spread
    is about 0.2% of it)."""
    sigma = 0.05
    s = api.load(TP, [*ONE_STAGE, *NO_SPREAD, f"variability.kernel_jitter={sigma}"])
    r = api.run(s, samples=200)
    z = np.random.default_rng(5).standard_normal((400_000, 8)).max(axis=1)
    growth = np.exp(sigma * z).mean() - 1
    cost = r.samples.frame["step_time_s"].mean() - r.metrics.step_time_s
    assert cost == pytest.approx(_compute_busy(r) * growth, rel=0.01)


def test_a_lone_gpu_pays_only_the_mean_of_its_draws():
    """With no peers to wait for, jitter costs its mean, exp(sigma^2 / 2) - 1 (0.125% at
    0.05): far below the TP group's 7.4%. 1,000 steps: below 0.5% of the step."""
    sigma = 0.05
    one = ["parallelism.tp=1", "parallelism.sequence_parallel=false", "cluster.gpus=1"]
    s = api.load(TP, [*ONE_STAGE, *one, *NO_SPREAD, f"variability.kernel_jitter={sigma}"])
    r = api.run(s, samples=1000)
    cost = r.samples.frame["step_time_s"].mean() / r.metrics.step_time_s - 1
    assert 0 < cost < 0.005


def test_draws_are_determined_by_the_seed():
    over = [*ONE_STAGE, "variability.kernel_jitter=0.05"]
    a = api.run(api.load(TP, over), samples=5).samples.frame
    b = api.run(api.load(TP, over), samples=5).samples.frame
    c = api.run(api.load(TP, [*over, "seed=1"]), samples=5).samples.frame
    assert a.equals(b)
    assert not a["step_time_s"].equals(c["step_time_s"])


def test_the_pacing_gpu_is_the_slowest_of_the_replicas():
    """Four TP-8 replicas (32 GPUs), a persistent spread and no jitter: every step waits at
    the gradient reduction for the replica holding the slowest GPU of 32, and names it.
    The draws are the seed's: one (replicas x peers) normal array per simulated rank."""
    over = [
        "model.layers=4", "parallelism.pp=1", "training.global_batch=4",
        "variability.gpu_spread=0.05", "variability.kernel_jitter=0",
    ]  # fmt: skip
    s = api.load(TP, over)
    r = api.run(s, samples=3)
    z = np.random.default_rng(s.seed).standard_normal((4, 8))
    replica, peer = np.unravel_index(z.argmax(), z.shape)
    grid = api.build_plan(s).grid
    slowest = grid.rank(tp=int(peer), cp=0, dp=int(replica), pp=0)
    assert r.samples.frame["pacing_rank"].tolist() == [slowest] * 3
    assert r.samples.frame["step_time_s"].nunique() == 1  # persistent: the same every step


PIPELINE = "scenarios/examples/pipeline-1f1b.yaml"  # PP 4 x TP 2, 16 micro-batches


@pytest.fixture(scope="module")
def pipeline():
    s = api.load(PIPELINE, ["simulation.mode=full"])
    return s, api.run(s)


def _slow(s, rank, factor=1.5):
    return api.run(s, perturbations=[api.SlowCompute(rank, factor)])


def test_a_slow_gpus_cost_depends_on_where_it_sits(pipeline):
    """1.5x on one GPU of a 4-stage 1F1B pipeline (measured: first stage 1.215x, second
    1.221x, last 1.380x): the last stage's work (the loss and the head) is on the critical
    path of every micro-batch's turn-around, the first stages' slack absorbs part of it;
    its TP peer (rank 1 beside rank 0) costs what rank 0 does - the group waits on either."""
    s, healthy = pipeline
    base = healthy.metrics.step_time_s
    cost = {r: _slow(s, r).metrics.step_time_s / base for r in (0, 1, 7)}
    assert cost[1] == pytest.approx(cost[0], rel=1e-3)
    assert cost[7] > cost[0] + 0.05
    assert all(1.0 < c < 1.5 for c in cost.values())


def test_the_job_loses_more_gpu_time_than_the_slow_gpu_adds(pipeline):
    """A slow GPU's own extra work is (factor - 1) x its compute; everyone who waits on it
    at its collectives loses that time too: the 8-GPU job loses several times more GPU
    time than the slow GPU adds (measured 7.7x for the last stage at 1.5x, 4.9x for the
    first)."""
    s, healthy = pipeline
    slow = _slow(s, 7)
    own = 0.5 * _compute_busy(healthy, 7)
    lost = 8 * (slow.metrics.step_time_s - healthy.metrics.step_time_s)
    assert lost > 4 * own


def test_one_fleet_of_speeds_and_a_straggler_in_the_sensitivity():
    """``api.step_sensitivity`` with one fleet, on a scenario with a straggler on a rank the
    symmetric mode does not simulate (placed as ``run`` places it)."""
    s = api.load(TP, [*ONE_STAGE, "failures.stragglers.gpus=[{rank: 5, factor: 1.5}]"])
    topo = api.build_topology(s.cluster)
    sens = api.step_sensitivity(s, topo, 1.2, fleets=1, steps=2)
    assert len(sens.speeds) == 1 and sens.speeds[0] > 1.0
    assert sens.step_time_s == pytest.approx(api.run(s, topo).metrics.step_time_s)
