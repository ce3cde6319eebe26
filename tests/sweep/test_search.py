"""The plan search: its step bound never exceeds a simulated step, its cheap simulation
extrapolates to the full step, its written plans run to the times it reports, and its knobs."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.scenario import load_scenario_text
from simulator.schedule.costs import layer_cost
from simulator.stages.bounds import step_lower_bound
from simulator.sweep import adapter
from simulator.sweep.plan_runs import extrapolate, reduced_counts, with_batch
from simulator.sweep.space import Choice, Knobs, SpaceError, applied, enumerate_space
from tests.sweep.conftest import TINY_BASE

runner = CliRunner()

# Four layers of Llama 3 8B on one DGX H100 (8 GPUs): every knob of the space has room
BASE = load_scenario_text(TINY_BASE.replace("global_batch: 8", "global_batch: 32"))

ASYNC_TP = load_scenario_text(
    TINY_BASE.replace("global_batch: 8", "global_batch: 32")
    + "framework: {name: megatron, tp_async_allreduce: true}\n"
)


def _mixtral(layers: int = 4, nodes: int | None = None, extra: str = ""):
    """Mixtral 8x7B cut to ``layers`` layers on one DGX H100, or on ``nodes`` nodes of a
    SuperPOD; ``extra``: more scenario lines."""
    topology = (
        "{include: topologies/dgx-h100.yaml}"
        if nodes is None
        else f"{{include: topologies/dgx-h100-superpod.yaml, nodes: {nodes}}}"
    )
    return load_scenario_text(
        f"model: {{name: mixtral-8x7b, layers: {layers}}}\n"
        f"cluster: {{accelerator: H100, topology: {topology}}}\n"
        "training: {global_batch: 32, micro_batch: 1, seq_len: 1024}\n" + extra
    )


MOE = _mixtral()
MOE_2_NODES = _mixtral(nodes=2)
MOE_6_LAYERS = _mixtral(layers=6)
MOE_DEEPEP = _mixtral(nodes=2, extra="parallelism: {moe_dispatcher: deepep}\n")

SAMPLE = [
    # (scenario, choice): each schedule family, TP with and without SP, CP, recompute, ZeRO-3
    (BASE, Choice(1, 4, 1, 1, 2, 0, "1f1b", 1, "none")),
    (BASE, Choice(2, 2, 1, 1, 2, 1, "1f1b", 2, "selective")),
    (BASE, Choice(2, 2, 1, 1, 2, 1, "interleaved", 1, "none", virtual_stages=2)),
    (BASE, Choice(1, 4, 2, 1, 1, 0, "zb-h1", 1, "full")),
    (BASE, Choice(4, 2, 1, 1, 1, 0, "zb-h1", 1, "none", sequence_parallel=False)),
    (BASE, Choice(2, 1, 1, 1, 4, 3, "1f1b", 2, "none")),
    (BASE, Choice(8, 1, 1, 1, 1, 0, "1f1b", 4, "full")),
    (BASE, Choice(1, 2, 1, 1, 4, 1, "zb-2p", 1, "none")),
    (BASE, Choice(1, 4, 1, 1, 2, 0, "zb-1p", 1, "none")),  # overlapping steps, ZeRO 0
    (BASE, Choice(1, 4, 1, 1, 2, 0, "zb-h2", 1, "selective")),
    (BASE, Choice(1, 2, 1, 1, 4, 0, "zb-v", 1, "none")),
    (BASE, Choice(2, 2, 1, 1, 2, 0, "gpipe", 1, "none")),
    (BASE, Choice(1, 2, 1, 1, 4, 1, "flexible-interleaved", 1, "none", virtual_stages=2)),
    (ASYNC_TP, Choice(4, 2, 1, 1, 1, 0, "1f1b", 1, "none", sequence_parallel=False)),
    (MOE, Choice(2, 2, 1, 2, 2, 1, "1f1b", 1, "none")),
    (MOE, Choice(1, 2, 1, 4, 4, 1, "dualpipe", 1, "full")),
    (MOE, Choice(1, 2, 1, 4, 4, 1, "interleaved", 1, "none", virtual_stages=2)),
    (MOE, Choice(2, 2, 1, 2, 2, 1, "zb-h1", 1, "selective", expert_tp=1)),  # folded
    (MOE, Choice(2, 1, 1, 8, 4, 1, "1f1b", 1, "none", expert_tp=1)),  # EP over the node
    (MOE, Choice(4, 1, 1, 2, 2, 1, "1f1b", 2, "none", sequence_parallel=False)),
    # expert groups across the two hosts: their all-to-alls through each GPU's NIC
    (MOE_2_NODES, Choice(4, 1, 1, 4, 4, 1, "1f1b", 1, "none")),
    (MOE_2_NODES, Choice(2, 2, 1, 4, 4, 1, "interleaved", 1, "none", virtual_stages=2)),
    (MOE_2_NODES, Choice(1, 2, 1, 8, 8, 1, "zb-h1", 1, "none")),
    (MOE_2_NODES, Choice(2, 1, 1, 8, 8, 1, "1f1b", 1, "selective", expert_tp=1)),
    # DualPipe: the all-to-alls hide under compute but queue on the expert stream
    (MOE_2_NODES, Choice(2, 2, 1, 4, 4, 1, "dualpipe", 1, "none")),
    (MOE_2_NODES, Choice(1, 2, 1, 8, 8, 1, "dualpipe", 1, "none")),
    # four stages: the middle ones wait to fill and drain; TP collectives in lone passes
    (MOE, Choice(1, 4, 1, 2, 2, 1, "dualpipe", 1, "none")),
    (MOE, Choice(2, 2, 1, 2, 2, 1, "dualpipe", 1, "selective")),
    (MOE_2_NODES, Choice(2, 4, 1, 2, 2, 1, "dualpipe", 1, "none")),
    # uneven end chunks (1 + 2 + 2 + 1 layers), TP without SP (async all-reduce asked for:
    # DualPipe splits W, so none), experts folded under TP with full recompute, ZeRO-3, DeepEP
    (MOE_6_LAYERS, Choice(1, 4, 1, 2, 2, 1, "dualpipe", 1, "none")),
    (ASYNC_TP, Choice(2, 2, 1, 1, 2, 0, "dualpipe", 1, "none", sequence_parallel=False)),
    (MOE_2_NODES, Choice(2, 2, 1, 4, 4, 1, "dualpipe", 1, "full", expert_tp=1)),
    (MOE_2_NODES, Choice(2, 2, 1, 4, 4, 3, "dualpipe", 1, "none")),
    (MOE_DEEPEP, Choice(1, 2, 1, 8, 8, 1, "dualpipe", 1, "none")),
]


# Samples whose steps are mostly what the bound leaves out (module doc of stages.bounds), on
# two hosts: ZeRO-3's gathers under DualPipe (bound 0.15 of the step), and full recompute's
# TP collectives with the folded experts' gathers (0.34); they test that the bound stays
# below, not how close it comes
LOOSE = {
    "tp2 cp1 pp2 dp4 ep4 z3 dualpipe mb1 none": 0.1,
    "tp2 cp1 pp2 dp4 ep4 etp1 z1 dualpipe mb1 full": 0.1,
}


def _simulated(s, c: Choice) -> tuple[float, float]:
    """(the bound, the simulated step) of choice ``c`` on scenario ``s``, both in s."""
    scenario = applied(s, c)
    bound = adapter.step_lower_bound(scenario, adapter.reach(scenario)).seconds
    return bound, api.run(scenario).metrics.step_time_s


@pytest.mark.parametrize(("s", "c"), SAMPLE, ids=[c.label() for _, c in SAMPLE])
def test_the_bound_never_exceeds_the_simulated_step(s, c):
    bound, step = _simulated(s, c)
    # a bound above the step would drop a plan that wins: never, to rounding (1e-9 relative)
    assert bound <= step * (1 + 1e-9)
    # and not vacuous: compute, fill and drain make up most of these small steps, whose
    # communication runs on NVLink (the loosest here, ZeRO-3 over 4 ranks, is above 0.4);
    # save where the bound leaves out most of the step (LOOSE)
    assert bound >= LOOSE.get(c.label(), 0.4) * step


def test_dualpipe_bound_from_its_ranks_orders():
    from simulator.stages.bounds import ChunkTimes, _dualpipe_bound

    def bound(p, m, f, b, w, alone=0.0):
        each = dict.fromkeys(range(p))
        t = ChunkTimes(*({k: x for k in each} for x in (f, b, w, 0.0, alone, alone)))
        return _dualpipe_bound(t, p, m)

    # Equal chunks, no communication, T_F = 1, T_B = 2, T_W = 1 (s): a middle rank of four
    # waits one forward to start and ends with one backward and chunk 0's W still to go,
    # while two of its own W come after its last B: 8 x 4 + 1 + 2 + 1 - 2 = 34, which is the
    # DeepSeek-V3 report's m (T_F + T_B + T_W) + (p/2 - 1)(T_F&B + T_B - 3 T_W) exactly
    assert bound(4, 8, 1, 2, 1).seconds == 34.0
    assert bound(4, 8, 1, 2, 1).limit == "drain"
    # with T_B = T_W = T_F the report's bubble is 0, yet a middle rank cannot start before a
    # forward reaches it: 8 x 3 + 1
    assert bound(4, 8, 1, 1, 1).seconds == 25.0
    # two stages, four micro-batches: each rank's order holds one overlapped pair, three
    # forwards and three input-gradient passes of their own; each of those also waits for
    # its collectives (0.5 s here): 4 x 4 + 6 x 0.5
    assert bound(2, 4, 1, 2, 1, alone=0.5).seconds == 19.0
    assert bound(2, 4, 1, 2, 1, alone=0.5).limit == "compute"


def test_the_bound_waits_for_the_expert_all_to_alls():
    from simulator.plan.plan import micro_batch_of, sharding_of
    from simulator.stages.bounds import Reach, _expert_exchange_s

    def exchange(s, reach):
        mb = micro_batch_of(s, s.precision.bytes_per_param(s.training.optimizer)[0])
        return _expert_exchange_s(s, mb, sharding_of(s), reach)

    # Mixtral 8x7B: top-2 of hidden 4,096 in BF16, a micro-batch of 1 x 1,024 tokens. EP 4:
    # a rank receives 3/4 of its 2 x 1,024 x 4,096 x 2 B dispatch, and as much at the
    # combine, over links of 100 GB/s in all
    message = 2 * 1024 * 4096.0
    s = applied(MOE, Choice(1, 1, 1, 4, 8, 1, "1f1b", 1, "none"))
    fast = Reach(100e9)  # links of 100 GB/s in all, nothing known of hosts
    assert exchange(s, fast) == pytest.approx(2 * 0.75 * 2 * message / 100e9)
    # each rank dispatches its own sequence-parallel tokens: a TP-th of them
    s = applied(MOE, Choice(2, 1, 1, 4, 4, 1, "1f1b", 1, "none"))
    assert exchange(s, fast) == pytest.approx(0.75 * 2 * message / 100e9)
    # not under DeepEP (routed bytes), without EP, or without a capacity to divide by
    deepep = s.model_copy(update={"parallelism": s.parallelism.model_copy(
        update={"moe_dispatcher": "deepep"})})  # fmt: skip
    assert exchange(deepep, fast) == 0.0
    no_ep = applied(MOE, Choice(1, 1, 1, 1, 8, 1, "1f1b", 1, "none"))
    assert exchange(no_ep, fast) == 0.0
    assert exchange(s, Reach()) == 0.0
    # two hosts of 8: TP 4 puts an EP-4 group's members 4 ranks apart, two on the other host;
    # their half of the dispatch comes through the NIC at 50 GB/s, slower than all 4 x 100
    s = applied(MOE_2_NODES, Choice(4, 1, 1, 4, 4, 1, "1f1b", 1, "none"))
    nic = Reach(400e9, 50e9, 8)
    assert exchange(s, nic) == pytest.approx(2 * (2 / 4) * 2 / 4 * message / 50e9)


def test_what_a_gpu_can_receive_from_its_own_host_and_from_others():
    from simulator.stages.bounds import Reach

    # DGX H100 SuperPOD: NVLink 450 GB/s and PCIe 64 GB/s into a GPU; from other hosts the
    # NIC's 400 Gb/s (50 GB/s) behind that PCIe link; 8 GPUs a host
    assert adapter.reach(MOE_2_NODES) == Reach(514e9, 50e9, 8)
    assert adapter.reach(MOE) == Reach(450e9, None, 8)  # one DGX: nothing from outside
    torus = load_scenario_text(
        "model: {name: llama3-8b, layers: 2}\n"
        "cluster: {accelerator: v5p, topology: {kind: torus, shape: [4, 4, 4]}}\n"
        "training: {global_batch: 64, micro_batch: 1, seq_len: 1024}\n"
    )
    reach = adapter.reach(torus)
    assert reach.off_host_Bps is None and reach.per_host == 0 and reach.ingress_Bps > 0


def test_the_bound_of_1f1b_holds_the_textbook_bubble():
    # 1F1B over p stages of l layers each, m micro-batches: the last stage cannot start
    # before the first micro-batch's forward crossed p - 1 stages, works m (f + b + w), and
    # the last micro-batch's backward then crosses p - 1 stages again: at least
    # (m + p - 1)(f + b + w) with a stage's f, b, w (the embedding and head only add)
    s = applied(BASE, Choice(1, 4, 1, 1, 2, 0, "1f1b", 1, "none"))
    from simulator.model.compute import ComputeModel
    from simulator.plan.plan import micro_batch_of, sharding_of

    cm = ComputeModel.for_scenario(s)
    mb = micro_batch_of(s, s.precision.bytes_per_param(s.training.optimizer)[0])
    cost = layer_cost(s.model, 0, mb, sharding_of(s), "none", cm)
    blk = cost.attn_local + cost.attn_remote + cost.ffn
    per_stage = blk.f + blk.b + blk.w  # one layer per stage
    m, p = 16, 4
    bound = step_lower_bound(s)
    assert bound.limit == "drain"
    assert bound.seconds >= (m + p - 1) * per_stage
    # and the compute alone is at least m of them (the busiest stage holds the head too)
    assert m * per_stage < max(bound.busy_s) < bound.seconds


@pytest.mark.parametrize(
    "c",
    [
        Choice(1, 2, 1, 1, 4, 1, "1f1b", 1, "none"),
        Choice(2, 2, 1, 1, 2, 1, "interleaved", 1, "none", virtual_stages=2),
        Choice(1, 2, 1, 1, 4, 0, "zb-h1", 1, "selective"),
    ],
    ids=lambda c: c.label(),
)
def test_the_cheap_simulation_extrapolates_to_the_full_step(c):
    s = applied(load_scenario_text(TINY_BASE.replace("global_batch: 8", "global_batch: 128")), c)
    m = s.training.global_batch // s.dp // s.training.micro_batch
    counts = reduced_counts(c, m)
    assert counts == (4, 6)  # 2 and 3 times the stages, far fewer than m = 32 or 64
    t1, t2 = (api.run(with_batch(s, n)).metrics.step_time_s for n in counts)
    full = api.run(s).metrics.step_time_s
    # the steady state adds one period per micro-batch: within 0.3% (the search simulates
    # in full any candidate within EXTRAPOLATION_MARGIN = 2% of the best, so this is the
    # error the margin must cover with room)
    assert extrapolate(*counts[:1], t1, counts[1], t2, m) == pytest.approx(full, rel=3e-3)


def test_reduced_counts_are_skipped_when_they_save_little():
    c = Choice(1, 8, 1, 1, 1, 0, "1f1b", 1, "none")
    assert reduced_counts(c, 40) is None  # 16 + 24 micro-batches cost as much as 40
    assert reduced_counts(c, 128) == (16, 24)
    assert reduced_counts(Choice(1, 1, 1, 1, 8, 0, "1f1b", 1, "none"), 64) == (2, 3)


def test_fix_and_vary_shape_the_space():
    every, _ = enumerate_space(BASE, 8, Knobs())
    assert {c.schedule for c in every} == {"1f1b", "interleaved", "zb-h1"}
    assert {c.recompute for c in every} == {"none", "selective", "full"}
    assert {c.pp for c in every} == {1, 2, 4}  # of 4 layers and 8 GPUs
    pinned, _ = enumerate_space(BASE, 8, Knobs.parse(BASE, ["pp=2", "parallelism.tp"]))
    assert {(c.pp, c.tp) for c in pinned} == {(2, 2)}  # tp pinned to the scenario's 2
    varied, _ = enumerate_space(BASE, 8, Knobs.parse(BASE, ["pp=2"], ["sequence_parallel"]))
    assert {c.sp for c in varied if c.tp > 1} == {True, False}
    buckets, _ = enumerate_space(BASE, 8, Knobs.parse(BASE, ["pp=1"], ["bucket_size=25MB,1GB"]))
    assert {c.bucket_size for c in buckets} == {25e6, 1e9}
    with pytest.raises(SpaceError, match="no knob"):
        Knobs.parse(BASE, ["tpp=2"])
    with pytest.raises(SpaceError, match="recompute"):
        Knobs.parse(BASE, ["recompute=some"])
    with pytest.raises(SpaceError, match="both fixed and varied"):
        Knobs.parse(BASE, ["tp=2"], ["tp"])
    with pytest.raises(SpaceError, match="--fix dp=N"):
        Knobs.parse(BASE, [], ["dp"])
    with pytest.raises(SpaceError, match="has no experts"):
        Knobs.parse(BASE, ["ep=4"])
    # a registry schedule the defaults leave out, with its chunks per stage
    flex, _ = enumerate_space(BASE, 8, Knobs.parse(BASE, [], ["schedule=flexible-interleaved"]))
    assert {(c.schedule, c.virtual_stages) for c in flex if c.pp > 1} == {
        ("flexible-interleaved", 2)
    }  # 4 chunks of 4 layers over 2 stages do not fill 4 chunks each


def test_pipelines_of_any_degree_that_divides_the_gpus():
    # 12 GPUs, 6 layers: PP 3 and 6 (not powers of two), PP 4 with uneven end stages
    s = load_scenario_text("""
