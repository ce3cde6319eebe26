"""``trainsim sweep`` and ``trainsim plan`` through the CLI, and the plan estimate's formulas."""

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.scenario import load_scenario
from simulator.sweep.estimate import (
    GEMM_EFFICIENCY,
    Choice,
    Machine,
    ModelShape,
    bubble_fraction,
    estimate_step_s,
    exposed_comm_s,
)
from tests.sweep.conftest import TINY_BASE

runner = CliRunner()


def test_sweep_writes_results_pictures_and_deltas(write_spec, tmp_path, caplog):
    spec = write_spec(
        "grid:\n  parallelism.tp: [1, 2, 3]\n  training.micro_batch: [1, 2]\n"
        "plots:\n  - {kind: line, metric: mfu, x: parallelism.tp, group: training.micro_batch}\n"
    )
    out = tmp_path / "out"
    args = ["sweep", str(spec), "--workers", "1", "--out", str(out), "--no-progress"]
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    # strict JSON: an infeasible point's missing metrics are null, not NaN
    data = json.loads(result.stdout, parse_constant=pytest.fail)
    rows = {r["point"]: r for r in data["rows"]}
    assert len(rows) == 7  # six points and the base
    assert rows[4]["status"] == "infeasible"  # tp 3 does not split 32 heads
    assert "heads do not split over tp = 3" in rows[4]["reason"]
    assert rows[4]["step_time_s"] is None
    # whole numbers stay ints and nested metrics objects, as in trainsim run --format json
    assert rows[0]["num_gpus"] == 8 and isinstance(rows[0]["num_gpus"], int)
    assert isinstance(rows[0]["peak_memory_by_rank"], dict)
    assert (out / "results.parquet").is_file()
    assert (out / "deltas.csv").is_file()
    assert (out / "line-mfu-parallelism.tp.png").stat().st_size > 10_000
    with caplog.at_level(logging.INFO, logger="trainsim.sweep"):
        table = runner.invoke(app, [*args, "--format", "table"])  # resumed: nothing new
    assert table.exit_code == 0, table.output
    assert "against the base scenario" in table.stdout
    assert "0 to simulate" in caplog.text


def test_bad_backend_address_is_bad_input(write_spec):
    spec = write_spec("grid:\n  parallelism.tp: [1]\n")
    result = runner.invoke(app, ["sweep", str(spec), "--address", "auto"])
    assert result.exit_code == 2
    assert "--address needs --backend ray" in result.stderr


