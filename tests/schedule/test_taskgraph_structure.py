"""The step's TaskGraph inspected without running the engine: tasks per layer and
micro-batch, the collectives each parallelism adds, and the dependency edges a schedule
implies (a pass waits for its neighbour's send)."""

from collections import Counter

import pytest

from simulator.model.compute import ComputeModel
from simulator.plan.plan import build_plan
from simulator.scenario import load_scenario_text
from simulator.schedule.step import build_step

NO_HOST = "cpu_launch_s: 0, cpu_op_forward_s: 0, cpu_op_backward_s: 0"  # no CPU cost


def _step(par: str, layers=4, gpus=8, global_batch=8, extra=""):
    s = load_scenario_text(f"""
model: {{layers: {layers}, hidden: 1024, heads: 16, ffn: 4096, vocab: 1024,
        activation: gelu, norm: layernorm}}
cluster:
  accelerator: H100
  topology: {{kind: nvswitch, node: {{gpus: {gpus}}}}}
parallelism: {par}
training: {{global_batch: {global_batch}, micro_batch: 1, seq_len: 1024}}
{extra}
{"" if "framework" in extra else f"framework: {{name: megatron, {NO_HOST}}}"}
""")  # the GPU's task graph: the host's launches are tested in tests/schedule/test_host.py
    return s, build_step(build_plan(s), ComputeModel.for_accelerator(s.cluster.accelerator))


def _names(step, rank=None):
    return Counter(t.name for t in step.graph.tasks if rank is None or t.rank == rank)


def test_tp_all_reduces_twice_per_layer_each_way():
    s, step = _step("{tp: 8}", global_batch=2)  # dp 1, two micro-batches
    names = _names(step)
    layers, m = 4, 2
    # Megatron's f/g: an all-reduce closes attention and MLP, forward and backward
    assert names["tp_all_reduce"] == 2 * 2 * layers * m
    assert names["attention"] == 2 * layers * m  # forward and input-gradient
    assert names["weight_grad"] == layers * m
    assert names["optimizer"] == 1


def test_sequence_parallel_gathers_and_scatters():
    _, step = _step("{tp: 8, sequence_parallel: true}", global_batch=1)
    names = _names(step)
    # per layer: forward AG, RS, AG, RS; backward the twins: AG, RS, AG, RS
    assert names["tp_all_gather"] == names["tp_reduce_scatter"] == 4 * 4
    assert "tp_all_reduce" not in names


def test_ddp_buckets_wait_for_their_weight_gradients():
    _, step = _step("{dp: 8, bucket_size: 1 GB}", global_batch=8)
    tasks = step.graph.tasks
    [ar] = [t for t in tasks if t.name == "dp_all_reduce"]  # one bucket holds the model
    deps = {tasks[d].name for d in ar.deps}
    assert deps >= {"weight_grad", "embedding", "loss"}
    opt = next(t for t in tasks if t.name == "optimizer")
    [norm] = opt.deps  # gradient clipping's norm reads the reduced gradients first
    assert tasks[norm].name == "grad_norm"
    assert [tasks[d].name for d in tasks[norm].deps] == ["dp_all_reduce"]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1", "zb-h2", "dualpipe"])
def test_pipeline_passes_wait_for_the_neighbours_send(schedule):
    s, step = _step(
        f"{{pp: 4, pipeline: {{schedule: {schedule}}}}}",
        layers=8, gpus=4, global_batch=8,
    )  # fmt: skip
    tasks = step.graph.tasks
    sends = [i for i, t in enumerate(tasks) if t.name == "pp_send_activation"]
    # every forward hop sends once per micro-batch: (chunks x stages - ends) x m
    chunks = 2 if schedule == "dualpipe" else 1
    assert len(sends) == (4 - 1) * 8 * chunks // (2 if schedule == "dualpipe" else 1)
    for i in sends:
        receivers = [t for t in tasks if i in t.deps]
        assert receivers, tasks[i]
        sender_stage = step.stage_of[tasks[i].rank]
        assert all(
            step.stage_of[t.rank]
            == sender_stage + (1 if tasks[i].comm.group[1] > tasks[i].rank else -1)
            for t in receivers
        )
        assert all(t.microbatch == tasks[i].microbatch for t in receivers)


def test_zero3_gathers_every_layer_unit_twice_and_the_root_once_per_micro_batch():
    # the root unit (embedding and head) stays gathered from its forward through its backward
    # without a pipeline, as PyTorch FSDP keeps the root (plan.memory.root_kept)
    _, step = _step("{dp: 8, zero: 3, fsdp_unit_layers: 2}", global_batch=16)
    names = _names(step)
    layer_units, ends, m = 4 // 2, 2, 2  # two layer units, the embedding and the head
    assert names["fsdp_all_gather"] == (2 * layer_units + ends) * m
    assert names["fsdp_reduce_scatter"] == (layer_units + ends) * m


