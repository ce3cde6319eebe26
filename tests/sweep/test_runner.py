"""Running sweeps: rows per point, resume by scenario hash, infeasible/OOM/error rows, the pool."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.sweep import adapter
from simulator.sweep.backends import local_workers
from simulator.sweep.runner import make_backend, run_sweep
from simulator.sweep.spec import load_spec
from simulator.sweep.store import read_results

IN_PROCESS = make_backend("local", workers=1)


@pytest.fixture
def counted(monkeypatch):
    """Count the scenarios that reach the simulator."""
    calls = []
    real = adapter.simulate

    def simulate(scenario):
        calls.append(scenario)
        return real(scenario)

    monkeypatch.setattr(adapter, "simulate", simulate)
    return calls


def test_rerunning_a_finished_sweep_simulates_nothing(write_spec, tmp_path, counted):
    spec = load_spec(
        write_spec("grid:\n  parallelism.zero: [0, 1]\n  training.micro_batch: [1, 2]\n")
    )
    out = tmp_path / "out"
    first = run_sweep(spec, out, IN_PROCESS, progress=False)
    # 4 points + the base; the base (zero 1, micro-batch 1) equals point 2, simulated once
    assert len(first) == 5
    assert len(counted) == 4
    again = run_sweep(spec, out, IN_PROCESS, progress=False)
    assert len(counted) == 4  # nothing simulated the second time
    cols = ["point", "scenario_hash", "status", "step_time_s"]
    pd.testing.assert_frame_equal(first[cols], again[cols])
    stored, keys = read_results(out)
    assert keys == ["parallelism.zero", "training.micro_batch"]
    assert sorted(stored["point"]) == [-1, 0, 1, 2, 3]


def test_results_of_another_version_of_the_code_are_simulated_again(
    write_spec, tmp_path, counted, monkeypatch
):
    from simulator.sweep import worker

    spec = load_spec(write_spec("grid:\n  parallelism.zero: [0, 2]\n"))
    out = tmp_path / "out"
    first = run_sweep(spec, out, IN_PROCESS, progress=False)
    assert len(counted) == 3  # two points and the base
    # the same scenarios under another simulator (its files hash to another id): every
    # point simulated again, the stored rows of the old code left unread
    monkeypatch.setattr(worker, "code_id", lambda: "another-version")
    again = run_sweep(spec, out, IN_PROCESS, progress=False)
    assert len(counted) == 6
    assert set(again["scenario_hash"]).isdisjoint(first["scenario_hash"])
    assert len(read_results(out)[0]) == 3


def test_the_code_id_names_the_simulators_files():
    from simulator.sweep import worker

    assert worker.code_id() == worker.code_id()  # one id per process
    assert len(worker.code_id()) == 16 and int(worker.code_id(), 16) >= 0


def test_a_grown_spec_simulates_only_the_new_points(write_spec, tmp_path, counted):
    out = tmp_path / "out"
    run_sweep(
        load_spec(write_spec("grid:\n  parallelism.zero: [0]\n")), out, IN_PROCESS, progress=False
    )
    assert len(counted) == 2  # the point and the base
    run_sweep(
        load_spec(write_spec("grid:\n  parallelism.zero: [0, 2]\n")),
        out,
        IN_PROCESS,
        progress=False,
    )
    assert len(counted) == 3


def test_infeasible_oom_and_error_rows(write_spec, tmp_path, monkeypatch):
    real = adapter.simulate

    def simulate(scenario):
        if scenario.parallelism.zero == 2:
            raise RuntimeError("boom")
        return real(scenario)

    monkeypatch.setattr(adapter, "simulate", simulate)
    spec = load_spec(
        write_spec(
            "zip:\n"
            "  parallelism.tp: [3, 2, 2, 2]\n"
            "  parallelism.zero: [1, 2, 1, 1]\n"
            "  cluster.accelerator.hbm_bytes: [80 GB, 80 GB, 1 GB, 80 GB]\n"
        )
    )
    frame = run_sweep(spec, tmp_path / "out", IN_PROCESS, progress=False).set_index("point")
    assert frame.loc[0, "status"] == "infeasible"
    assert "heads do not split over tp = 3" in frame.loc[0, "reason"]
    assert frame.loc[1, "status"] == "error"
    assert frame.loc[1, "reason"] == "RuntimeError: boom"
    assert frame.loc[2, "status"] == "oom"
    assert "exceeds the 1.0 GB of HBM" in frame.loc[2, "reason"]
    assert frame.loc[2, "step_time_s"] > 0  # an OOM point is still simulated
    assert frame.loc[3, "status"] == "ok"
    assert frame.loc[3, "reason"] == ""
    # every metric of `trainsim run --format json` is a column; utilisation one per stream
    for metric in ("mfu", "hfu", "bubble_fraction", "peak_memory_by_rank", "util_compute"):
        assert metric in frame
    assert "utilisation" not in frame


def test_errors_are_retried_only_on_request(write_spec, tmp_path, monkeypatch):
    calls = []

    def failing(scenario):
        calls.append(scenario)
        raise RuntimeError("transient")

    monkeypatch.setattr(adapter, "simulate", failing)
    spec = load_spec(write_spec("grid:\n  parallelism.zero: [0]\n"))
    out = tmp_path / "out"
    run_sweep(spec, out, IN_PROCESS, progress=False)
    run_sweep(spec, out, IN_PROCESS, progress=False)
    assert len(calls) == 2  # point and base, once
    run_sweep(spec, out, IN_PROCESS, retry_errors=True, progress=False)
    assert len(calls) == 4


def test_pool_gives_the_in_process_results(write_spec, tmp_path):
    spec = load_spec(write_spec("grid:\n  parallelism.zero: [0, 1]\n"))
    serial = run_sweep(spec, tmp_path / "a", IN_PROCESS, progress=False)
    pooled = run_sweep(spec, tmp_path / "b", make_backend("local", workers=2), progress=False)
    assert (pooled["status"] == "ok").all()
    cols = ["point", "scenario_hash", "status", "step_time_s", "mfu", "peak_memory_bytes"]
    # the simulation is deterministic: the same numbers in any process
    pd.testing.assert_frame_equal(
        serial[cols].sort_values("point").reset_index(drop=True),
        pooled[cols].sort_values("point").reset_index(drop=True),
    )


def test_workers_never_exceed_the_cores(monkeypatch):
    monkeypatch.setattr("simulator.sweep.backends.cpu_count", lambda: 2)
    assert local_workers(None, 100) == 2
    assert local_workers(16, 100) == 2
    assert local_workers(1, 100) == 1
    assert local_workers(None, 1) == 1
