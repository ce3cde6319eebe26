"""Calibration files: the fit recovers a known curve, bad files are named, and the
microbenchmark writer works without a GPU (its timer is injected)."""

import pytest
from typer.testing import CliRunner

from simulator.calibrate import run_microbenchmarks
from simulator.cli import app
from simulator.hardware import get_accelerator
from simulator.model.calibration import CalibrationError, device_fits, load_calibration
from simulator.model.compute import ComputeModel

PEAK, HBM = 500e12, 2e12
E_MAX, X_HALF, T0, E_MEM = 0.6, 64.0, 10e-6, 0.8


def synthetic_timer(kind, shape):
    """A GPU that follows the model exactly (peak 500 TFLOP/s, 2 TB/s)."""
    if kind == "gemm":
        m, n, k = shape
        e = E_MAX * (m / (m + X_HALF)) * (n / (n + X_HALF)) * (k / (k + X_HALF))
        return [T0 + 2 * m * n * k / (PEAK * e)] * 3
    return [5e-6 + 4 * shape[0] / (HBM * E_MEM)] * 3


def test_fit_recovers_a_known_device(tmp_path):
    paths = run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic"})
    assert [p.name for p in paths] == ["gemm.csv", "membound.csv", "meta.json"]
    gemm, mem = device_fits(str(tmp_path), PEAK, HBM)
    # The grid steps e_max by 0.01 and x geometrically (~12%): recovered within a step.
    assert gemm.e_max == pytest.approx(E_MAX, abs=0.01)
    assert gemm.x_half == pytest.approx(X_HALF, rel=0.12)
    assert gemm.rms_log_error < 0.02
    assert mem.e_mem == pytest.approx(E_MEM, rel=1e-9)  # two exact points: exact slope


def test_an_accelerator_can_use_its_own_calibration(tmp_path):
    run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic"})
    # The folder was measured on this (synthetic) device: its peaks are the fit's reference.
    base = get_accelerator("H100").model_dump()
    acc = get_accelerator("H100").model_validate(
        {
            **base,
            "name": "synthetic",
            "peak_flops_per_s": {"bf16": PEAK},
            "hbm_bandwidth_Bps": HBM,
            "calibration": str(tmp_path),
        }
    )
    cm = ComputeModel.for_accelerator(acc)
    assert cm.gemm.e_max == pytest.approx(E_MAX, abs=0.01)
    assert ComputeModel.for_accelerator(get_accelerator("H100")).gemm.e_max == pytest.approx(
        0.71, abs=0.005
    )  # the shipped H200 fit


def test_bad_files_are_named(tmp_path):
    run_microbenchmarks(tmp_path, synthetic_timer, {})
    (tmp_path / "gemm.csv").write_text("m,n,s\n1,2,3\n4,5,6\n")
    with pytest.raises(CalibrationError, match=r"gemm.csv: missing column\(s\) k"):
        load_calibration(tmp_path)
    (tmp_path / "gemm.csv").write_text("m,n,k,s\n1,2,3,-1\n4,5,6,1\n")
    with pytest.raises(CalibrationError, match="positive"):
        load_calibration(tmp_path)
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "nowhere")


def test_calibrate_without_a_gpu_exits_2(tmp_path):
    result = CliRunner().invoke(
        app, ["calibrate", "--out", str(tmp_path), "--peak", "989 TFLOP/s", "--hbm", "3.35 TB/s"]
    )
    assert result.exit_code == 2
    assert "PyTorch is not installed" in result.output or "no CUDA device" in result.output
