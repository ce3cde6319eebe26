"""Data, tensor and recompute choices against what the lecture (slides 42, 61, 62) and the
ZeRO paper say they do."""

import pytest

from simulator import api
from simulator.scenario import load_scenario_text

SEND_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}


def _ddp_text(bucket="25 MB", zero=0, nic="200 Gb/s"):
    return f"""
model: megatron-1.7b
cluster:
  accelerator: A100-80GB
  topology: {{include: topologies/dgx-a100-superpod.yaml, nodes: 4, nic_bandwidth: {nic}}}
parallelism: {{zero: {zero}, bucket_size: {bucket}}}
training: {{global_batch: 32, micro_batch: 1, seq_len: 2048}}
precision: zero-mixed
"""


def _ddp(bucket="25 MB", zero=0, nic="200 Gb/s"):
    return load_scenario_text(_ddp_text(bucket, zero, nic))


def test_ddp_buckets_overlap_until_latency_dominates():
    exposed = {
        b: api.run(_ddp(b)).summary["exposed_comm_fraction"]
        for b in ("2 GB", "200 MB", "25 MB", "1 MB")
    }
    # One 2 GB bucket waits for the whole backward; layer-sized buckets overlap it ...
    assert exposed["200 MB"] < exposed["2 GB"]
    assert exposed["25 MB"] < exposed["2 GB"]
    # ... and 1 MB buckets pay 62 ring-step latencies per message, 3,300 messages.
    assert exposed["1 MB"] > 2 * exposed["25 MB"]


def _dp_bytes_sent(result, n):
    dp = result.trace[result.trace["stream"] == "dp"]
    total = 0.0
    for name, size in zip(dp["name"], dp["bytes"], strict=True):
        kind = next(k for k in SEND_FACTOR if k in name)
        total += size * SEND_FACTOR[kind](n)
    return total


def test_zero_communication_volume():
    # ZeRO paper sec. 7: stages 1 and 2 move what DDP moves (2 x params), stage 3 1.5 times
    # as much (an extra all-gather of the parameters), with one micro-batch per step - less
    # the root unit's second gather (embeddings and final norm: FSDP keeps the root gathered
    # from its forward through its backward, plan.memory.root_kept), fp16 over 32 ranks.
    sent = {z: _dp_bytes_sent(api.run(_ddp(zero=z)), 32) for z in (0, 1, 2, 3)}
    assert sent[1] == pytest.approx(sent[0], rel=1e-12)
    assert sent[2] == pytest.approx(sent[0], rel=1e-12)
    plan = api.build_plan(_ddp(zero=3))
    root = sum(plan.params_of("emb")) + sum(plan.params_of("head"))
    assert root == 51200 * 2304 + 2048 * 2304 + 2 * 2304  # word, position, final norm
    assert sent[3] == pytest.approx(1.5 * sent[0] - 2 * root * 31 / 32, rel=1e-12)
    params = 1_652_230_656  # megatron-1.7b; DDP all-reduces fp16 gradients: 2 x 2 bytes/param
    assert sent[0] == pytest.approx(2 * 2 * params * 31 / 32, rel=1e-9)


def _tp8(order):
    return load_scenario_text(f"""
model: megatron-18.4b
cluster:
  accelerator: A100-80GB
  topology: {{include: topologies/dgx-a100-superpod.yaml, nodes: 8}}
parallelism: {{tp: 8, zero: 1, order: {order}}}
training: {{global_batch: 64, micro_batch: 1, seq_len: 2048}}
""")


def test_tensor_parallel_across_nodes_is_slow():
    # Slide 42: TP communicates every layer, so it belongs inside the NVLink domain.
    inside = api.run(_tp8("[tp, cp, pp, dp]")).summary["step_time_s"]
    across = api.run(_tp8("[dp, cp, pp, tp]")).summary["step_time_s"]  # 1 GPU per node
    assert across > 1.5 * inside


def test_tp8_inside_the_node_is_best_on_64_nodes():
    # Slide 61 (Narayanan et al. 2021, Fig. 13): a 146B model on 64 DGX A100 nodes runs best
    # with TP = 8 inside each node and pipelining across nodes.
    times = {}
    for tp, pp in [(4, 16), (8, 8), (16, 4)]:
        s = load_scenario_text(f"""
model: megatron-145.6b
cluster:
  accelerator: A100-80GB
  topology: {{include: topologies/dgx-a100-superpod.yaml, nodes: 64}}
parallelism: {{tp: {tp}, pp: {pp}, zero: 1}}
training: {{global_batch: 256, micro_batch: 1, seq_len: 2048}}
""")
        result = api.run(s)
        assert not result.summary["oom"]
        times[(tp, pp)] = result.summary["step_time_s"]
    assert min(times, key=times.get) == (8, 8)


