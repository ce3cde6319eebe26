"""``simulation.kernel_tasks``: each compute block becomes one task per kernel, named after
its op, with the op's own duration from the compute model; the step is the same.

The reference for names and durations is the op list of :func:`simulator.model.ops.layer_ops`
costed one op at a time by :class:`ComputeModel` - the same formulas the costs command prints,
taken here without the step builder's blocks."""

import pytest

from simulator import api
from simulator.model.compute import ComputeModel
from simulator.model.ops import Sharding, layer_ops
from simulator.plan.plan import build_plan
from simulator.scenario import load_scenario_text
from simulator.schedule.step import build_step

SCENARIO = """
model: {{layers: 8, hidden: 1024, heads: 16, ffn: 4096, vocab: 1024}}
cluster:
  accelerator: H100
  topology: {{kind: nvswitch, node: {{gpus: 8}}}}
parallelism: {{tp: 2, pp: 2, recompute: {rc}, pipeline: {{schedule: {schedule}}}}}
training: {{global_batch: 8, micro_batch: 1, seq_len: 1024}}
simulation: {{kernel_tasks: {kt}}}
"""

NO_HOST = "cpu_launch_s: 0, cpu_op_forward_s: 0, cpu_op_backward_s: 0"  # no CPU cost


def _text(kt: bool, rc: str = "none", schedule: str = "1f1b") -> str:
    return SCENARIO.format(kt=str(kt).lower(), rc=rc, schedule=schedule)


def _step(kt: bool, rc: str = "none"):
    s = load_scenario_text(_text(kt, rc))
    cm = ComputeModel.for_accelerator(s.cluster.accelerator)
    return s, cm, build_step(build_plan(s), cm)


def _tasks(step, phase, layer=0, mb=0, rank=0):
    return [
        t
        for t in step.graph.tasks
        if t.kind == "compute"
        and t.rank == rank
        and t.phase == phase
        and t.layer == layer
        and t.microbatch == mb
    ]


def test_forward_kernels_are_the_layer_ops_in_order_with_their_own_times():
    s, cm, step = _step(True)
    ops = layer_ops(s.model, 0, 1, 1024, Sharding(tp=2))
    tasks = _tasks(step, "forward")
    assert [t.name for t in tasks] == [o.name for o in ops]
    for t, o in zip(tasks, ops, strict=True):
        assert t.duration_s == pytest.approx(cm.op_seconds(o, "f"), rel=1e-12)
        assert t.flops == pytest.approx(o.f_flops, rel=1e-12)


def test_backward_kernels_run_in_reverse_and_weight_gradients_are_the_gemms():
    s, _, step = _step(True)
    ops = layer_ops(s.model, 0, 1, 1024, Sharding(tp=2))
    names_b = [t.name for t in _tasks(step, "input_grad")]
    assert names_b == [o.name for o in reversed(ops)]
    names_w = [t.name for t in _tasks(step, "weight_grad")]
    # only ops with weights have a weight gradient: the four projections (bias-free norms
    # are counted with no W work by the op model)
    assert names_w == ["mlp_down", "mlp_up", "out_proj", "qkv"]


def test_kernel_tasks_chain_one_after_another():
    _, _, step = _step(True)
    idx = [
        i
        for i, t in enumerate(step.graph.tasks)
        if t.kind == "compute"
        and t.rank == 0
        and t.phase == "forward"
        and t.layer == 0
        and t.microbatch == 0
    ]
    tasks = [step.graph.tasks[i] for i in idx]
    # inside a block (no collective between) each kernel waits for the one before it; the
    # tensor-parallel all-reduce sits between attention_residual and mlp_norm
    for k in range(1, len(idx)):
        if tasks[k].name == "mlp_norm":
            assert idx[k - 1] not in tasks[k].deps
        else:
            assert idx[k - 1] in tasks[k].deps, tasks[k].name


@pytest.mark.parametrize(
    ("rc", "schedule", "framework"),
    [
        ("none", "1f1b", "megatron"),
        ("selective", "1f1b", "megatron"),
        ("full", "1f1b", "megatron"),
        ("none", "dualpipe", "megatron"),  # overlapped passes interleave block by block
    ],
)
def test_same_step_time_and_memory_as_blocks(rc, schedule, framework):
    # the kernels' durations add up to their block's (float sums in another order: 1e-9);
    # without the host's launches, which kernel by kernel start sooner (the test below)
    results = []
    for kt in (False, True):
        text = _text(kt, rc, schedule) + f"framework: {{name: {framework}, {NO_HOST}}}\n"
        results.append(api.run(load_scenario_text(text)).metrics)
    coarse, fine = results
    assert fine.step_time_s == pytest.approx(coarse.step_time_s, rel=1e-9)
    assert fine.peak_memory_bytes == pytest.approx(coarse.peak_memory_bytes, rel=1e-9)
    assert fine.mfu == pytest.approx(coarse.mfu, rel=1e-9)


def test_kernel_tasks_with_a_host_stream_start_each_kernel_as_it_is_issued():
    # CPU-bound eager blocks: issued kernel by kernel, each may start once its own launch is
    # done instead of after the whole block's, so the step is never slower, and faster by
    # less than the blocks' issue time in all (each block's start moves earlier by at most its
    # own issue time)
    runs = []
    for kt in (False, True):
        text = _text(kt, "none", "zb-h1") + "framework: fsdp-eager\n"
        runs.append(api.run(load_scenario_text(text)))
    coarse, fine = runs
    trace = coarse.trace
    issue = (trace["end_s"] - trace["start_s"])[trace["kind"] == "host"].sum()
    t_coarse, t_fine = coarse.metrics.step_time_s, fine.metrics.step_time_s
    assert t_coarse - issue < t_fine <= t_coarse * (1 + 1e-9)
    assert t_fine < t_coarse  # and it does start sooner here
    assert fine.metrics.peak_memory_bytes == pytest.approx(
        coarse.metrics.peak_memory_bytes, rel=1e-9
    )


def test_compute_time_per_pass_is_conserved():
    _, _, coarse = _step(False)
    _, _, fine = _step(True)
    for phase in ("forward", "input_grad", "weight_grad"):
        a = sum(t.duration_s for t in _tasks(coarse, phase))
        b = sum(t.duration_s for t in _tasks(fine, phase))
        assert b == pytest.approx(a, rel=1e-12), phase
        assert len(_tasks(fine, phase)) > len(_tasks(coarse, phase))
