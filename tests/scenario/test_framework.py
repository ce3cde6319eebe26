"""``framework:``: presets, overrides, and what each field adds, against closed forms written
from the sources the presets cite (tensor sizes and byte counts, not simulator outputs)."""

import pytest

from simulator import api
from simulator.model.activations import MicroBatch, head_activation_bytes, layer_activation_bytes
from simulator.model.ops import Sharding
from simulator.plan.plan import build_plan
from simulator.scenario import ScenarioError, load_scenario_text
from simulator.scenario.framework import FRAMEWORKS, RUNTIME_BYTES, FrameworkConfig
from simulator.scenario.schema import ModelConfig
from simulator.schedule.step import build_step
from tests.conftest import membound_slope

BASE = """
model: {{name: llama3-8b, layers: 2}}
cluster:
  accelerator: H100
  topology: {{kind: nvswitch, node: {{gpus: 8}}}}
parallelism: {{tp: 2{par}}}
training: {{global_batch: 16, micro_batch: 1, seq_len: 1024}}
precision: {precision}
framework: {framework}
"""


def _scenario(framework="megatron", par="", precision="megatron-bf16"):
    return load_scenario_text(BASE.format(framework=framework, par=par, precision=precision))


def test_presets_and_overrides():
    assert FrameworkConfig().name == "megatron"
    eager = FrameworkConfig.model_validate("fsdp-eager")
    assert eager.swiglu_saved == 4 and eager.grad_accumulation == "add"
    assert not eager.eager_norms and eager.allocator_reserve == 0.0
    tuned = FrameworkConfig.model_validate({"name": "fsdp-eager", "cpu_launch_s": "12 us"})
    assert tuned.cpu_launch_s == pytest.approx(12e-6) and tuned.swiglu_saved == 4
    assert FrameworkConfig().runtime_bytes == RUNTIME_BYTES == 300e6 + 32 * 2**20
    assert set(FRAMEWORKS) == {"megatron", "fsdp-eager", "pytorch-eager", "fused"}


def test_unknown_framework_names_the_line():
    with pytest.raises(ScenarioError) as err:
        _scenario(framework="eagre")
    assert ":9:" in str(err.value) and "unknown framework 'eagre'" in str(err.value)


def test_eager_swiglu_and_norms_keep_more_activations():
    m = ModelConfig(name="llama3-8b", layers=1)
    sh = Sharding(tp=2)
    fused = MicroBatch(1, 1024)
    eager = MicroBatch(1, 1024, swiglu_saved=4, eager_norms=True)
    extra = layer_activation_bytes(m, 0, eager, sh) - layer_activation_bytes(m, 0, fused, sh)
    tokens = 1024
    swiglu = 2.0 * tokens * m.ffn / 2  # one more bf16 ffn-sized tensor, TP-split
    norms = 2 * 4.0 * tokens * m.hidden  # two fp32 input copies, not split without SP
    assert extra == pytest.approx(swiglu + norms, rel=1e-12)
    head_extra = head_activation_bytes(m, eager, sh) - head_activation_bytes(m, fused, sh)
    assert head_extra == pytest.approx(4.0 * tokens * m.hidden, rel=1e-12)  # the final norm


def test_loss_gradients_on_the_last_stage():
    # fsdp-eager: 12 B per logit at the loss's peak, 4 of them the saved fp32 probabilities;
    # megatron: 6 B, the in-place fp32 softmax and its bf16 cast
    mega, eager = _scenario(), _scenario("fsdp-eager")
    logits = 1024 * 128256 / 2  # tokens x vocabulary / tp
    ledger = [api.memory_report(s).ranks[0].buffers for s in (mega, eager)]
    assert ledger[1] - ledger[0] == pytest.approx((12 - 6) * logits, rel=1e-12)


