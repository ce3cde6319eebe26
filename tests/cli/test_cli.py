"""The command line: JSON contract, exit codes, every shipped scenario."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from tests.conftest import scenario_files

runner = CliRunner()
EXAMPLE = "scenarios/examples/llama3-8b-fsdp.yaml"


def test_memory_json_contract(root):
    result = runner.invoke(app, ["memory", str(root / EXAMPLE), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["parameter_count"] == 8_030_261_248
    [rank] = data["ranks"]
    for key in (
        "params",
        "grads",
        "optimizer",
        "activations",
        "buffers",
        "total",
        "capacity",
        "fits",
    ):
        assert key in rank
    parts = rank["params"] + rank["grads"] + rank["optimizer"] + rank["activations"]
    held = parts + rank["buffers"]  # the allocator's reserve over the tensors, then the runtime
    total = held / (1 - rank["reserve_fraction"]) + rank["runtime"] + rank["nccl"]
    assert rank["total"] == pytest.approx(total, rel=1e-12)
    # FSDP over 8 ranks, Megatron bf16 (2 + 4 + 12 bytes): model states are 18 P / 8.
    assert rank["params"] + rank["grads"] + rank["optimizer"] == pytest.approx(
        18 * 8_030_261_248 / 8, rel=1e-12
    )


def test_memory_table_and_max_params(root):
    result = runner.invoke(
        app, ["memory", str(root / "scenarios/zero-slide28/stage3.yaml"), "--max-params"]
    )
    assert result.exit_code == 0, result.output
    assert "53.33B parameters" in result.stdout
    assert "every rank" in result.stdout


def test_memory_works_on_every_shipped_scenario(root):
    for path in scenario_files():
        result = runner.invoke(app, ["memory", str(path), "--format", "json"])
        assert result.exit_code == 0, (path, result.output)
        assert json.loads(result.stdout)["ranks"]


def test_set_overrides(root):
    result = runner.invoke(
        app, ["memory", str(root / EXAMPLE), "--format", "json", "--set", "parallelism.zero=0"]
    )
    rank = json.loads(result.stdout)["ranks"][0]
    assert rank["optimizer"] == pytest.approx(12 * 8_030_261_248, rel=1e-12)


def test_bad_input_exits_2_naming_file_line_and_field(tmp_path, root):
    bad = tmp_path / "bad.yaml"
    bad.write_text((root / EXAMPLE).read_text().replace("  zero: fsdp", "  zero: fsdp\n  tpp: 2"))
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "memory", str(bad)],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert proc.returncode == 2
    assert f"{bad}:" in proc.stderr and "parallelism.tpp: unknown field" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_missing_file_exits_2(tmp_path):
    result = runner.invoke(app, ["memory", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read file" in result.output


def test_catalog_commands():
    result = runner.invoke(app, ["models", "--format", "json"])
    names = {row["name"]: row for row in json.loads(result.stdout)}
    assert names["llama3-405b"]["params"] == 405_853_388_800
    result = runner.invoke(app, ["accelerators"])
    assert any(a["name"] == "H200-SXM" for a in json.loads(result.stdout))
    # QA: --format table printed the JSON; the table gives the catalog in TFLOP/s and GB
    result = runner.invoke(app, ["accelerators", "--format", "table"])
    assert result.exit_code == 0
    h100 = next(line for line in result.stdout.splitlines() if line.strip().startswith("H100"))
    assert h100.split()[:6] == ["H100-SXM", "gpu", "hopper", "989", "1,979", "80"]
    assert h100.split()[-2:] == ["0.888", "1.000"]  # sustained 755/850; the calibrated die
    a100 = next(line for line in result.stdout.splitlines() if line.startswith("A100-SXM4-80GB"))
    assert a100.split()[-2] == "1.000"  # no sustained rate published for the A100 SXM
    gb200 = next(line for line in result.stdout.splitlines() if line.strip().startswith("GB200"))
    assert gb200.split()[-2:] == ["0.792", "0.965"]  # predicted from the B200; MAMF ratio


def test_topology_command(root, tmp_path):
    png = tmp_path / "t.png"
    result = runner.invoke(
        app,
        [
            "topology",
            str(root / "topologies/dgx-h100-superpod.yaml"),
            "--set",
            "nodes=4",
            "--draw",
            str(png),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["devices"] == 32 and info["nics"] == 32
    assert info["bisection_Bps"] == pytest.approx(32 * 50e9 / 2)
    assert png.stat().st_size > 10_000  # a real picture
    # QA: a torus reshaped by --set kept the file's name as its only description
    result = runner.invoke(
        app, ["topology", str(root / "topologies/tpu-v5p-pod.yaml"), "--set", "shape=[4,4,4]"]
    )
    assert result.stdout.startswith("TPU v5p 16x16x24 (torus 4x4x4): 64 devices")


def test_collective_command_nccl_table(root):
    result = runner.invoke(
        app,
        [
            "collective",
            "--topology",
            str(root / "topologies/dgx-h100.yaml"),
            "--op",
            "all_reduce",
            "--ranks",
            "8",
            "--algo",
            "ring",
            "--sizes",
            "1MiB:1GiB:32",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["size_bytes"] for r in rows] == [2**20, 2**25, 2**30]
    for r in rows:  # busbw = algbw x 2(n-1)/n (nccl-tests PERFORMANCE.md)
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"] * 2 * 7 / 8, rel=1e-12)
    assert rows[-1]["busbw_Bps"] < 450e9  # never above the NVLink line rate
    # QA: the table said "algorithm default"; it names what ran, and NCCL's protocol by size
    assert {r["algorithm"] for r in rows} == {"ring"}
    assert [r["protocol"] for r in rows] == ["LL", "LL128", "Simple"]  # 1 MiB, 32 MiB, 1 GiB
    table = runner.invoke(
        app,
        ["collective", "--topology", str(root / "topologies/dgx-h100.yaml"), "--sizes", "1MiB"],
    )
    assert "algorithm ring (the default; --algo chooses)" in table.stdout


def test_collective_command_bad_input(root):
    result = runner.invoke(
        app,
        [
            "collective",
            "--topology",
            str(root / "topologies/dgx-h100.yaml"),
            "--algo",
            "halving_doubling",
            "--ranks",
            "6",
        ],
    )
    assert result.exit_code == 2 and "power-of-two" in result.output
    result = runner.invoke(app, ["collective", "--topology", str(root / "topologies/nope.yaml")])
    assert result.exit_code == 2


RUN_KEYS = (
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "hfu",
    "model_tflops_per_gpu",
    "bubble_fraction",
    "exposed_comm_fraction",
    "overlap_fraction",
    "peak_memory_bytes",
    "oom",
    "utilisation",
)


def test_run_json_and_out_dir(root, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "run",
            str(root / "scenarios/examples/pipeline-1f1b.yaml"),
            "--format",
            "json",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in RUN_KEYS:
        assert key in summary
    assert 0 < summary["mfu"] < summary["hfu"] + 1e-12 <= 1
    assert 0 < summary["bubble_fraction"] < 0.5
    assert json.loads((out / "summary.json").read_text())["step_time_s"] == summary["step_time_s"]
    import pandas as pd

    trace_file = out / "trace.parquet" if (out / "trace.parquet").exists() else out / "trace.csv"
    trace = (pd.read_parquet if trace_file.suffix == ".parquet" else pd.read_csv)(trace_file)
    assert list(trace.columns) == [
        "rank",
        "stream",
        "kind",
        "phase",
        "name",
        "layer",
        "microbatch",
        "start_s",
        "end_s",
        "flops",
        "bytes",
    ]
    assert trace["end_s"].max() == pytest.approx(summary["step_time_s"])
    assert (out / "memory.csv").exists()


SMALL_EXAMPLES = [
    "ddp-megatron-1.7b",
    "zero1-llama3-8b",
    "llama3-8b-fsdp",
    "pipeline-gpipe",
    "pipeline-interleaved",
    "pipeline-zb-h1",
    "pipeline-zb-h2",
    "pipeline-zb-2p",
    "tp-sp-llama3-70b",
    "cp-llama3-8b-128k",
    "mixtral-8x22b",
]


@pytest.mark.parametrize("name", SMALL_EXAMPLES)
def test_run_small_examples(root, name):
    result = runner.invoke(
        app, ["run", str(root / f"scenarios/examples/{name}.yaml"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert not summary["oom"] and 0.1 < summary["mfu"] < 0.8


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama3-405b-16k", "gpt3-175b-dgx-a100", "deepseek-v3-like"])
def test_run_large_examples(root, name):
    result = runner.invoke(
        app, ["run", str(root / f"scenarios/examples/{name}.yaml"), "--format", "json"]
    )
    assert result.exit_code == 0, result.output


def test_run_bad_input_exits_2(root):
    result = runner.invoke(
        app,
        ["run", str(root / "scenarios/examples/pipeline-1f1b.yaml"), "--set", "parallelism.pp=3"],
    )
    assert result.exit_code == 2 and "parallelism" in result.output


def test_costs_prints_one_layer_per_pass(root):
    result = runner.invoke(
        app, ["costs", str(root / "scenarios/examples/tp-sp-llama3-70b.yaml"), "--layer", "2"]
    )
    assert result.exit_code == 0, result.output
    for word in ("forward", "input_grad", "weight_grad", "mlp_up", "compute", "memory"):
        assert word in result.stdout
    # the H100's GEMMs at the clock this step holds under its power limit, said, and at the
    # burst rate on request: a compute-bound kernel 1/clock faster, a memory-bound one
    # unchanged
    path = str(root / "scenarios/examples/tp-sp-llama3-70b.yaml")
    clock = api.compute_model_of(api.load(path)).sustained
    assert 0.888 <= clock < 1.0  # at least a pure GEMM run's clock (power_model tests)
    assert f"compute-bound kernels at {clock:.3f} of their burst rate" in result.stdout
    held = json.loads(runner.invoke(app, ["costs", path, "--format", "json"]).stdout)
    burst = json.loads(
        runner.invoke(
            app,
            ["costs", path, "--format", "json", "--set", "cluster.accelerator.sustained_compute=1"],
        ).stdout
    )
    for h, b in zip(held, burst, strict=True):
        if h["bound"] == "memory":
            assert h["seconds"] == b["seconds"]
        elif h["op"] == "mlp_up":
            launch = 2e-6  # LAUNCH_S, paid either way
            assert (h["seconds"] - launch) / (b["seconds"] - launch) == pytest.approx(1 / clock)
    rows = json.loads(
        runner.invoke(
            app,
            ["costs", str(root / "scenarios/examples/tp-sp-llama3-70b.yaml"), "--format", "json"],
        ).stdout
    )
    assert {r["bound"] for r in rows} == {"compute", "memory"}
    bad = runner.invoke(
        app, ["costs", str(root / "scenarios/examples/tp-sp-llama3-70b.yaml"), "--layer", "80"]
    )
    assert bad.exit_code == 2 and "--layer" in bad.output


def test_run_builds_the_topology_once(root, monkeypatch):
    """The warnings and the step share one build (a 16K-GPU fabric takes about as long to
    build as its step to simulate; `run` built it twice)."""
    from simulator.topology import build as builder

    built = []  # counted at the builder, whichever name a caller imported it by
    build = builder._build
    monkeypatch.setattr(builder, "_build", lambda c: built.append(c) or build(c))
    path = root / "scenarios/examples/ddp-megatron-1.7b.yaml"
    result = runner.invoke(app, ["run", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(built) == 1


def test_run_steps_prints_the_distribution_and_writes_steps_csv(tmp_path):
    """`run --steps N`: p50/p90/p99 against the variability-free step, the GPUs the others
    waited on, and steps.csv (one row a drawn step) with --out."""
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        ["run", "scenarios/examples/pipeline-1f1b.yaml", "--steps", "5", "--out", str(out),
         "--no-links"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "step time, 5 steps" in result.stdout and "p99" in result.stdout
    assert "paced by GPU" in result.stdout
    steps = pd.read_csv(out / "steps.csv")
    assert list(steps["step"]) == [0, 1, 2, 3, 4]
    assert (steps["step_time_s"] > 0).all()
