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


def test_memory_bound_kernels_stream_at_their_measured_rates():
    # The H200 file's slopes between the two largest rows of each kernel, recomputed here:
    # copies 4.21 TB/s, tanh-GeLU 3.81 TB/s, fused AdamW 28 B per parameter at 3.45 TB/s.
    import pandas as pd

    from simulator.model.calibration import DATA

    frame = pd.read_csv(DATA / "h200" / "membound.csv")

    def slope_rate(op, bytes_of):
        rows = frame[frame["op"] == op].sort_values("elems").tail(2)
        return bytes_of(rows).diff().iloc[-1] / rows["s"].diff().iloc[-1] / 4.8e12

    _, mem = device_fits("h200")
    assert mem.e_mem == pytest.approx(slope_rate("copy", lambda r: r["bytes_moved"]), rel=1e-12)
    assert mem.e_math == pytest.approx(slope_rate("gelu", lambda r: r["bytes_moved"]), rel=1e-12)
    assert mem.e_optimizer == pytest.approx(
        slope_rate("adamw_fused_fp32", lambda r: 28 * r["elems"]), rel=1e-12
    )
    assert (mem.e_mem, mem.e_math, mem.e_optimizer) == pytest.approx(
        (0.878, 0.793, 0.718), abs=1e-3
    )
    # between a copy (0 FLOP/B) and GeLU (8 FLOPs per bf16 value in and out: 2 FLOP/B), linear
    assert mem.efficiency(0.0) == mem.e_mem
    assert mem.efficiency(2.0) == pytest.approx(mem.e_math, rel=1e-12)
    assert mem.efficiency(1.0) == pytest.approx((mem.e_mem + mem.e_math) / 2, rel=1e-12)
    assert mem.efficiency(50.0) == pytest.approx(mem.e_math, rel=1e-12)


def test_an_elementwise_kernel_is_timed_at_its_arithmetic_intensity():
    from simulator.model.ops import Op

    cm = ComputeModel.for_accelerator(get_accelerator("H200"))
    n = 2**28  # bf16 values in and out
    gelu = Op("gelu", "elementwise", 8.0 * n, 0.0, 0.0, 4.0 * n, 0.0, 0.0)
    add = Op("cast", "elementwise", 0.0, 0.0, 0.0, 4.0 * n, 0.0, 0.0)
    assert cm.op_seconds(gelu, "f") == pytest.approx(4.0 * n / (4.8e12 * cm.mem.e_math) + 2e-6)
    assert cm.op_seconds(add, "f") == pytest.approx(4.0 * n / (4.8e12 * cm.mem.e_mem) + 2e-6)


def test_a_file_of_copies_only_keeps_the_copy_rate(tmp_path):
    run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic"})
    _, mem = device_fits(str(tmp_path), PEAK, HBM)
    assert mem.e_math is None and mem.e_optimizer is None
    assert mem.efficiency(2.0) == mem.optimizer == mem.e_mem
