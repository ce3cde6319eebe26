"""The Plan as the step builder's only input: its policy, and a plan for fewer micro-batches
made from the plan itself equal to one planned from a rewritten scenario."""

from __future__ import annotations

import pytest

from simulator.plan.plan import build_plan
from simulator.plan.policy import policy_of
from simulator.scenario import load_scenario


@pytest.mark.parametrize(
    "example",
    [
        "pipeline-interleaved.yaml",
        "pipeline-zb-h1.yaml",
        "pipeline-1f1b.yaml",
        "mixtral-8x22b.yaml",
    ],
)
def test_with_micro_batches_equals_a_replanned_smaller_batch(example):
    s = load_scenario(f"scenarios/examples/{example}")
    plan = build_plan(s)
    count = max(plan.grid.pp, 2)  # the fewest a schedule accepts (interleaved: a multiple of p)
    assert count < plan.micro_batches
    batch = count * s.dp * s.training.micro_batch
    smaller = s.model_copy(
        update={"training": s.training.model_copy(update={"global_batch": batch})}
    )
    expected = build_plan(smaller)
    got = plan.with_micro_batches(count)
    assert got.micro_batches == expected.micro_batches == count
    for a, b in zip(got.stages, expected.stages, strict=True):
        assert a.order == b.order
        assert a.in_flight == b.in_flight
        assert a.static_bytes == b.static_bytes
    # the FLOPs scale with the batch; one rounding of a product apart at most
    assert got.model_flops_per_step == pytest.approx(expected.model_flops_per_step, rel=1e-15)


def test_policy_reads_each_setting_from_the_scenario():
    s = load_scenario(
        "scenarios/examples/llama3-8b-fsdp.yaml",
    )
    s = s.model_copy(
        update={
            "training": s.training.model_copy(
                update={"optimizer": "sgd_momentum", "grad_clip": False}
            ),
            "parallelism": s.parallelism.model_copy(update={"fsdp_prefetch": 3}),
        }
    )
    policy = policy_of(s)
    assert policy.zero == 3 and policy.fsdp_prefetch == 3
    assert policy.optimizer_moments == 1  # SGD with momentum keeps one fp32 moment
    assert policy.optimizer_kernel == "plain" and policy.grad_clip is False
    assert build_plan(s).policy == policy