model: {name: llama3-8b, layers: 6}
cluster: {accelerator: H100, gpus: 12}
training: {global_batch: 24, micro_batch: 1, seq_len: 1024}
""")
    pps = {c.pp for c in enumerate_space(s, 4, Knobs())[0]}
    assert {3, 6, 4, 12} - pps == {12}  # 12 stages > 6 layers
    assert pps >= {1, 2, 3, 4, 6}


@pytest.fixture
def searched(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE.replace("global_batch: 8", "global_batch: 16"))
    out = tmp_path / "plans"
    args = ["plan", str(base), "--top", "2", "--workers", "1", "--out", str(out)]
    result = runner.invoke(app, [*args, "--format", "json", "--no-progress"])
    assert result.exit_code == 0, result.output
    return base, out, json.loads(result.stdout)


def test_written_plans_run_to_the_reported_times(searched):
    base, out, data = searched
    assert data["written"] == [str(out / "plan-1.yaml"), str(out / "plan-2.yaml")]
    for row, path in zip(data["ranked"], data["written"], strict=False):
        text = (out / path.split("/")[-1]).read_text()
        assert text.startswith("# trainsim plan's pick")
        assert yaml.safe_load(text)["parallelism"]["pp"] == row["pp"]
        ran = runner.invoke(app, ["run", path, "--format", "json"])
        assert ran.exit_code == 0, ran.output
        # the same scenario, the same deterministic simulation: the same time to the bit
        assert json.loads(ran.stdout)["step_time_s"] == row["step_time_s"]
        # and the --set line says the same plan
        sets = [a for a in row["set"].split() if a != "--set"]
        again = ["run", str(base), *sum((["--set", a] for a in sets), []), "--format", "json"]
        ran = runner.invoke(app, again)
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.stdout)["step_time_s"] == row["step_time_s"]


def test_the_search_counts_every_candidate_and_explains_the_pick(searched):
    _, _, data = searched
    c = data["counts"]
    fates = data["fates"]
    assert not {"pending", "queued"} & set(fates)  # every candidate met a fate
    # the headline's counts, each from its own bookkeeping, cover every candidate
    assert c["bound"] + c["oom"] + c["budget"] + c["cheap"] <= c["enumerated"] - c["infeasible"]
    assert fates["bound"] == c["bound"] > 0  # the bound settles most of this small space
    ranked = data["ranked"]
    times = [r["step_time_s"] for r in ranked if r["status"] == "ok"]
    assert times == sorted(times)
    assert c["full"] >= len(ranked) == 2  # --top 2 shown, every full simulation counted
    assert data["why"][-1].startswith("the pick against the runner-up (")


def test_a_search_within_its_budget_leaves_no_candidate_that_could_win(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE.replace("global_batch: 8", "global_batch: 16"))
    args = ["plan", str(base), "--fix", "tp=2", "--fix", "micro_batch=1", "--budget", "200"]
    args += ["--workers", "1", "--out", str(tmp_path / "p"), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["counts"]["budget"] == 0
    # every candidate was settled: by its bound, by memory, or simulated
    assert set(data["fates"]) <= {"bound", "infeasible", "oom", "screened", "ok"}


def test_headroom_that_leaves_no_room_finds_no_plan(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE)
    args = ["plan", str(base), "--workers", "1", "--out", str(tmp_path / "p"), "--no-progress"]
    result = runner.invoke(app, [*args, "--memory-headroom", "79GB"])
    assert result.exit_code == 2, result.output  # the job cannot be laid out here
    assert "no plan fits: the least memory a candidate needs is" in result.stdout
    assert result.stderr.startswith("error: no plan fits")
    assert "79 GB headroom" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fix", "tpp=2"], "'tpp' is no knob"),
        (["--objective", "speed"], "--objective speed: one of"),
        (["--gpus", "8,x"], "--gpus 8,x: 'x' is not a whole number"),
        (["--memory-headroom", "lots"], "--memory-headroom lots"),
    ],
)
def test_bad_plan_options_exit_2(tmp_path, args, message):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE)
    result = runner.invoke(app, ["plan", str(base), "--out", str(tmp_path / "p"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_mfu_objective_over_gpu_counts(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE.replace("global_batch: 8", "global_batch: 16"))
    args = ["plan", str(base), "--gpus", "4,8", "--objective", "mfu", "--top", "2"]
    result = runner.invoke(
        app, [*args, "--workers", "1", "--out", str(tmp_path / "p"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpus"] == [4, 8]
    ok = [r for r in data["ranked"] if r["status"] == "ok"]
    mfus = [r["mfu"] for r in ok]
    assert mfus == sorted(mfus, reverse=True)  # ranked by MFU, best first


def test_goodput_objective_needs_a_failure_model_and_ranks_by_it(tmp_path):
    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE)
    args = ["plan", str(base), "--objective", "goodput", "--out", str(tmp_path / "p")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "has no failures: section" in result.stderr
    base.write_text(TINY_BASE + "failures: {preset: llama3-table5}\n")
    more = ["--gpus", "4,8", "--top", "3", "--budget", "16", "--workers", "1", "--format", "json"]
    result = runner.invoke(app, [*args, *more])
    assert result.exit_code == 0, result.output
    from simulator.failures.objective import expected_ettr
    from simulator.scenario import load_scenario

    ok = [r for r in json.loads(result.stdout)["ranked"] if r["status"] == "ok"]
    # the cost each row is ranked by: its step over the expected ETTR of its GPU count
    ettr = {
        g: expected_ettr(load_scenario(base, [f"cluster.gpus={g}"] if g != 8 else []), 1.0)
        for g in (4, 8)
    }
    assert 0 < ettr[8] <= ettr[4] < 1  # more GPUs, more failures
    costs = [r["step_time_s"] / ettr[r["gpus"]] for r in ok]
    assert costs == sorted(costs)
