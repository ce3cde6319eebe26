"""`trainsim validate`: every published row within its stated tolerance (or an expected miss
with its reason).

Megatron SC21 Table 1, achieved TFLOP/s per GPU: 10% (the issue's bar). The simulator is
1-10% optimistic on all ten rows (the 76B row 9.6%): framework time between kernels is not
modelled. Bus bandwidths: 5%. Zero-bubble
throughput ratios: 5% (the issue's bar). Memory formulas: exact at the printed precision.
"""

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.validation import summary_frame, validate

DOCS_TABLE = Path(__file__).resolve().parents[2] / "docs" / "data" / "validation-rows.csv"


@pytest.mark.slow  # runs every validation scenario (about a minute)
def test_every_row_within_tolerance():
    frame = validate()
    assert len(frame) == 10 + 6 + 5 + 10 + 51 + 54 + 6 + 3 + 5 + 10 + 8 + 7 + 2 + 8 + 5
    assert frame["expected_miss"].map(lambda x: isinstance(x, str)).all()
    failing = frame[~frame["within"]]
    # Only rows that say why the model cannot meet them may miss: one ZB-1p row at the 5%
    # edge (ZB-1p gains 2.3% more than the paper's on average), six ZB-2p* rows at one
    # sequence per micro-batch (+5 to +8%: halving the micro-batch costs more than we
    # price), five ZB-V rows (+5 to +7%, as ZB-1p but more), and Table 2's ZeRO-3 rows (the
    # 2021 DeepSpeed implementation's overheads).
    assert (failing["expected_miss"] != "").all(), failing.to_string()
    # 5 + four public FSDP throughput rows (MPT-7B on H100 +11%, torchtitan on A100 +16.5%
    # and on H100 at 500 W +27% and +34%, over their 96 GB: op-level checkpointing),
    # + Llama 3's 8K-GPU row (out of memory),
    # + NVIDIA's Llama 3.1 8B, Nemotron-4 340B, Llama 3.1 405B and Grok-1 recipes (throughput
    # within 2%, 4%, 8% and 4%, but over 80 GB in our memory ledger) + nccl-tests' times at
    # 1 and 8 MiB on both systems, + DeepEP's eight all-to-all bandwidths and the five Qwen3
    # MoE recipes (their reasons in rows.yaml: the kernels' copy rate; the layouts' host work
    # and grouped GEMMs)
    assert len(failing) <= 28 + 13
    # the GB200 Qwen3 recipe: optimistic like the H100 ones with small experts (+20% today);
    # a bound on the gap, so that a change that widens it shows
    qwen = frame[frame["row"] == "mbridge-qwen3-235b-256xgb200"]
    assert len(qwen) == 1 and 0.10 < qwen["error"].iloc[0] < 0.25
    # DeepEP: every row optimistic, by 11-28% today (the kernels' own copy rate, 24 SMs, is
    # not modelled): a bound on the gap, so that a change that widens it shows
    deepep = frame[frame["group"] == "DeepEP all-to-all bandwidth"]
    assert len(deepep) == 8 and deepep["error"].between(0.05, 0.30).all()
    # at the sustained GEMM rate the Hopper throughput rows sit on both sides of the
    # published ones (they were all but one optimistic, +2% to +24%, at the burst rate)
    hopper = frame[frame["group"].isin(["NVIDIA H100 recipes (BF16)", "Llama 3 Table 4"])]
    assert (hopper["error"] < 0).sum() >= 4 and (hopper["error"] > 0).sum() >= 2
    assert (hopper["error"].abs() <= 0.10).all()
    nvidia = frame[frame["group"] == "NVIDIA H100 recipes (BF16)"].set_index("row")
    ok = ["nvidia-gpt3-175b-128xh100", "nvidia-llama31-70b-64xh100", "nvidia-nemotron4-15b-16xh100"]
    ok.append("nvidia-llama4-maverick-512xh100")  # MoE, EP 128 over 64 nodes
    assert nvidia.loc[ok, "within"].all()  # within 10%
    # the larger recipes miss on memory only: their throughput is within 10% (Grok-1: MoE,
    # expert TP 1 under TP 4; over 80 GB with NCCL's all-to-all buffers)
    big = ["nvidia-nemotron4-340b-128xh100", "nvidia-llama31-405b-576xh100"]
    big.append("nvidia-grok1-314b-512xh100")
    assert (nvidia.loc[big, "error"].abs() <= 0.10).all() and not nvidia.loc[big, "within"].any()
    # GB200: its sustained GEMM rate predicted from the B200's by the power model, nothing
    # measured on it: every dense recipe row within 10% and in memory
    gb200 = frame[frame["group"] == "NVIDIA GB200 recipes (BF16)"]
    assert len(gb200) == 7 and gb200["within"].all()
    layer = frame[frame["group"] == "Korthikanti Table 4 (layer time)"]
    assert layer["within"].all()  # every forward and backward time within 10%
    llama = frame[frame["group"] == "Llama 3 Table 4"].set_index("row")
    # ZeRO-2's per-micro-batch reduce-scatters cost the 8K-context rows a third of their
    # step: the 16K-GPU row within 10% (-6.3%), the 8K-GPU one's throughput too (+1.1%, out
    # of memory); at 128K context they hide and the row is faster than the 8K ones (+6.3%)
    assert abs(llama.loc["llama3-405b-16k", "error"]) <= 0.10
    assert llama.loc[["llama3-405b-16k", "llama3-405b-16k-128k"], "within"].all()
    assert abs(llama.loc["llama3-405b-8k", "error"]) <= 0.10
    assert llama.loc["llama3-405b-16k-128k", "error"] > llama.loc["llama3-405b-16k", "error"]
    zb = frame[frame["group"].str.startswith("Zero-bubble")]
    # the searched ZB-2p within 2% on all 12 rows at the paper's micro-batch; ZB-1p within
    # 5% but for one row at +5.0%; ZB-2p* (half the micro-batch) within 8%
    star = zb["row"].str.endswith("ZB-2p*")
    assert (zb[zb["row"].str.contains(": zb-2p") & ~star]["error"].abs() <= 0.02).all()
    # (a regression bound at today's worst ZB-1p row, +4.9%, not a tolerance: the group's is
    # 5%, which that row sits at the edge of, with its reason)
    assert (zb[zb["row"].str.contains(": zb-1p")]["error"].abs() <= 0.051).all()
    assert (zb[star]["error"].abs() <= 0.08).all() and star.sum() == 9
    v = zb["row"].str.contains(": zb-v")  # PyTorch's fixed pattern: optimistic, within 7%
    assert (zb[v]["error"].between(0.0, 0.07)).all() and v.sum() == 9
    assert (~zb["within"]).sum() <= 12
    summary = summary_frame(frame).set_index("group")
    # every Table 1 row within 10% (the 76B row at +9.6% since NCCL's per-step latency)
    assert summary.loc["Megatron SC21 Table 1", "worst_abs_error"] <= 0.10
    assert summary.loc["Megatron SC21 Table 1", "within"] == 10
    table2 = frame[frame["group"] == "Megatron SC21 Table 2"]
    assert table2[table2["row"].str.contains("ptd")]["within"].all()  # PTD-P within 10%
    assert summary.loc["ZeRO Table 1", "within"] == 54
    # the documentation's table (docs/data/validation-rows.csv, written by
    # benchmarks/validation_table.py) is this run's: same rows, same values to its 10 digits
    shown = pd.read_csv(DOCS_TABLE, keep_default_na=False)
    assert list(shown["row"]) == list(frame["row"]), "run benchmarks/validation_table.py"
    assert np.allclose(shown["simulated"], frame["simulated"], rtol=1e-8), (
        "docs/data/validation-rows.csv is stale: run python benchmarks/validation_table.py"
    )


