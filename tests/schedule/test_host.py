"""The host stream: each rank's CPU issues its GPU tasks in program order, a GPU task starts no
sooner than its launch ends, and the CPU runs at most a launch queue ahead. Small kernels are
host-bound, large ones are not, and CUDA graphs remove the per-kernel cost."""

from __future__ import annotations

import pytest

from simulator import api
from simulator.plan.plan import build_plan
from simulator.scenario import load_scenario_text
from simulator.schedule.step import build_step

NO_HOST = "{name: megatron, cpu_launch_s: 0, cpu_op_forward_s: 0, cpu_op_backward_s: 0}"


def _layers(mb: int, tp: int, framework: str = "megatron", gpus: int = 8, extra: str = ""):
    """A Megatron layer stack (GPT-2 medium's layer shape, 8 layers) on one A100 node."""
    return load_scenario_text(f"""
model: {{layers: 8, hidden: 1024, heads: 16, ffn: 4096, vocab: 50304, activation: gelu,
        norm: layernorm}}
cluster: {{accelerator: A100-80GB, topology: {{kind: nvswitch, node: {{gpus: {gpus}}}}}}}
parallelism: {{tp: {tp}, sequence_parallel: false}}
training: {{global_batch: {max(1, mb * gpus // tp)}, micro_batch: {mb}, seq_len: 512}}
framework: {framework}
{extra}""")


def _host_cost(mb: int, tp: int, framework: str = "megatron") -> float:
    """Step time with the framework's host stream / without any CPU cost."""
    with_host = api.run(_layers(mb, tp, framework)).metrics.step_time_s
    gpu_only = api.run(_layers(mb, tp, NO_HOST)).metrics.step_time_s
    return with_host / gpu_only


def test_every_gpu_task_waits_for_its_launch_in_program_order():
    s = _layers(1, 2)
    step = build_step(build_plan(s), api.compute_model_of(s))
    tasks = step.graph.tasks
    fw = s.framework
    issued = comm = 0.0  # the host's CPU seconds; collectives' launches at one each
    for i, t in enumerate(tasks):
        if t.kind == "host":
            issued += t.duration_s
            continue
        launches = [d for d in t.deps if tasks[d].kind == "host"]
        if t.kind == "comm":  # issued with the next compute launch: no host task of its own
            assert launches == []
            comm += fw.cpu_launch_s
            continue
        if t.duration_s == 0:
            continue
        [launch] = launches
        host = tasks[launch]
        assert host.rank == t.rank and host.stream == "host" and launch < i
        assert host.name == "launch " + t.name
        if t.phase != "optimizer":  # whole kernels, each its op's and its launch's CPU time
            per = fw.cpu_launch_s + (
                fw.cpu_op_forward_s if t.phase == "forward" else fw.cpu_op_backward_s
            )
            assert host.duration_s >= per - 1e-15
    # every CPU second accounted for: kernels' and (all but trailing) collectives' launches
    kernels = issued - comm
    assert 0 < kernels <= issued and comm > 0


def test_the_launch_queue_bounds_how_far_the_cpu_runs_ahead():
    # 4 launches pending per CUDA stream: a launch waits for the oldest pending task of its
    # stream to end once 4 are queued, so at each launch's start at most 4 earlier-issued
    # launches of that stream have not finished (counted in kernels; one op = one kernel)
    depth = 4
    s = _layers(4, 1)
    s = s.model_copy(update={"framework": s.framework.model_copy(update={"launch_queue": depth})})
    result = api.run(s)
    trace = result.trace
    host = trace[trace["kind"] == "host"].sort_values("start_s")
    gpu = trace[(trace["kind"] == "compute") & (trace["end_s"] > trace["start_s"])]
    # the queue gates: a full queue shows as launches that start after their predecessor ended
    gaps = host["start_s"].to_numpy()[1:] - host["end_s"].to_numpy()[:-1]
    assert (gaps > 1e-9).any()
    unbounded = api.run(_layers(4, 1)).trace
    free = unbounded[unbounded["kind"] == "host"]
    # without the bound (1024) the CPU finishes issuing far sooner
    assert free["end_s"].max() < host["end_s"].max()
    assert len(gpu) > depth


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_small_micro_batches_are_host_bound_and_large_ones_are_not(tp):
    # the same sourced constants at every size: the GPU's work per kernel grows with the
    # micro-batch and shrinks with TP, the CPU's stays; with sequence 512 and hidden 1024,
    # micro-batch 1 waits for its launches (>5% of the step), micro-batch 16 does not (<1%)
    costs = [_host_cost(mb, tp) for mb in (1, 4, 16)]
    assert costs[0] > 1.05
    assert costs[2] < 1.01
    assert costs[0] > costs[1] > costs[2] >= 1.0  # the crossover, monotone in between


def test_cuda_graphs_remove_the_host_bound():
    # each block replayed as one graph (10 us) instead of its kernels' launches
    assert _host_cost(1, 2, "fused") < 1.01 < _host_cost(1, 2)


def test_an_eager_single_gpu_step_of_a_350m_model_shows_gpu_gaps():
    # GPT-2 medium (24 layers, hidden 1024, 350M parameters) in eager PyTorch on one H200 at
    # micro-batch 1: the compute stream idles while the CPU issues eager's many small
    # kernels; replayed as CUDA graphs it does not
    def step(framework: str) -> api.RunResult:
        return api.run(
            load_scenario_text(f"""
model: {{layers: 24, hidden: 1024, heads: 16, ffn: 4096, vocab: 50304, activation: gelu,
        norm: layernorm}}
cluster: {{accelerator: H200, topology: {{kind: nvswitch, node: {{gpus: 1}}}}}}
training: {{global_batch: 1, micro_batch: 1, seq_len: 1024}}
framework: {framework}
""")
        )

    eager, graphs = step("pytorch-eager"), step("{name: pytorch-eager, cuda_graphs: true}")
    assert eager.metrics.step_time_s > 1.1 * graphs.metrics.step_time_s
    util = eager.metrics.as_dict()["utilisation"]
    assert util["host"] > 0.3  # the CPU is busy a large share of the step
    assert util["compute"] < graphs.metrics.as_dict()["utilisation"]["compute"]


def test_a_costlier_host_never_speeds_a_step():
    times = []
    for launch in ("0 us", "5 us", "20 us", "80 us"):
        fw = f"{{name: megatron, cpu_launch_s: {launch}}}"
        times.append(api.run(_layers(2, 2, fw)).metrics.step_time_s)
    assert times == sorted(times)
    assert times[-1] > times[0]
