"""The command line: JSON contract, exit codes, every shipped scenario."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simulator.cli import app

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
    assert rank["total"] == pytest.approx(parts + rank["buffers"], rel=1e-12)
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
    for path in sorted((root / "scenarios").rglob("*.yaml")):
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
