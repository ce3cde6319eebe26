"""The Ray backend on a small local Ray (one CPU) gives the local backend's results."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.sweep.runner import make_backend, run_sweep
from simulator.sweep.spec import load_spec

ray = pytest.importorskip("ray")


def test_ray_gives_the_local_results(write_spec, tmp_path):
    spec = load_spec(write_spec("grid:\n  parallelism.zero: [0, 1]\n  parallelism.tp: [2, 3]\n"))
    local = run_sweep(spec, tmp_path / "local", make_backend("local", workers=1), progress=False)
    on_ray = run_sweep(spec, tmp_path / "ray", make_backend("ray", workers=1), progress=False)
    assert not ray.is_initialized()  # the backend shuts down the Ray it started
    assert set(on_ray["status"]) == {"ok", "infeasible"}
    cols = ["point", "scenario_hash", "status", "reason", "step_time_s", "mfu", "warnings"]
    # the step simulation is deterministic, so the numbers are identical, not just close
    pd.testing.assert_frame_equal(
        local[cols].sort_values("point").reset_index(drop=True),
        on_ray[cols].sort_values("point").reset_index(drop=True),
    )


def test_plan_on_ray_ranks_as_the_local_search(tmp_path):
    from typer.testing import CliRunner

    from simulator.cli import app
    from tests.sweep.conftest import TINY_BASE

    base = tmp_path / "tiny.yaml"
    base.write_text(TINY_BASE)
    args = ["plan", str(base), "--top", "2", "--budget", "8", "--workers", "1", "--format", "json"]
    runs = {}
    for name in ("local", "ray"):
        out = ["--out", str(tmp_path / name), "--backend", name, "--no-progress"]
        result = CliRunner().invoke(app, [*args, *out])
        assert result.exit_code == 0, result.output
        import json

        runs[name] = json.loads(result.stdout)["ranked"]
    assert not ray.is_initialized()  # the search's one Ray session ended with it
    # the same candidates simulated the same (deterministic) way: the same ranking and times
    key = ["tp", "pp", "cp", "dp", "zero", "schedule", "micro_batch", "recompute", "step_time_s"]
    assert [[r[k] for k in key] for r in runs["ray"]] == [
        [r[k] for k in key] for r in runs["local"]
    ]


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("not a host", "not host:port"),
        ("127.0.0.1:1", "nothing answers there"),  # Ray itself would wait for minutes
    ],
)
@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_a_ray_address_with_nothing_there_is_bad_input(
    write_spec, tmp_path, address, message, command
):
    from typer.testing import CliRunner

    from simulator.cli import app

    spec = write_spec("grid:\n  parallelism.tp: [1]\n")
    target = str(spec) if command == "sweep" else str(tmp_path / "base.yaml")
    args = [command, target, "--out", str(tmp_path / "o"), "--backend", "ray"]
    result = CliRunner().invoke(app, [*args, "--address", address])
    assert result.exit_code == 2, result.output
    assert f"--address {address}: {message}" in result.stderr