@pytest.mark.parametrize("zero", [1, 2])
def test_zero2_reduce_scatters_every_micro_batch_and_zero1_once(zero):
    # ZeRO-2 keeps only its shard of the gradients, so each micro-batch's are reduce-scattered
    # after its backward (deepspeedai/DeepSpeed#2252); ZeRO-1 accumulates the whole gradient
    # and reduce-scatters it once. Both all-gather the updated parameters once.
    m = 4
    _, step = _step(f"{{dp: 8, zero: {zero}, bucket_size: 1 GB}}", global_batch=8 * m)
    rank0 = [t for t in step.graph.tasks if t.rank == 0]
    rs = [t for t in rank0 if t.name == "dp_reduce_scatter"]
    ag = [t for t in rank0 if t.name == "dp_all_gather"]
    buckets = len(ag)  # one gather per bucket
    assert len(rs) == buckets * (m if zero == 2 else 1)
    gradient = sum(t.comm.size_bytes for t in ag) / step.plan.param_bytes_per_param
    gradient *= step.plan.grad_bytes_per_param  # the bytes of one whole gradient
    sent = sum(t.comm.size_bytes for t in rs)
    assert sent == pytest.approx(gradient * (m if zero == 2 else 1), rel=1e-12)
    if zero == 2:  # micro-batch j's reduce-scatter waits for j's backward, not the last one
        waits = sorted({step.graph.tasks[d].microbatch for t in rs for d in t.deps})
        assert waits == list(range(m))


@pytest.mark.parametrize("policy", ["pre", "post", "none"])
def test_fsdp_backward_prefetch_orders_the_dp_stream(policy):
    # PyTorch FSDP BackwardPrefetch: BACKWARD_PRE issues the next unit's all-gather before the
    # current unit's gradient, BACKWARD_POST after it but before its reduce-scatter; without
    # prefetch it queues behind the reduce-scatter on the (in-order) stream.
    par = f"{{dp: 8, zero: 3, fsdp_backward_prefetch: {policy}}}"
    _, step = _step(par, global_batch=8)
    dp_stream = [t for t in step.graph.tasks if t.stream == "dp"]
    backward = [
        (t.name, t.layer)
        for t in dp_stream
        if t.name == "fsdp_reduce_scatter" or (t.name == "fsdp_all_gather" and t.phase == "fsdp")
    ]
    layer3_rs = backward.index(("fsdp_reduce_scatter", 3))
    layer2_ag = max(i for i, x in enumerate(backward) if x == ("fsdp_all_gather", 2))
    assert (layer2_ag < layer3_rs) == (policy != "none")


def test_fsdp_backward_prefetch_hides_the_gathers():
    from simulator import api
    from simulator.scenario import load_scenario

    f = "scenarios/examples/llama3-8b-fsdp.yaml"
    t = {
        p: api.run(load_scenario(f, [f"parallelism.fsdp_backward_prefetch={p}"])).summary
        for p in ("pre", "none")
    }
    # measured 13-14% of an FSDP step lost without it; here 12%
    assert t["pre"]["step_time_s"] < 0.92 * t["none"]["step_time_s"]
    assert t["pre"]["exposed_comm_fraction"] < t["none"]["exposed_comm_fraction"] / 2


def test_grad_norm_reads_every_local_gradient_once():
    s, step = _step("{tp: 8}", global_batch=2)
    cm = ComputeModel.for_accelerator(s.cluster.accelerator)
    [norm] = [t for t in step.graph.tasks if t.name == "grad_norm" and t.rank == 0]
    grads = step.plan.stages[0].dense_params * step.plan.grad_bytes_per_param  # TP-sharded
    # memory-bound: bytes / (HBM bandwidth x the calibrated copy efficiency) + one launch
    assert norm.duration_s == pytest.approx(grads / (cm.hbm_Bps * cm.mem.e_mem) + cm.launch_s)
    off = s.model_copy(update={"training": s.training.model_copy(update={"grad_clip": False})})
    plain = build_step(build_plan(off), cm)
    assert not [t for t in plain.graph.tasks if t.name == "grad_norm"]