def test_a_run_that_does_not_fit_does_not_reproduce_a_published_one(monkeypatch):
    # Every published run fitted in its GPUs' memory: a simulated run over capacity misses
    # its row whatever its speed (throughput rows and Megatron's alike)
    from simulator import validation

    spec = {"tolerance": 0.10, "rows": [{"scenario": "a.yaml", "published": 100.0}]}

    class Scenario:
        name, num_gpus = "row", 1

    def summaries(oom):
        return lambda rows, each: [(Scenario(), {"tokens_per_s": 101.0, "oom": oom})]

    monkeypatch.setattr(validation, "_scenario_summaries", summaries(False))
    assert validation.throughput_rows(spec)[0]["within"]
    monkeypatch.setattr(validation, "_scenario_summaries", summaries(True))
    assert not validation.throughput_rows(spec)[0]["within"]
    # Megatron's rows: the paper's FLOPs over the simulated step, at the published rate
    from simulator.scenario import load_scenario

    s = load_scenario("scenarios/validation/megatron-sc21-table1-1.7b.yaml")
    m, t = s.model, s.training
    flops = (
        96
        * t.global_batch
        * t.seq_len
        * m.layers
        * m.hidden**2
        * (1 + t.seq_len / (6 * m.hidden) + m.vocab / (16 * m.layers * m.hidden))
    )
    step = flops / (s.num_gpus * 137e12)  # exactly the published 137 TFLOP/s per GPU
    for oom in (False, True):
        monkeypatch.setattr(
            validation,
            "_scenario_summaries",
            lambda rows, each, oom=oom: [(s, {"step_time_s": step, "oom": oom})],
        )
        row = validation.megatron_rows({"tolerance": 0.10, "rows": [{"published": 137}]})[0]
        assert row["error"] == pytest.approx(0.0, abs=1e-12) and row["within"] is not oom


