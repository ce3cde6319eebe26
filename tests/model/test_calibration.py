"""Calibration files: the fit recovers a known curve, bad files are named, and the
microbenchmark writer works without a GPU (its timer is injected)."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.calibrate import run_microbenchmarks
from simulator.cli import app
from simulator.hardware import get_accelerator
from simulator.model.calibration import CalibrationError, device_fits, load_calibration
from simulator.model.compute import ComputeModel
from simulator.model.ops import Op
from tests.conftest import membound_slope

PEAK, HBM = 500e12, 2e12
E_MAX, X_HALF, T0, E_MEM = 0.6, 64.0, 10e-6, 0.8
E_MATH, E_ADAM = 0.7, 0.6  # GeLU's and fused AdamW's HBM efficiencies


LAUNCH_S, OP_S, HELD = 6e-6, 7e-6, 0.9  # CPU per launch, autograd's per op; the held clock


def synthetic_timer(kind, shape):
    """A GPU that follows the model exactly (peak 500 TFLOP/s, 2 TB/s), on a CPU that issues a
    kernel in 6 us (13 us with autograd recording), whose clock falls to 0.9 of its short-run
    rate after 20 GEMMs of a long run."""
    if kind == "launch":
        return [shape[0] * LAUNCH_S] * 3
    if kind == "launch_autograd":
        return [shape[0] * (LAUNCH_S + OP_S)] * 3
    if kind == "sustained_gemm":
        m, n, k = shape
        t = T0 + 2 * m * n * k / (PEAK * E_MAX)
        return [t] * 20 + [t / HELD] * 80
    if kind == "gemm":
        m, n, k = shape
        e = E_MAX * (m / (m + X_HALF)) * (n / (n + X_HALF)) * (k / (k + X_HALF))
        return [T0 + 2 * m * n * k / (PEAK * e)] * 3
    if kind == "adamw_fused_fp32":  # 28 B per fp32 parameter
        return [5e-6 + 28 * shape[0] / (HBM * E_ADAM)] * 3
    return [5e-6 + 4 * shape[0] / (HBM * (E_MATH if kind == "gelu" else E_MEM))] * 3


def test_gemm_fit_is_the_least_error_of_its_grid():
    # the fit (errors through one buffer, in place) against the grid search written plainly:
    # the same grid point and the same error, to the bit, on the shipped H200 measurements
    import numpy as np

    from simulator.model.calibration import H200_PEAK_BF16, fit_gemm
    from simulator.scenario.loader import PROJECT_ROOT

    frame = pd.read_csv(PROJECT_ROOT / "simulator" / "data" / "calibration" / "h200" / "gemm.csv")
    m, n, k, t = (frame[c].to_numpy(float) for c in ("m", "n", "k", "s"))
    t0s = np.linspace(0, 50e-6, 51)[:, None, None]
    effs = np.linspace(0.3, 1.0, 71)[None, :, None]
    best = None
    for x in np.geomspace(4, 4096, 60):  # the first least error, in (x, t0, e) order
        shape = (m / (m + x)) * (n / (n + x)) * (k / (k + x))
        pred = t0s + 2 * m * n * k / (H200_PEAK_BF16 * effs * shape)
        err = np.sqrt(np.mean(np.log(pred / t) ** 2, axis=2))
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if best is None or err[i, j] < best[0]:
            best = (float(err[i, j]), float(x), float(t0s[i, 0, 0]), float(effs[0, j, 0]))
    fit = fit_gemm(frame, H200_PEAK_BF16)
    assert (fit.rms_log_error, fit.x_half, fit.t0_s, fit.e_max) == best


def test_fit_recovers_a_known_device(tmp_path):
    paths = run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic"})
    assert [p.name for p in paths] == ["gemm.csv", "membound.csv", "host.json", "meta.json"]
    gemm, mem = device_fits(str(tmp_path), PEAK, HBM)
    # The grid steps e_max by 0.01 and x geometrically (~12%): recovered within a step.
    assert gemm.e_max == pytest.approx(E_MAX, abs=0.01)
    assert gemm.x_half == pytest.approx(X_HALF, rel=0.12)
    assert gemm.rms_log_error < 0.02
    assert mem.e_mem == pytest.approx(E_MEM, rel=1e-9)  # two exact points: exact slope
    assert mem.e_math == pytest.approx(E_MATH, rel=1e-9)
    assert mem.e_optimizer == pytest.approx(E_ADAM, rel=1e-9)
    frame = pd.read_csv(tmp_path / "membound.csv")
    assert set(frame["op"]) == {"copy", "gelu", "adamw_fused_fp32"}
    adam = frame[frame["op"] == "adamw_fused_fp32"]
    assert (adam["bytes_moved"] == 28 * adam["elems"]).all()


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
    # the H200 file's slopes between the two largest rows of each kernel, recomputed apart:
    # copies 4.21 TB/s, tanh-GeLU 3.81 TB/s, fused AdamW 28 B per parameter at 3.45 TB/s
    _, mem = device_fits("h200")
    assert mem.e_mem == pytest.approx(membound_slope("copy"), rel=1e-12)
    assert mem.e_math == pytest.approx(membound_slope("gelu"), rel=1e-12)
    assert mem.e_optimizer == pytest.approx(membound_slope("adamw_fused_fp32", 28), rel=1e-12)
    assert (mem.e_mem, mem.e_math, mem.e_optimizer) == pytest.approx(
        (0.878, 0.793, 0.718), abs=1e-3
    )
    # between a copy (0 FLOP/B) and GeLU (8 FLOPs per bf16 value in and out: 2 FLOP/B), linear
    assert mem.efficiency(0.0) == mem.e_mem
    assert mem.efficiency(2.0) == pytest.approx(mem.e_math, rel=1e-12)
    assert mem.efficiency(1.0) == pytest.approx((mem.e_mem + mem.e_math) / 2, rel=1e-12)
    assert mem.efficiency(50.0) == pytest.approx(mem.e_math, rel=1e-12)


def test_memory_bound_kernels_are_timed_at_their_arithmetic_intensity():
    cm = ComputeModel.for_accelerator(get_accelerator("H200"))
    n = 2**28  # bf16 values in and out
    gelu = Op("gelu", "elementwise", 8.0 * n, 0.0, 0.0, 4.0 * n, 0.0, 0.0)
    cast = Op("cast", "elementwise", 0.0, 0.0, 0.0, 4.0 * n, 0.0, 0.0)
    loss = Op("loss", "loss", 5.0 * n, 0.0, 0.0, 8.0 * n, 0.0, 0.0)  # 0.625 FLOP/B
    gather = Op("embedding", "embedding", 0.0, 0.0, 0.0, 4.0 * n, 0.0, 0.0)
    hbm = 4.8e12
    assert cm.op_seconds(gelu, "f") == pytest.approx(4.0 * n / (hbm * cm.mem.e_math) + 2e-6)
    assert cm.op_seconds(cast, "f") == pytest.approx(4.0 * n / (hbm * cm.mem.e_mem) + 2e-6)
    assert cm.op_seconds(gather, "f") == pytest.approx(4.0 * n / (hbm * cm.mem.e_mem) + 2e-6)
    e_loss = cm.mem.e_mem + 0.625 / 2.0 * (cm.mem.e_math - cm.mem.e_mem)
    assert cm.op_seconds(loss, "f") == pytest.approx(8.0 * n / (hbm * e_loss) + 2e-6)


def test_a_gemm_bound_by_memory_is_not_slowed_by_the_sustained_clock():
    # a skinny GEMM (8 rows) reads its weight and computes little: HBM-bound, at a copy's rate,
    # whatever the clock does to the tensor cores
    h100 = get_accelerator("H100")
    held = ComputeModel.for_accelerator(h100)
    burst = ComputeModel.for_accelerator(h100.model_copy(update={"sustained_compute": 1.0}))
    m, n, k = 8.0, 8192.0, 8192.0
    op = Op("fc", "gemm", 2 * m * n * k, 0.0, 0.0, 2 * (m * k + k * n + m * n), 0.0, 0.0, (m, n, k))
    t, bound = held.op_timing(op, "f")
    assert bound == "memory" and t == burst.op_seconds(op, "f")
    assert t == pytest.approx(op.f_bytes / (h100.hbm_bandwidth_Bps * held.mem.e_mem) + 2e-6)


def _membound(tmp_path, rows):
    run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic"})
    pd.DataFrame(rows, columns=["op", "elems", "s", "bytes_moved"]).to_csv(
        tmp_path / "membound.csv", index=False
    )
    return device_fits(str(tmp_path), PEAK, HBM)[1]


def test_a_file_of_copies_only_keeps_the_copy_rate(tmp_path):
    rows = [("copy", 2**28, 2e-3, 2**30), ("copy", 2**30, 6e-3, 2**32)]
    mem = _membound(tmp_path / "copies", rows)
    assert mem.e_math is None and mem.e_optimizer is None
    assert mem.efficiency(2.0) == mem.optimizer == mem.e_mem
    # a GeLU faster than the HBM allows is no measurement of it: left out, not believed
    fast = [("gelu", 2**28, 1e-4, 2**30), ("gelu", 2**30, 2e-4, 2**32)]
    mem = _membound(tmp_path / "fast-gelu", [*rows, *fast])  # a folder apiece: fits are cached
    assert mem.e_math is None
    slow = [("gelu", 2**28, 3e-3, 2**30), ("gelu", 2**30, 9e-3, 2**32)]
    assert _membound(tmp_path / "gelu", [*rows, *slow]).e_math == pytest.approx(
        (2**32 - 2**30) / 6e-3 / HBM
    )


@pytest.mark.parametrize(
    "rows",
    [
        [("copy", 2**28, 2e-3, 2**30), ("copy", 2**28, 3e-3, 2**30)],  # one size twice
        [("copy", 2**28, 3e-3, 2**30), ("copy", 2**30, 2e-3, 2**32)],  # larger but faster
        [("copy", 2**28, 1e-4, 2**30), ("copy", 2**30, 2e-4, 2**32)],  # faster than the HBM
    ],
)
def test_copies_that_give_no_hbm_rate_are_named(tmp_path, rows):
    with pytest.raises(CalibrationError, match=r"membound\.csv: the two largest copies"):
        _membound(tmp_path, rows)


def test_calibrate_prints_its_fits_and_names_impossible_copies(tmp_path, monkeypatch):
    import simulator.calibrate as calibrate

    monkeypatch.setattr(calibrate, "torch_timer", lambda r, w: (synthetic_timer, {"name": "s"}))
    args = ["calibrate", "--peak", "500 TFLOP/s", "--out"]
    ok = CliRunner().invoke(app, [*args, str(tmp_path / "ok"), "--hbm", "2 TB/s"])
    assert ok.exit_code == 0, ok.output
    assert "HBM efficiency: copies 0.80, GeLU 0.70, fused AdamW 0.60" in ok.output
    # told the HBM is a third as fast, the copies run at 2.4x it: refused, file named, exit 2
    bad = CliRunner().invoke(app, [*args, str(tmp_path / "bad"), "--hbm", "0.667 TB/s"])
    assert bad.exit_code == 2
    assert "membound.csv: the two largest copies give an HBM efficiency of 2.4" in bad.output


def test_host_costs_and_the_held_clock_are_measured_as_a_scenario_takes_them(tmp_path):
    import json

    from simulator.cli_catalog import _host_lines

    run_microbenchmarks(tmp_path, synthetic_timer, {"name": "synthetic", "held_power_w": 699.0,
                                                    "held_sm_clock_mhz": 1755.0})  # fmt: skip
    host = json.loads((tmp_path / "host.json").read_text())
    # per launch: the bare kernel's CPU time; per op: what autograd's recording adds to it
    assert host["cpu_launch_s"] == pytest.approx(LAUNCH_S, rel=1e-12)
    assert host["cpu_op_forward_s"] == pytest.approx(OP_S, rel=1e-12)
    # the first GEMMs at the short-run rate, the second half of the run at 0.9 of it
    assert host["sustained_compute"] == pytest.approx(HELD, rel=1e-12)
    assert host["held_power_w"] == 699.0
    lines = _host_lines(host).splitlines()
    assert lines[0] == "framework: {cpu_launch_s: 6.00 us, cpu_op_forward_s: 7.00 us}"
    assert lines[1].startswith("cluster.accelerator.sustained_compute: 0.900")
    assert "699 W at 1755 MHz" in lines[1]
