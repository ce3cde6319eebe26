"""Re-timing a simulated step (simulator.engine.retime) against the engine itself."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.engine.retime import COMPUTE, retimable, retime

PIPELINE = "scenarios/examples/pipeline-1f1b.yaml"  # PP 4 x TP 2 on one DGX H100


@pytest.fixture(scope="module")
def simulated():
    s = api.load(PIPELINE, ["simulation.mode=full"])
    topo = api.build_topology(s.cluster)
    step = api.build_step(api.build_plan(s, topo))
    sim = api.simulate(step, topo)
    grid = step.plan.grid
    r = retimable(step.graph, sim.task_times, lambda g: len({grid.coords(x)["dp"] for x in g}))
    return s, step, sim, r


def _slowed(r, rank, factor):
    return lambda n, kind: factor if kind == COMPUTE and r.rank[n] == rank else 1.0


def test_factors_of_one_give_back_the_engines_step_to_the_bit(simulated):
    _, step, sim, r = simulated
    assert r.recorded_end == sim.frame["end_s"].max()
    assert retime(r, 1, 1, lambda n, k: 1.0)[0] == r.recorded_end
    assert not (r.lag > 0).any()  # the engine starts every task when its predecessors end


@pytest.mark.parametrize("rank", [0, 2, 7])
@pytest.mark.parametrize("factor", [1.2, 2.0])
def test_a_slowed_rank_retimed_as_the_engine_simulates_it(simulated, rank, factor):
    """Re-timing keeps each collective's recorded duration; the engine re-runs the network
    with the slowed rank's collectives at their new times. Within one device's NVLink the
    contention hardly moves: 0.13% apart at most measured (rank 0, 1.2x); 0.5% allowed."""
    s, _, _, r = simulated
    engine = api.run(s, perturbations=[api.SlowCompute(rank, factor)]).metrics.step_time_s
    base = api.run(s).metrics.step_time_s
    retimed = retime(r, 1, 1, _slowed(r, rank, factor))[0] / r.recorded_end
    assert retimed == pytest.approx(engine / base, rel=5e-3)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(1.0, 3.0), min_size=8, max_size=8))
def test_slower_tasks_never_shorten_the_step(simulated, factors):
    """Monotonicity: every factor >= 1 on a rank gives a step at least the recorded one, and
    at most the largest factor times it (every path stretches at most that much)."""
    _, _, _, r = simulated
    f = np.asarray(factors)
    end = retime(r, 1, 1, lambda n, k: f[r.rank[n]] if k == COMPUTE else 1.0)[0]
    assert r.recorded_end <= end <= f.max() * r.recorded_end * (1 + 1e-12)


def test_columns_are_independent_steps(simulated):
    """Three columns at once equal three re-timings one at a time."""
    _, _, _, r = simulated
    factors = [1.0, 1.3, 2.0]
    together = retime(
        r, 3, 1, lambda n, k: np.array(factors) if (k == COMPUTE and r.rank[n] == 5) else 1.0
    )
    alone = [retime(r, 1, 1, _slowed(r, 5, f))[0] for f in factors]
    assert together.tolist() == alone
