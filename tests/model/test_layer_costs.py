"""`api.layer_costs` (trainsim costs): per-kernel times that add up to what the step uses."""

import pytest

from simulator import api
from simulator.plan.plan import build_plan
from simulator.scenario import load_scenario
from simulator.schedule.costs import layer_cost


def test_passes_add_up_to_the_step_builders_blocks():
    s = load_scenario("scenarios/examples/tp-sp-llama3-70b.yaml")
    frame = api.layer_costs(s, 3)
    plan = build_plan(s)
    cm = api.compute_model_of(s)  # the step's clock under the power limit, as costs uses
    cost = layer_cost(s.model, 3, plan.micro_batch, plan.sharding, s.parallelism.recompute, cm)
    blocks = [cost.attn_local, cost.attn_remote, cost.ffn]
    by_pass = frame.groupby("pass")["seconds"].sum()
    # the same ops through the same roofline: exact up to summation order
    assert by_pass["forward"] == pytest.approx(sum(b.f for b in blocks), rel=1e-12)
    assert by_pass["input_grad"] == pytest.approx(sum(b.b for b in blocks), rel=1e-12)
    assert by_pass["weight_grad"] == pytest.approx(sum(b.w for b in blocks), rel=1e-12)


def test_bounds_and_recompute():
    s = load_scenario("scenarios/examples/tp-sp-llama3-70b.yaml", ["parallelism.recompute=full"])
    frame = api.layer_costs(s)
    gemms = frame[frame["kind"] == "gemm"]
    assert (gemms["bound"] == "compute").all()
    assert (frame[frame["kind"] == "elementwise"]["bound"] == "memory").all()
    recompute = frame[frame["pass"] == "recompute"]
    forward = frame[frame["pass"] == "forward"]
    assert recompute["seconds"].sum() == pytest.approx(forward["seconds"].sum(), rel=1e-12)
    with pytest.raises(ValueError, match="layer 999"):
        api.layer_costs(s, 999)