def _recompute(rc, mb):
    return load_scenario_text(f"""
model: megatron-1.7b
cluster:
  accelerator: A100-80GB
  topology: {{include: topologies/dgx-a100-superpod.yaml, nodes: 8, nic_bandwidth: 25 Gb/s}}
parallelism: {{zero: 0, recompute: {rc}}}
training: {{global_batch: {64 * mb}, micro_batch: {mb}, seq_len: 2048, flash_attention: false}}
precision: zero-mixed
""")


def test_full_recompute_pays_for_itself_with_a_larger_micro_batch():
    # Slide 62: on a communication-bound cluster (one 25 Gb/s NIC per GPU), recomputing
    # activations lets micro-batch 16 fit where micro-batch 4 does not; the larger batch
    # amortises the gradient all-reduce and wins despite a third more compute.
    best_plain = None
    for mb in (1, 2, 4):
        r = api.run(_recompute("none", mb)).summary
        if not r["oom"]:
            best_plain = max(best_plain or 0.0, r["tokens_per_s"])
    assert api.run(_recompute("none", 4)).summary["oom"]
    rec = api.run(_recompute("full", 16)).summary
    assert not rec["oom"]
    assert rec["hfu"] > rec["mfu"]  # the recomputed forward is counted as executed work
    assert rec["tokens_per_s"] > best_plain


def test_symmetric_and_full_modes_agree():
    text = """
model: {name: llama3-8b, layers: 8}
cluster:
  accelerator: H100
  topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 4}
parallelism: {tp: 4, pp: 2, zero: ZERO, sequence_parallel: true}
training: {global_batch: 16, micro_batch: 1, seq_len: 4096}
simulation: {mode: MODE}
"""
    for zero in (0, 3):
        sym = api.run(
            load_scenario_text(text.replace("MODE", "symmetric").replace("ZERO", str(zero)))
        ).summary
        full = api.run(
            load_scenario_text(text.replace("MODE", "full").replace("ZERO", str(zero)))
        ).summary
        assert (sym["simulated_ranks"], full["simulated_ranks"]) == (2, 32)
        # Identical ranks see identical contention: the copies load the same links.
        assert sym["step_time_s"] == pytest.approx(full["step_time_s"], rel=1e-9)
        assert sym["peak_memory_bytes"] == pytest.approx(full["peak_memory_bytes"], rel=1e-9)


@pytest.mark.parametrize("schedule, v", [("interleaved", 2), ("zb-h2", 1), ("dualpipe", 1)])
def test_symmetric_and_full_modes_agree_on_every_pipeline_send(schedule, v):
    # QA: on the interleaved schedule symmetric mode was 8.4 us fast: the last stage's send of
    # the next chunk's input to the first stage (not a neighbour) carried no copies, so its
    # TP peers' sends did not load the links a TP all-reduce shared. Two nodes, so the
    # wrap-around sends cross the network too.
    text = f"""
model: {{name: llama3-8b, layers: 8}}
cluster:
  accelerator: H100
  topology: {{include: topologies/dgx-h100-superpod.yaml, nodes: 2}}
parallelism:
  tp: 2
  pp: 4
  pipeline: {{schedule: {schedule}, virtual_stages: {v}}}
training: {{global_batch: 16, micro_batch: 1, seq_len: 4096}}
simulation: {{mode: MODE, repeat_steady_state: false}}
"""
    sym = api.run(load_scenario_text(text.replace("MODE", "symmetric"))).summary
    full = api.run(load_scenario_text(text.replace("MODE", "full"))).summary
    assert (sym["simulated_ranks"], full["simulated_ranks"]) == (4, 16)
    assert sym["step_time_s"] == pytest.approx(full["step_time_s"], rel=1e-9)


def test_context_and_expert_parallel_steps_run():
    cp = api.run(
        load_scenario_text("""
model: {name: llama3-8b, layers: 8}
cluster: {accelerator: H100, topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 4}}
parallelism: {tp: 4, cp: 2, pp: 2, sequence_parallel: true, zero: 1}
training: {global_batch: 8, micro_batch: 1, seq_len: 32768}
""")
    )
    assert cp.summary["utilisation"]["cp"] > 0
    moe = api.run(
        load_scenario_text("""
model: {name: mixtral-8x7b, layers: 4}
cluster: {accelerator: H100, topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 2}}
parallelism: {tp: 2, pp: 2, ep: 4, zero: 1}
training: {global_batch: 16, micro_batch: 1, seq_len: 4096}
""")
    )
    assert moe.summary["utilisation"]["ep"] > 0
    imbalanced = api.run(
        load_scenario_text("""
model: {name: mixtral-8x7b, layers: 4, moe: {load_imbalance: 2.0}}
cluster: {accelerator: H100, topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 2}}
parallelism: {tp: 2, pp: 2, ep: 4, zero: 1}
training: {global_batch: 16, micro_batch: 1, seq_len: 4096}
""")
    )
    assert imbalanced.summary["step_time_s"] > moe.summary["step_time_s"]