def test_ratio_rows_compare_step_time_ratios_and_need_both_runs_to_fit():
    # a row's ratio: the baseline's step time over the row's, against the published MFUs'
    # ratio (same model, batch and GPUs); each row runs its scenario, then the baseline's
    # overrides of it
    from simulator import validation

    spec = {
        "tolerance": 0.05,
        "rows": [
            {"name": "r", "scenario": "a.yaml", "baseline_set": ["x=1"], "published": 49.3,
             "published_baseline": 46.3, "unit": "x"},
        ],
    }  # fmt: skip
    seen = []

    def each(oom_row, oom_base, base_s):
        def run(fn, jobs):
            seen.extend(jobs)
            return [
                {"step_time_s": 4.0, "oom": oom_row},
                {"step_time_s": base_s, "oom": oom_base},
            ]

        return run

    [row] = validation.ratio_rows(spec, "g", each(False, False, 4.2))
    assert seen == [("a.yaml", ()), ("a.yaml", ("x=1",))]
    assert row["published"] == pytest.approx(49.3 / 46.3) and row["simulated"] == 1.05
    assert row["error"] == pytest.approx(1.05 / (49.3 / 46.3) - 1) and row["within"]
    assert not validation.ratio_rows(spec, "g", each(False, False, 4.6))[0]["within"]  # +8%
    assert not validation.ratio_rows(spec, "g", each(True, False, 4.2))[0]["within"]
    assert not validation.ratio_rows(spec, "g", each(False, True, 4.2))[0]["within"]