def test_allocator_reserve_and_runtime_in_the_peak():
    s = _scenario("{name: fsdp-eager, allocator_reserve: 0.2}")
    [rank] = api.memory_report(s).ranks
    outside = RUNTIME_BYTES + rank.nccl  # beside the allocator: the runtime, NCCL's buffers
    assert rank.nccl > 0
    assert rank.total == pytest.approx(rank.allocated / 0.8 + outside, rel=1e-12)
    metrics = api.run(s).metrics
    plain = api.run(
        _scenario(
            "{name: fsdp-eager, allocator_reserve: 0.0, runtime_bytes: 0, nccl_buffers: false}"
        )
    ).metrics
    assert metrics.peak_memory_bytes == pytest.approx(
        plain.peak_memory_bytes / 0.8 + outside, rel=1e-12
    )
    assert metrics.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
    # the memory timeline (memory.csv and its plot) shows device memory the same way
    run = api.run(s)
    assert run.memory["bytes"].max() == pytest.approx(run.metrics.peak_memory_bytes, rel=1e-12)


def _forward_attention(s, layer=0, kind="compute", cm=None):
    """The forward attention block's GPU task (``kind`` "compute") or its launch ("host"),
    with the kernel durations of ``cm`` (default: the scenario's)."""
    step = build_step(build_plan(s), cm or api.compute_model_of(s))
    return next(
        t
        for t in step.graph.tasks
        if t.name == ("launch attention" if kind == "host" else "attention")
        and t.phase == "forward"
        and t.layer == layer
    )


def test_cpu_launch_issues_each_block_on_the_host_stream():
    # a 1 ms launch dwarfs every kernel of this small layer: the attention block (norm, QKV,
    # rotary, attention core) is issued by a host task of its kernel count in launches, and
    # the GPU task waits for it; its own duration is the GPU's alone
    slow = _scenario("{name: megatron, cpu_launch_s: 1 ms}")
    launch = _forward_attention(slow, kind="host")
    per_kernel = 1e-3 + slow.framework.cpu_op_forward_s  # the launch and PyTorch's op
    assert launch.stream == "host" and launch.duration_s == pytest.approx(4 * per_kernel)
    gpu = _forward_attention(slow)
    assert gpu.duration_s == pytest.approx(_forward_attention(_scenario()).duration_s, rel=1e-12)
    assert gpu.duration_s < 1e-3
    step = build_step(build_plan(slow), api.compute_model_of(slow))
    assert step.graph.tasks.index(launch) in gpu.deps
    # without a CPU cost no host stream is modelled
    free = _scenario("{name: megatron, cpu_launch_s: 0, cpu_op_forward_s: 0, cpu_op_backward_s: 0}")
    plain = build_step(build_plan(free), api.compute_model_of(free))
    assert not any(t.kind == "host" for t in plain.graph.tasks)


def test_autocast_casts_fp32_weights_each_micro_batch():
    amp = _scenario("pytorch-eager", precision="torch-amp")
    bf16 = _scenario("pytorch-eager", precision="pure-bf16")  # bf16 weights: nothing to cast
    cm = api.compute_model_of(amp)  # one clock for both (the casts change the step's mix)
    dense, _ = build_plan(amp).params_of(0)
    cast = 6.0 * dense / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s  # read 4 B, write 2 B
    diff = _forward_attention(amp, cm=cm).duration_s - _forward_attention(bf16, cm=cm).duration_s
    assert diff == pytest.approx(cast, rel=1e-9)


def _weight_grads(s):
    step = build_step(build_plan(s), api.compute_model_of(s))
    return [
        t.duration_s
        for t in step.graph.tasks
        if t.name == "weight_grad" and t.layer == 0 and t.rank == 0
    ]