def test_zero2_reduces_each_micro_batch_after_its_backward_without_overlap():
    # ZeRO-2 cannot hold its gradients to the step's end (it keeps its shard only): without
    # overlap each micro-batch's reduce-scatters wait for that micro-batch's whole backward
    # (one chunk per stage here), and start before the rank's last backward ends
    extra = [*PIPELINED[:2], "parallelism.pipeline.schedule=zb-h1", PIPELINED[3]]
    after = api.run(
        _ddp_with([*extra, "parallelism.zero=2", "framework.overlap_grad_reduce=false"])
    )
    t = after.trace
    for _rank, f in t.groupby("rank"):
        sync = f[(f["stream"] == "dp") & (f["phase"] == "grad_sync")]
        backward = f[(f["stream"] == "compute") & f["phase"].isin(["input_grad", "weight_grad"])]
        ends = backward.groupby("microbatch")["end_s"].max()
        for j, starts in sync.groupby("microbatch")["start_s"]:
            assert starts.min() >= ends[j] - 1e-12  # after micro-batch j's last backward task
        assert sync["start_s"].min() < ends.max()  # not held to the last backward
        assert sync["microbatch"].nunique() == ends.size  # one round per micro-batch


def _after_backward(result):
    """Per rank: (first gradient-sync task start, last backward compute task end)."""
    t = result.trace
    out = {}
    for rank, f in t.groupby("rank"):
        sync = f[(f["stream"] == "dp") & (f["phase"] == "grad_sync")]
        backward = f[(f["stream"] == "compute") & f["phase"].isin(["input_grad", "weight_grad"])]
        out[rank] = (sync["start_s"].min(), backward["end_s"].max())
    return out


PIPELINED = [
    "parallelism.pp=2",
    "parallelism.pipeline.schedule=interleaved",
    "parallelism.pipeline.virtual_stages=2",
    "training.global_batch=64",
]


@pytest.mark.parametrize(
    "extra",
    [
        [],  # plain DDP, one pass per rank
        PIPELINED,  # an interleaved pipeline: each rank's two chunks end their backward apart
        [*PIPELINED, "parallelism.zero=1"],  # ZeRO-1: a reduce-scatter per bucket
        [*PIPELINED[:2], "parallelism.pipeline.schedule=zb-h1", PIPELINED[3], "parallelism.zero=1"],
    ],
)
def test_grad_reduce_waits_for_the_last_backward_without_overlap(extra):
    # Megatron-LM's "local" DDP all-reduces after forward_backward_func returns: no bucket may
    # start before the rank's last backward task ends. Overlapped (the default), the first
    # buckets go while the backward still runs. Either way the same bytes cross the network.
    overlapped = api.run(_ddp_with(extra))
    after = api.run(_ddp_with([*extra, "framework.overlap_grad_reduce=false"]))
    for start, backward_end in _after_backward(after).values():
        assert start >= backward_end - 1e-12
    assert any(start < end for start, end in _after_backward(overlapped).values())
    assert after.metrics.step_time_s > overlapped.metrics.step_time_s
    n = 32 // (2 if extra else 1)
    assert _dp_bytes_sent(after, n) == pytest.approx(_dp_bytes_sent(overlapped, n), rel=1e-12)


def test_a_late_gradient_sync_adds_one_dependency_per_bucket():
    # Waiting for the whole backward is waiting for the rank's last weight-gradient task (its
    # compute stream runs in order): one more dependency per bucket, not one per layer.
    plans = {}
    for overlap in ("true", "false"):
        s = _ddp_with([*PIPELINED, f"framework.overlap_grad_reduce={overlap}"])
        plans[overlap] = api.build_step(api.build_plan(s, api.build_topology(s.cluster))).graph
    deps = {
        k: sum(len(t.deps) for t in g.tasks if t.phase == "grad_sync") for k, g in plans.items()
    }
    buckets = sum(1 for t in plans["false"].tasks if t.phase == "grad_sync")
    assert deps["true"] < deps["false"] <= deps["true"] + buckets


def _ddp_with(overrides):
    return load_scenario_text(_ddp_text(), overrides=overrides)


def test_symmetric_and_full_modes_agree_on_folded_experts():
    # expert TP 2 under TP 4, EP 4: the expert-TP, EP and expert-DP groups are not grid
    # groups, so their copies are found one by one; identical ranks still see identical
    # contention
    text = """
model: {name: mixtral-8x7b, layers: 2}
cluster:
  accelerator: H100
  topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 2}
parallelism: {tp: 4, ep: 4, expert_tp: 2, sequence_parallel: true, zero: 1}
training: {global_batch: 8, micro_batch: 1, seq_len: 2048}
simulation: {mode: MODE}
"""
    sym = api.run(load_scenario_text(text.replace("MODE", "symmetric"))).summary
    full = api.run(load_scenario_text(text.replace("MODE", "full"))).summary
    assert (sym["simulated_ranks"], full["simulated_ranks"]) == (1, 16)
    assert sym["step_time_s"] == pytest.approx(full["step_time_s"], rel=1e-9)
    assert sym["peak_memory_bytes"] == pytest.approx(full["peak_memory_bytes"], rel=1e-9)