def test_validate_command_json():
    result = CliRunner().invoke(app, ["validate", "--group", "nccl", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["row"] for r in data["rows"]][:2] == [
        "8x H100 ring all-reduce",
        "8x H100 NVLS all-reduce",
    ]
    assert data["groups"][0]["within"] == 5


def test_layer_times_on_a_hand_made_trace():
    # layer 1's forward runs from 1.0 s to layer 2's first task at 1.7 s (its TP all-reduce
    # included); its backward from 5.0 s to layer 0's at 6.2 s
    import pandas as pd

    from simulator.trace import COLUMNS
    from simulator.validation import layer_times

    rows = [
        (0, "compute", "compute", "forward", "attention", 0, 0, 0.0, 0.5, 1, 0),
        (0, "compute", "compute", "forward", "attention", 1, 0, 1.0, 1.4, 1, 0),
        (0, "tp", "comm", "forward", "tp_all_reduce", 1, 0, 1.4, 1.7, 0, 8),
        (0, "compute", "compute", "forward", "attention", 2, 0, 1.7, 2.0, 1, 0),
        (0, "compute", "compute", "input_grad", "mlp", 2, 0, 3.0, 4.0, 1, 0),
        (0, "compute", "compute", "input_grad", "mlp", 1, 0, 5.0, 6.0, 1, 0),
        (0, "compute", "compute", "weight_grad", "weight_grad", 0, 0, 6.2, 7.0, 1, 0),
        (8, "compute", "compute", "forward", "attention", 1, 0, 0.0, 9.0, 1, 0),  # not rank 0
    ]
    fwd, bwd = layer_times(pd.DataFrame(rows, columns=COLUMNS), 1)
    assert fwd == pytest.approx(0.7)
    assert bwd == pytest.approx(1.2)


def test_rows_simulated_side_by_side_are_the_rows_simulated_in_turn():
    # Two processes, two rows each (the two smallest Table 1 models): the same rows, in order.
    from simulator import api, validation

    spec = {"rows": [{"scenario": "scenarios/validation/megatron-sc21-table1-1.7b.yaml",
                      "published": 137},
                     {"scenario": "scenarios/validation/megatron-sc21-table1-3.6b.yaml",
                      "published": 138}],
            "tolerance": 0.1}  # fmt: skip
    in_turn = validation.megatron_rows(spec)
    with ProcessPoolExecutor(2, initializer=api.quiet_pool_worker) as pool:
        side_by_side = validation.megatron_rows(spec, each=validation.on_pool(pool))
    assert side_by_side == in_turn
    assert [r["row"] for r in in_turn] == ["megatron-sc21-table1-1.7b", "megatron-sc21-table1-3.6b"]


def test_a_workers_scenario_error_reaches_the_parent_whole():
    # A bad scenario in a worker comes back as the same ScenarioError, message and problems
    # intact (an exception crosses the pool pickled).
    from simulator import validation
    from simulator.scenario import ScenarioError

    job = ("scenarios/validation/megatron-sc21-table1-1.7b.yaml", ("parallelism.tp=banana",))
    with pytest.raises(ScenarioError) as here:
        validation._summary(job)
    with ProcessPoolExecutor(1) as pool, pytest.raises(ScenarioError) as there:
        validation.on_pool(pool)(validation._summary, [job, job])
    assert str(there.value) == str(here.value)
    assert "parallelism.tp" in str(there.value)
    assert there.value.problems == here.value.problems


def test_validate_help_names_every_group():
    from simulator.validation import GROUPS

    text = " ".join(CliRunner().invoke(app, ["validate", "--help"]).output.split())
    assert all(g in text for g in GROUPS), text


def test_validate_refuses_no_workers_and_unknown_groups():
    from simulator.validation import UnknownGroup

    with pytest.raises(ValueError, match="at least 1"):
        validate(["zero"], workers=0)
    with pytest.raises(UnknownGroup, match="unknown group"):
        validate(["zero", "nope"])


def test_validate_on_a_pool_gives_the_rows_in_turn(monkeypatch):
    # The pool path of validate() itself (workers capped at the usable cores, here 2), on the
    # cheap memory groups: the same frame as in turn.
    from simulator import api

    monkeypatch.setattr(api, "usable_cores", lambda: 2)
    pooled = validate(["zero", "korthikanti"], workers=8)
    assert pooled.equals(validate(["zero", "korthikanti"], workers=1))
