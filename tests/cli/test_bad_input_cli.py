"""The command line under bad input: exit 2 with one line naming the option, checked
before any simulation; OOM made visible; the new options (--version, --fail-on-oom, --window)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FAT_TREE = ROOT / "tests/cli/data/fat-tree-4-nodes.yaml"
PIPELINE = str(ROOT / "scenarios/examples/pipeline-1f1b.yaml")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    result = runner.invoke(app, ["run", PIPELINE, "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    return out


def _collective(*args: str):
    return runner.invoke(app, ["collective", "--topology", str(FAT_TREE), *args])


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output
    return "\n".join(lines)


# ----------------------------------------------------------------------------- collective


@pytest.mark.parametrize("ranks", ["1", "0", "-1"])
def test_collective_needs_two_ranks(ranks):
    # F03 (division by zero), F04 ("over -1 ranks", 0 silently "all")
    result = _collective("--ranks", ranks, "--sizes", "1MiB")
    assert result.exit_code == 2
    assert "--ranks" in result.output and "Traceback" not in result.output


def test_collective_too_many_ranks_names_the_topology():
    result = _collective("--ranks", "33", "--sizes", "1MiB")
    assert result.exit_code == 2 and "32" in result.output


@pytest.mark.parametrize("groups", ["0", "-3"])
def test_collective_groups_must_be_positive(groups):
    result = _collective("--groups", groups, "--sizes", "1MiB")
    assert result.exit_code == 2 and "--groups" in result.output


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ("1B:8GiB:1.0000001", "sizes, more than 1,000"),  # F05: 2.3e8 sizes, 8.9 GB
        ("1MiB:8MiB:2:9", "MIN:MAX[:FACTOR]"),
        ("1MiB:8MiB:nan", "FACTOR"),
        ("1MiB:8MiB:inf", "FACTOR"),
        ("1MiB:8MiB:abc", "FACTOR 'abc' is not a number"),
        ("1MiB:8MiB:1", "FACTOR"),
        ("8MiB:1MiB", "MIN <= MAX"),
        ("0:1MiB", "0 < MIN"),
        ("lots", "--sizes"),
    ],
)
def test_collective_bad_sizes(sizes, words):
    result = _collective("--sizes", sizes)
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_parse_sizes_counts_without_building():
    assert api.parse_sizes("1MiB:8MiB") == [2**20, 2**21, 2**22, 2**23]
    # 1 B to 1 GiB at x1.03: floor(30 / log2(1.03)) + 1 = 704 sizes, within the cap
    assert len(api.parse_sizes("1B:1GiB:1.03")) == 704
    with pytest.raises(ValueError, match="1,001 sizes"):  # 2^(30/1000): one too many
        api.parse_sizes(f"1B:1GiB:{2 ** (30 / 1000)}")


def test_collective_unknown_op_lists_the_operations():
    result = _collective("--op", "all_sum", "--sizes", "1MiB")
    assert result.exit_code == 2
    assert "all_sum" in result.output
    for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"):
        assert op in result.output


def test_collective_valid_still_works():
    result = _collective("--ranks", "16", "--groups", "2", "--sizes", "1MiB", "--format", "json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["size_bytes"] == 2**20


def test_set_help_of_topology_commands_shows_topology_fields():
    for command in (["topology", "--help"], ["collective", "--help"]):
        result = runner.invoke(app, command)
        assert "nodes=" in result.output and "parallelism.tp" not in result.output


# ----------------------------------------------------------------------------- outputs


def _never_simulate(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("simulated before checking the output path")

    monkeypatch.setattr(api, "run", boom)


def test_run_out_into_a_file_exits_2_before_simulating(tmp_path, monkeypatch):
    # F14: FileExistsError after the whole simulation
    _never_simulate(monkeypatch)
    existing = tmp_path / "file"
    existing.write_text("x")
    result = runner.invoke(app, ["run", PIPELINE, "--out", str(existing)])
    assert result.exit_code == 2
    assert _one_error_line(result) == f"error: --out {existing}: exists and is not a folder"


def test_run_out_under_a_file_exits_2(tmp_path, monkeypatch):
    _never_simulate(monkeypatch)
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["run", PIPELINE, "--out", str(tmp_path / "file" / "sub")])
    assert result.exit_code == 2 and "is not a folder" in result.output


def test_run_out_unwritable_folder_exits_2(tmp_path, monkeypatch):
    _never_simulate(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        import os

        if os.access(locked, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: permissions do not apply")
        result = runner.invoke(app, ["run", PIPELINE, "--out", str(locked / "run")])
        assert result.exit_code == 2 and "cannot write" in result.output
    finally:
        locked.chmod(0o700)


def test_topology_draw_into_missing_folder_exits_2():
    result = runner.invoke(app, ["topology", str(FAT_TREE), "--draw", "/nonexistent/x.png"])
    assert result.exit_code == 2
    assert _one_error_line(result) == (
        "error: --draw /nonexistent/x.png: folder /nonexistent does not exist"
    )


def test_topology_draw_onto_a_folder_exits_2(tmp_path):
    result = runner.invoke(app, ["topology", str(FAT_TREE), "--draw", str(tmp_path)])
    assert result.exit_code == 2 and "is a folder" in result.output


def test_gantt_out_into_missing_folder_exits_2(run_dir):
    result = runner.invoke(app, ["gantt", str(run_dir), "--out", "/nonexistent/x.png"])
    assert result.exit_code == 2 and "--out /nonexistent/x.png" in result.output


def test_compare_out_into_missing_folder_exits_2(run_dir):
    result = runner.invoke(app, ["compare", str(run_dir), "--out", "/nonexistent/c.png"])
    assert result.exit_code == 2 and "--out /nonexistent/c.png" in result.output


# ----------------------------------------------------------------------------- gantt


def test_gantt_rank_not_simulated_exits_2(run_dir):
    result = runner.invoke(app, ["gantt", str(run_dir), "--ranks", "1"])
    assert result.exit_code == 2
    assert "rank 1 was not simulated" in result.output
    assert "0, 2, 4, 6" in result.output


def test_gantt_ranks_must_be_numbers(run_dir):
    result = runner.invoke(app, ["gantt", str(run_dir), "--ranks", "a,b"])
    assert result.exit_code == 2 and "--ranks" in result.output


def test_gantt_window(run_dir, tmp_path):
    png = tmp_path / "w.png"
    result = runner.invoke(
        app, ["gantt", str(run_dir), "--out", str(png), "--window", "100ms:200ms"]
    )
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 10_000
    for bad in ("200ms:100ms", "x:1", "1", "-1:2"):
        result = runner.invoke(app, ["gantt", str(run_dir), "--window", bad])
        assert result.exit_code == 2 and "--window" in result.output, (bad, result.output)


# ----------------------------------------------------------------------------- run


def test_oom_is_prominent_and_fail_on_oom_exits_3(tmp_path):
    tiny = ["--set", "cluster.accelerator.hbm_bytes=1 GB"]
    result = runner.invoke(app, ["run", PIPELINE, *tiny])
    assert result.exit_code == 0  # by default an OOM run still reports
    assert "OUT OF MEMORY" in result.stdout
    assert (
        "OUT OF MEMORY" in result.stderr and "23.5 GB" in result.stderr
    )  # 22.5 GB of tensors + 0.33 GB CUDA context and cuBLAS workspace + 0.67 GB of NCCL
    result = runner.invoke(app, ["run", PIPELINE, *tiny, "--fail-on-oom", "--format", "json"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["oom"] is True  # the result is still printed
    result = runner.invoke(app, ["run", PIPELINE, "--fail-on-oom", "--format", "json"])
    assert result.exit_code == 0


def test_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"trainsim {version('trainsim')}"


def test_validate_names_an_unknown_group():
    result = runner.invoke(app, ["validate", "--group", "throughput", "--group", "bogus"])
    assert result.exit_code == 2
    assert "unknown group(s) bogus" in result.stderr and "llama3" in result.stderr


def test_gantt_window_after_the_step_exits_2(run_dir):
    # QA: a window past the step's end drew an empty chart and exited 0
    result = runner.invoke(app, ["gantt", str(run_dir), "--window", "5s:6s"])
    assert result.exit_code == 2
    assert "starts after the step ends" in _one_error_line(result)


@pytest.mark.parametrize(
    "command",
    [
        ["topology", str(FAT_TREE), "--draw", "{dir}/t.txt"],
        ["gantt", "{run}", "--out", "{dir}/g.txt"],
        ["compare", "{run}", "--out", "{dir}/c.txt"],
    ],
)
def test_a_picture_in_a_format_matplotlib_cannot_write_exits_2(command, run_dir, tmp_path):
    # QA: matplotlib's "Format 'txt' is not supported" traceback after the work
    args = [a.format(dir=tmp_path, run=run_dir) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert line.startswith(f"error: {args[-2]} {args[-1]}: cannot draw a .txt picture")
    assert ".png" in line and ".svg" in line


@pytest.mark.parametrize(
    "command",
    [
        ["sweep", str(ROOT / "scenarios/studies/slide61-tp-pp-64-nodes.sweep.yaml")],
        ["plan", PIPELINE],
        ["goodput", str(ROOT / "scenarios/examples/llama3-405b-16k-failures.yaml")],
    ],
)
def test_sweep_plan_and_goodput_out_into_a_file_exit_2_before_simulating(
    command, tmp_path, monkeypatch
):
    # QA: FileExistsError after every point was simulated
    _never_simulate(monkeypatch)
    from simulator.sweep import adapter

    monkeypatch.setattr(adapter, "simulate", lambda *a, **k: pytest.fail("simulated"))
    existing = tmp_path / "file"
    existing.write_text("x")
    result = runner.invoke(app, [*command, "--out", str(existing)])
    assert result.exit_code == 2
    assert _one_error_line(result) == f"error: --out {existing}: exists and is not a folder"


def test_default_output_folders_are_one_safe_name():
    # QA: a spec named ../../../tmp/qa/escape wrote outside reports/sweeps/
    from simulator.cli_options import safe_name

    assert safe_name("../../../tmp/qa/escape") == "tmp-qa-escape"
    assert safe_name("moe nic x oversub") == "moe-nic-x-oversub"
    assert safe_name("llama3-405b_v1.2") == "llama3-405b_v1.2"
    assert safe_name("..") == "unnamed"