def test_plan_ranks_simulated_candidates(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE)
    args = ["plan", str(base), "--top", "3", "--workers", "1", "--out", str(tmp_path / "p")]
    result = runner.invoke(app, [*args, "--format", "json", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ranked = data["ranked"]
    assert len(ranked) == 3
    times = [r["step_time_s"] for r in ranked]
    assert times == sorted(times)
    for r in ranked:
        assert r["dp"] * r["tp"] * r["pp"] * r["cp"] == 8
        assert r["status"] == "ok"
    assert data["rejected"], "the other candidates say why they were not simulated"


def test_bubble_fractions_match_the_closed_forms():
    c = Choice(
        tp=1, pp=4, cp=1, ep=1, dp=1, zero=0, schedule="1f1b", micro_batch=1, recompute="none"
    )
    assert bubble_fraction(c, 12) == pytest.approx(3 / 15)  # (p-1)/(m+p-1)
    inter = Choice(**{**c.__dict__, "schedule": "interleaved", "virtual_stages": 2})
    assert bubble_fraction(inter, 12) == pytest.approx(3 / 27)  # (p-1)/(v m+p-1), v = 2
    zb = Choice(**{**c.__dict__, "schedule": "zb-h1"})
    assert bubble_fraction(zb, 12) == pytest.approx(1 / 15)
    # the searched schedules at equal passes: ZB-1p as ZB-H1, ZB-2p as ZB-H2 (none)
    assert bubble_fraction(Choice(**{**c.__dict__, "schedule": "zb-1p"}), 12) == pytest.approx(
        1 / 15
    )
    assert bubble_fraction(Choice(**{**c.__dict__, "schedule": "zb-2p"}), 12) == 0.0
    assert bubble_fraction(Choice(**{**c.__dict__, "schedule": "zb-v"}), 12) == 0.0


def test_estimate_of_one_gpu_is_the_flop_count():
    hw = Machine(gpus=1, domain=8, nvlink_Bps=450e9, nic_Bps=50e9, peak_flops=1e15)
    shape = ModelShape(
        layers=2,
        moe_layers=0,
        hidden=1024,
        attn_dim=1024,
        kv_dim=1024,
        params=1e9,
        active_params=1e9,
        top_k=0,
        global_batch=4,
        seq_len=2048,
        grad_bytes=2,
    )
    c = Choice(
        tp=1, pp=1, cp=1, ep=1, dp=1, zero=0, schedule="1f1b", micro_batch=1, recompute="none"
    )
    tokens = 4 * 2048
    flops = tokens * (6 * 1e9 + 6 * 2 * 2048 * 1024)  # 6P + 6 L s h per token (causal)
    assert estimate_step_s(c, shape, hw) == pytest.approx(flops / (1e15 * GEMM_EFFICIENCY))
    full = Choice(**{**c.__dict__, "recompute": "full"})
    assert estimate_step_s(full, shape, hw) == pytest.approx(
        4 / 3 * flops / (1e15 * GEMM_EFFICIENCY)  # one more forward
    )


def _dp64():
    """DP 64 in 8-GPU domains with 5 GB/s NICs; a 2-layer 1B model, 512 sequences of 2,048."""
    hw = Machine(gpus=64, domain=8, nvlink_Bps=450e9, nic_Bps=5e9, peak_flops=1e15)
    shape = ModelShape(
        layers=2, moe_layers=0, hidden=1024, attn_dim=1024, kv_dim=1024, params=1e9,
        active_params=1e9, top_k=0, global_batch=512, seq_len=2048, grad_bytes=2,
    )  # fmt: skip
    return hw, shape


def test_estimate_counts_zero2_reduce_scatters_per_micro_batch():
    # DP 64 over 5 GB/s NICs, 8 micro-batches per replica: ZeRO-1 moves an all-reduce's
    # bytes once, 2 (d - 1)/d x 2 GB; ZeRO-2 a reduce-scatter per micro-batch and one
    # all-gather, (8 + 1)(d - 1)/d x 2 GB; each over the 8 NICs of the group's 8 GPUs in a
    # domain (a node's share crosses once), less what hides under 2/3 of a micro-batch
    hw, shape = _dp64()
    base = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 64, "schedule": "1f1b", "micro_batch": 1}
    z1 = estimate_step_s(Choice(**base, zero=1, recompute="none"), shape, hw)
    z2 = estimate_step_s(Choice(**base, zero=2, recompute="none"), shape, hw)
    one = 2 * 63 / 64 * 1e9 * 2 / (8 * 5e9)  # s: ZeRO-1's data-parallel time before hiding
    assert z2 - z1 == pytest.approx(one * (9 / 2 - 1), rel=1e-9)


def test_estimate_hides_zero3_traffic_under_each_micro_batch():
    # ZeRO-3 over DP 64 (8 GPUs a domain, 5 GB/s NICs), 8 micro-batches: each gathers the
    # weights twice (2 B) and reduce-scatters the gradients (2 B), 63/64 of 1e9 parameters,
    # over the domain's 8 NICs; what its micro-batch's compute does not cover is exposed
    hw, shape = _dp64()
    c = Choice(tp=1, pp=1, cp=1, ep=1, dp=64, zero=3, schedule="1f1b", micro_batch=1,
               recompute="none")  # fmt: skip
    compute = 512 * 2048 * (6e9 + 6 * 2 * 2048 * 1024) / (64 * 1e15 * GEMM_EFFICIENCY)
    each = 63 / 64 * 1e9 * (2 * 2 + 2) / (8 * 5e9)
    assert each > compute / 8  # exposed, so the test sees the term
    assert exposed_comm_s(c, shape, hw) == pytest.approx(8 * (each - compute / 8), rel=1e-9)


def test_plan_for_fewer_gpus_than_the_scenarios_own_layout_needs(tmp_path):
    # QA: --gpus 2 on a TP 4 scenario failed on the file's tp line; the search replaces the
    # layout anyway, so it plans on 2 GPUs and reports the own plan as infeasible there
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE.replace("tp: 2, pp: 2", "tp: 4, pp: 2"))
    args = ["plan", str(base), "--gpus", "2", "--top", "1", "--workers", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "p"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "candidate plans on 2 GPUs" in result.stdout
    assert "the scenario's own plan: infeasible" in result.stdout
    # more GPUs than one DGX node has fails naming --gpus, whatever the layout
    result = runner.invoke(app, ["plan", str(base), "--gpus", "64", "--workers", "1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --gpus 64: cluster.gpus: 64 GPUs requested")


def test_estimate_puts_a_folded_expert_group_on_nvlink():
    # 64 GPUs in 8-GPU domains, TP 2 x CP 4 x PP 2 x DP 4, EP 8: with the experts split over
    # TP an EP group takes one rank of each of 8 replicas' TP groups, 8 x 2 x 4 x 2 = 128 GPUs
    # apart at most (the NIC); folded with expert TP 1 it is the 8 GPUs of the stage's
    # tp x cp block (NVLink, 0.8 x 450 GB/s payload). The four all-to-alls per MoE layer and
    # micro-batch of the rank's routed tokens differ by exactly that bandwidth.
    hw = Machine(gpus=64, domain=8, nvlink_Bps=450e9, nic_Bps=50e9, peak_flops=1e15)
    # 8 experts of 0.9e9 parameters and 0.8e9 dense ones: top-2 tokens use 0.8 + 2 x 0.9
    shape = ModelShape(
        layers=4, moe_layers=4, hidden=1024, attn_dim=1024, kv_dim=256, params=8e9,
        active_params=2.6e9, top_k=2, global_batch=64, seq_len=4096, grad_bytes=2,
        expert_params=7.2e9,
    )  # fmt: skip
    base = {"tp": 2, "pp": 2, "cp": 4, "ep": 8, "dp": 4, "zero": 0, "schedule": "1f1b",
            "micro_batch": 1, "recompute": "none"}  # fmt: skip
    split, folded = Choice(**base), Choice(**base, expert_tp=1)
    micro, tokens_mb = 64 // 4, 4096 / 4
    routed = tokens_mb / 2 * 2 * 1024 * 2  # the rank's tokens x top-2 x hidden x bf16
    a2a = 4 / 2 * micro * 4 * (7 / 8) * routed  # bytes over both passes, per rank
    bubble = 1 - (2 - 1) / (micro + 2 - 1)
    nic, nv = a2a / 50e9, a2a / (450e9 * 0.8)
    # the folded rank holds 2x the expert parameters (experts whole over EP 8, not split over
    # EP 8 x TP 2) and the same dense ones; the estimate reduces every gradient a rank holds over
    # its dp x cp peers (16 here, 4 of them in a domain: over 4 NICs), experts included (it
    # does not tell the expert data-parallel group apart, 4 ranks here: a ranking estimate,
    # not the simulation)
    gap = estimate_step_s(split, shape, hw) - estimate_step_s(folded, shape, hw)
    dp_gap = 2 * 15 / 16 * 2 * ((0.8e9 + 7.2e9 / 8) / 4 - (0.8e9 / 2 + 7.2e9 / 8) / 2) / 200e9
    assert gap == pytest.approx((nic - nv) / bubble + dp_gap, rel=1e-9)
    # the step bound counts the all-to-alls (simulator.stages.bounds): what the search adds
    # to it differs by the data-parallel part alone
    exposed = exposed_comm_s(split, shape, hw) - exposed_comm_s(folded, shape, hw)
    assert exposed == pytest.approx(dp_gap, rel=1e-9)
    # under DeepEP the bound leaves the all-to-alls out: the search's key holds them again
    deepep = exposed_comm_s(split, shape, hw, experts_bounded=False)
    assert deepep - exposed_comm_s(split, shape, hw) == pytest.approx(nic / bubble, rel=1e-9)


def test_the_estimate_reads_the_experts_parameters_from_the_model():
    # Mixtral 8x22B: 56 layers of 8 experts, each three 6,144 x 16,384 matrices (SwiGLU)
    from simulator.sweep.candidates import shape_of

    shape = shape_of(load_scenario("scenarios/examples/mixtral-8x22b.yaml"))
    assert shape.expert_params == 56 * 8 * 3 * 6144 * 16384
    assert shape.params - shape.expert_params == pytest.approx(5.34e9, rel=0.01)  # dense


def test_plan_search_tries_folded_experts_under_tp():
    from simulator.scenario import load_scenario_text
    from simulator.sweep.candidates import machine_of
    from simulator.sweep.space import Knobs, _expert_degrees, enumerate_space, overrides_of

    s = load_scenario_text("""
model: {name: mixtral-8x7b, layers: 4}
cluster: {accelerator: H100, topology: {include: topologies/dgx-h100-superpod.yaml, nodes: 2}}
parallelism: {tp: 2, ep: 4}
training: {global_batch: 16, micro_batch: 1, seq_len: 4096}
""")
    # at tp 2, dp 8: ep over dp x cp with experts split over TP, or folded over tp x dp
    assert _expert_degrees(s, Knobs(), 2, 1, 8) == [
        (1, None), (1, 1), (2, None), (2, 1), (4, None), (4, 1), (8, None), (8, 1)
    ]  # fmt: skip
    # tp 1: nothing to fold
    assert _expert_degrees(s, Knobs(), 1, 1, 16) == [(1, None), (2, None), (4, None), (8, None)]
    choices, _ = enumerate_space(s, machine_of(s).domain, Knobs())
    folded = [c for c in choices if c.expert_tp == 1]
    assert folded and all(c.tp > 1 for c in folded)
    c = folded[0]
    over = overrides_of(s, c)
    assert over["parallelism.expert_tp"] == 1 and over["parallelism.sequence_parallel"]


def test_the_estimate_computes_at_the_sustained_rate():
    # the simulation runs a step's GEMMs at sustained_compute x the burst rate; the estimate
    # that ranks the candidates does too (H100: 755/850 of the datasheet's 989.4 TFLOP/s)
    from simulator.scenario import load_scenario_text
    from simulator.sweep.candidates import machine_of

    text = """
model: {{name: llama3-8b, layers: 2}}
cluster: {{accelerator: {acc}, topology: {{kind: nvswitch, node: {{gpus: 8}}}}}}
training: {{global_batch: 8, micro_batch: 1, seq_len: 1024}}
"""
    held = machine_of(load_scenario_text(text.format(acc="H100")))
    burst = machine_of(load_scenario_text(text.format(acc="{name: H100, sustained_compute: 1}")))
    assert held.peak_flops == pytest.approx(989.4e12 * 755 / 850, rel=1e-12)
    assert burst.peak_flops == pytest.approx(989.4e12, rel=1e-12)


def test_messages_printed_while_points_run_stay_off_stdout(write_spec, tmp_path, monkeypatch):
    """Ray's driver prints its raylet's messages ("(raylet) Task simulate_task failed...");
    printed while the sweep runs, they must not break --format json (G14)."""
    import json as json_module

    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.sweep import runner as sweep_runner

    real = sweep_runner.run_sweep

    def noisy(*args, **kwargs):
        print("(raylet) Task simulate_task failed. There are 3 retries remaining")
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_runner, "run_sweep", noisy)
    spec = write_spec("grid:\n  parallelism.zero: [0, 1]\n")
    result = CliRunner().invoke(
        app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--format", "json",
              "--workers", "1", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json_module.loads(result.stdout)["rows"]
    assert "(raylet)" in result.stderr