@pytest.mark.parametrize("shared", [0, 1])
def test_moe_with_tp_and_sp_dispatches_local_tokens_then_gathers_over_tp(shared):
    # QA: the EP all-to-all carried every token of the TP group (tp x the bytes across nodes).
    # Megatron-core's all-to-all dispatcher (MoEAlltoAllTokenDispatcher) all-to-alls each
    # rank's own s/tp tokens, all-gathers the dispatched tokens over TP for the TP-sharded
    # experts and reduce-scatters their outputs before the combine; the block's hidden-state
    # all-gather stays only for shared experts.
    from simulator import api

    s = api.load(
        "scenarios/examples/mixtral-8x22b.yaml",
        ["model.layers=8", "training.global_batch=32", f"model.moe.shared_experts={shared}"],
    )
    par, m, t = s.parallelism, s.model, s.training
    assert par.tp == 4 and par.sequence_parallel
    plan = api.build_plan(s, api.build_topology(s.cluster))
    step = api.build_step(plan, None, False)
    layer0 = [
        x for x in step.graph.tasks
        if x.rank == plan.ranks[0] and x.microbatch == 0 and x.layer == 0 and x.phase == "forward"
    ]  # fmt: skip
    names = [x.name for x in layer0]
    routed = 2 * t.micro_batch * t.seq_len * m.moe.top_k * m.hidden  # bf16 bytes, all tokens
    sizes = {x.name: x.comm.size_bytes for x in layer0 if x.comm is not None}
    assert sizes["ep_dispatch"] == sizes["ep_combine"] == pytest.approx(routed / par.tp)
    assert sizes["ep_tp_all_gather"] == sizes["ep_tp_reduce_scatter"] == pytest.approx(routed)
    order = ["ep_dispatch", "ep_tp_all_gather", "experts", "ep_tp_reduce_scatter", "ep_combine"]
    assert [n for n in names if n in order] == order
    # the attention block's all-gather and reduce-scatter, and the MLP block's for a shared expert
    assert names.count("tp_all_gather") == names.count("tp_reduce_scatter") == 1 + (shared > 0)


def test_moe_without_expert_parallelism_gathers_hidden_states_and_routes_locally():
    # EP 1: Megatron's all-gather dispatcher moves s x h over TP, not the all-to-all
    # dispatcher's s x top-k x h (the lecture's 200B-A20B exercise would have been 39% slower)
    from simulator import api

    s = api.load(
        "scenarios/examples/mixtral-8x22b.yaml",
        ["model.layers=8", "training.global_batch=32", "parallelism.ep=1"],
    )
    plan = api.build_plan(s, api.build_topology(s.cluster))
    step = api.build_step(plan, None, False)
    names = [
        x.name for x in step.graph.tasks
        if x.rank == plan.ranks[0] and x.microbatch == 0 and x.layer == 0 and x.phase == "forward"
    ]  # fmt: skip
    assert "ep_tp_all_gather" not in names and "ep_dispatch" not in names
    assert names.count("tp_all_gather") == names.count("tp_reduce_scatter") == 2


@pytest.mark.parametrize("etp", [1, 2])
def test_folded_moe_dispatches_over_its_own_groups(etp):
    # MoE parallel folding (expert TP other than TP): each rank all-to-alls its own s/tp
    # tokens over the folded EP group, gathers etp ranks' dispatched tokens over its
    # expert-TP group (none with expert TP 1), and reduces its expert gradients over the
    # expert-DP group of tp x cp x dp / (etp x ep) ranks.
    from simulator import api

    s = api.load(
        "scenarios/examples/mixtral-8x22b.yaml",
        ["model.layers=8", "training.global_batch=32", f"parallelism.expert_tp={etp}"],
    )
    par, m, t = s.parallelism, s.model, s.training
    assert (par.tp, par.ep, s.dp) == (4, 8, 8) and par.sequence_parallel
    plan = api.build_plan(s, api.build_topology(s.cluster))
    grid, rank = plan.grid, plan.ranks[0]
    step = api.build_step(plan, None, False)
    tasks = [x for x in step.graph.tasks if x.rank == rank]
    layer0 = [x for x in tasks if x.microbatch == 0 and x.layer == 0 and x.phase == "forward"]
    comms = {x.name: x.comm for x in layer0 if x.comm is not None}
    routed = 2 * t.micro_batch * t.seq_len * m.moe.top_k * m.hidden  # bf16 bytes, all tokens
    assert comms["ep_dispatch"].group == grid.ep_group(rank)
    assert comms["ep_dispatch"].size_bytes == pytest.approx(routed / par.tp)
    assert comms["ep_combine"].size_bytes == pytest.approx(routed / par.tp)
    if etp == 1:
        assert "ep_tp_all_gather" not in comms and "ep_tp_reduce_scatter" not in comms
        # two TP groups' ranks of the stage: replicas 0 and 1 (Llama 3's order, tp cp pp dp,
        # puts pp inside dp, so they are 16 ranks apart)
        both = [grid.rank(tp=i, cp=0, pp=0, dp=d) for d in (0, 1) for i in range(4)]
        assert rank == 0 and grid.ep_group(rank) == tuple(both) == (0, 1, 2, 3, 16, 17, 18, 19)
    else:
        gather = comms["ep_tp_all_gather"]
        assert gather.group == grid.expert_tp_group(rank) and len(gather.group) == etp
        assert gather.size_bytes == pytest.approx(routed / par.tp * etp)
    [edp] = {x.comm.group for x in tasks if x.name.startswith("edp_")}
    assert edp == grid.expert_dp_group(rank) and len(edp) == 4 * 8 // (etp * 8)