@pytest.mark.parametrize("zero", [0, 3])
def test_eager_gradient_accumulation_adds_after_the_first_micro_batch(zero):
    s = _scenario("fsdp-eager", par=f", zero: {zero}")
    plan = build_plan(s)
    cm = api.compute_model_of(s)
    w = _weight_grads(s)
    assert len(w) == plan.micro_batches == 4  # global batch 16 over dp 4, one per micro-batch
    assert w[1] == w[2] == w[3]  # every later micro-batch adds the same
    dense, _ = plan.params_of(0)
    kept = dense / plan.dense_shard_ranks if zero >= 2 else dense  # FSDP adds over its shard
    add = 3 * plan.grad_bytes_per_param * kept / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s
    assert w[1] - w[0] == pytest.approx(add, rel=1e-9)
    fused = _weight_grads(_scenario("megatron", par=f", zero: {zero}"))
    assert fused[0] == fused[1] == fused[3]  # accumulated inside the wgrad GEMM


@pytest.mark.parametrize("value", ["{name: []}", "[1]", "3", "{name: fused, swiglu_saved: 9}"])
def test_malformed_framework_is_a_located_error(value):
    with pytest.raises(ScenarioError) as err:
        _scenario(framework=value)
    assert ":9:" in str(err.value) and "framework" in str(err.value)


def test_loss_gradients_are_allocated_by_the_loss_task():
    # the simulated timeline holds them exactly while the loss runs backward
    for name, per_logit in (("megatron", 6), ("fsdp-eager", 12)):
        s = _scenario(name)
        step = build_step(build_plan(s), api.compute_model_of(s))
        loss = next(t for t in step.graph.tasks if t.name == "loss" and t.phase == "input_grad")
        logits = 1024 * 128256 / 2
        saved = 4.0 * logits + 2 * 2.0 * 1024 * 4096  # fp32 probabilities, norm/output inputs
        assert loss.mem_alloc == pytest.approx((per_logit - 4) * logits, rel=1e-12)
        assert loss.mem_free == pytest.approx(saved + (per_logit - 4) * logits, rel=1e-12)


def test_costs_list_the_accumulation_add_for_eager_frameworks():
    eager = api.layer_costs(_scenario("fsdp-eager"), 0)
    [add] = eager[eager["op"] == "grad_accumulate"].itertuples()
    plan = build_plan(_scenario("fsdp-eager"))
    dense, _ = plan.params_of(0)
    assert add.bytes == pytest.approx(3 * plan.grad_bytes_per_param * dense, rel=1e-12)
    assert add._1 == "weight_grad"  # the pass column
    fused = api.layer_costs(_scenario(), 0)
    assert "grad_accumulate" not in set(fused["op"])


def test_embedding_and_output_layer_gradients_accumulate_too():
    s = _scenario("fsdp-eager")
    plan = build_plan(s)
    cm = api.compute_model_of(s)
    step = build_step(plan, cm)
    tasks = step.graph.tasks
    for name, phase, key in (("loss", "input_grad", "head"), ("embedding", "weight_grad", "emb")):
        durations = [t.duration_s for t in tasks if t.name == name and t.phase == phase]
        assert len(durations) == 4
        params = sum(plan.params_of(key))
        add = 3 * plan.grad_bytes_per_param * params / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s
        assert durations[1] - durations[0] == pytest.approx(add, rel=1e-9), name


def _optimizer_task(s):
    step = build_step(build_plan(s), api.compute_model_of(s))
    return next(t for t in step.graph.tasks if t.name == "optimizer" and t.rank == 0)


@pytest.mark.parametrize(("precision", "master"), [("torch-amp", False), ("zero-mixed", True)])
def test_foreach_adamw_passes_over_the_state_per_op(precision, master):
    # torch.optim.AdamW's multi-tensor step over fp32 weights w, moments s (4 B) and grads g:
    # 4w + 2g + 8s + 24 B per parameter (weight decay, lerp, mul, addcmul, sqrt, div, add,
    # addcdiv), + 4 + p to cast a master copy back to the parameters; fused: g + 2k + p
    eager = _scenario(
        "{name: pytorch-eager, eager_kernels: false, eager_norms: false}", precision=precision
    )
    fused = _scenario(
        "{name: pytorch-eager, eager_kernels: false, eager_norms: false, optimizer: fused}",
        precision=precision,
    )
    assert eager.framework.optimizer == "foreach"
    plan = build_plan(eager)
    cm = api.compute_model_of(eager)
    params = plan.stages[0].dense_params + plan.stages[0].expert_params
    g, p, k = plan.grad_bytes_per_param, plan.param_bytes_per_param, plan.optimizer_bytes_per_param
    per_param = 4 * 4 + 2 * g + 8 * 4 + 24 + ((4 + p) if master else 0.0)
    hbm = cm.hbm_Bps * cm.mem.e_mem
    assert _optimizer_task(eager).duration_s == pytest.approx(
        params * per_param / hbm + cm.launch_s, rel=1e-9
    )
    # the fused step streams at the calibration's fused-AdamW rate: 28 B per parameter over
    # the slope of membound.csv's two largest adamw rows (0.72 of 4.8 TB/s), not a copy's
    assert cm.mem.optimizer == pytest.approx(membound_slope("adamw_fused_fp32", 28), rel=1e-12)
    assert cm.mem.optimizer == pytest.approx(0.718, abs=0.001)
    # fused: gradient, moments (and master) read and written; with a master copy the bf16
    # parameters written, without one the fp32 weights read and written (torch-amp's 6 B of
    # parameters count autocast's 2 B copy, which the step does not touch)
    fused_per_param = g + 2 * k + (p if master else 2 * 4)
    assert _optimizer_task(fused).duration_s == pytest.approx(
        params * fused_per_param / (cm.hbm_Bps * cm.mem.optimizer) + cm.launch_s, rel=1e-9
    )
    # fp32 AdamW (torch-amp): 80 B per parameter foreach against 28 fused, what the
    # calibration's fused AdamW moves; with a master copy (zero-mixed) 2 + 2 x 12 + 2 = 28 too
    assert fused_per_param == 28
    if precision == "torch-amp":
        assert per_param == 80 and p == 6


def _kernel_names(framework):
    s = _scenario(framework)
    s = s.model_copy(update={"simulation": s.simulation.model_copy(update={"kernel_tasks": True})})
    return {t.name for t in build_step(build_plan(s), api.compute_model_of(s)).graph.tasks}


def test_eager_presets_run_eager_kernels():
    # with one task per kernel the eager presets' rotary and SwiGLU kernels show by name (the
    # loss stays one task: kernel tasks split the layers)
    assert not FrameworkConfig().eager_kernels
    assert FrameworkConfig().flash_kernel == "native"
    assert FrameworkConfig.model_validate("fsdp-eager").flash_kernel == "fa2"
    assert api.compute_model_of(_scenario("fsdp-eager")).flash_kernel == "fa2"
    fused, eager = _kernel_names("megatron"), _kernel_names("fsdp-eager")
    assert {"rope", "mlp_swiglu"} <= fused
    assert {"rope_q_float", "rope_k_type_as", "mlp_silu", "mlp_swiglu_mul"} <= eager
    assert not {"rope", "mlp_swiglu"} & eager
    assert "attention_norm" in eager  # fsdp-eager keeps fused norms (module docstring)
    assert "attention_norm_pow" in _kernel_names("pytorch-eager")


def test_sgd_steps_at_a_copy_s_rate():
    # SGD has no fused-AdamW measurement to stand on: its one pass over gradients, state and
    # parameters streams at a copy's HBM efficiency, whatever the framework's Adam flavour
    s = load_scenario_text(
        BASE.format(framework="megatron", par="", precision="megatron-bf16").replace(
            "seq_len: 1024}", "seq_len: 1024, optimizer: sgd_momentum}"
        )
    )
    plan, cm = build_plan(s), api.compute_model_of(s)
    params = plan.stages[0].dense_params + plan.stages[0].expert_params
    g, p, k = plan.grad_bytes_per_param, plan.param_bytes_per_param, plan.optimizer_bytes_per_param
    want = params * (g + 2 * k + p) / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s
    assert cm.mem.e_mem > cm.mem.optimizer  # the two rates differ: the test tells them apart
    assert _optimizer_task(s).duration_s == pytest.approx(want, rel=1e-9)
