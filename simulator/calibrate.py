"""``trainsim calibrate``: measure GEMM and memory-bound kernels on this machine's GPU.

Runs the same shapes as the shipped H200 file with PyTorch (an optional dependency:
``pip install torch``), times each with CUDA events (median of ``repeats`` after ``warmup``
runs) and writes, in the format :mod:`simulator.model.calibration` reads:

- ``gemm.csv``: m, n, k, s (median seconds), s_min, tflops (2mnk / s);
- ``membound.csv``: op, elems, dtype, s, bytes_moved, gbps: bf16 copies and tanh-GeLUs of
  several sizes (read + write, 4 B per value) and PyTorch's fused AdamW over fp32 parameters
  (p, g, m, v read, p, m, v written: 28 B per parameter);
- ``host.json``: the framework's CPU costs and the GPU's held clock, as a scenario takes them:
  ``cpu_launch_s``, the CPU time per tiny kernel issued back to back without autograd (its
  launch and PyTorch's dispatch: an upper bound of the launch alone), ``cpu_op_forward_s``,
  what autograd's recording adds per forward op (``framework:`` fields,
  :mod:`simulator.scenario.framework`), and ``sustained_compute``, the rate a large GEMM
  holds over a long run against its rate in a short one (``cluster.accelerator.
  sustained_compute``), with the board's power draw and SM clock over that run where the
  driver reports them;
- ``meta.json``: torch version, device name.

Point an accelerator at the folder (``calibration: path``) to use it. The timing function is
injectable so that the file handling is tested without a GPU.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from simulator.model.calibration import ADAMW_BYTES_PER_PARAM, DATA

Timer = Callable[[str, tuple[int, ...]], list[float]]  # (kind, shape) -> seconds per run

COPY_SIZES = (2**20, 2**24, 2**28, 2**30)  # values, for copies and GeLUs
ADAMW_SIZES = (2**24, 2**27, 2**29)  # fp32 parameters
# tiny kernels per timed run: fewer than CUDA's pending-launch queue (about 1,000:
# simulator.scenario.framework), so the CPU never waits for the GPU and the time is its own
LAUNCHES = 256
# the long GEMM run: a large square bf16 GEMM back to back for about this long, long enough
# for the power limiter to settle the clock (seconds, on NVIDIA's boards), of which the
# first BURST iterations give the short-run rate and the last half the held one
SUSTAIN = (8192, 8192, 8192)
SUSTAIN_S = 20.0
BURST = 5
BATCH = 10  # GEMMs queued before the long run waits for them (the GPU never idles)
SAMPLE_S = 0.1  # at most one power and clock reading this often (s): NVML reads cost time
REST_S = 5.0  # idle before the long run, so the earlier kernels' heat does not start it hot


class CalibrationUnavailable(RuntimeError):
    """No PyTorch or no CUDA device to measure on."""


def reference_shapes() -> list[tuple[int, int, int]]:
    """The GEMM shapes of the shipped H200 measurements."""
    gemm = pd.read_csv(DATA / "h200" / "gemm.csv")
    return [
        tuple(int(x) for x in row)
        for row in gemm[["m", "n", "k"]].drop_duplicates().itertuples(index=False)
    ]


def torch_timer(repeats: int = 10, warmup: int = 3) -> tuple[Timer, dict]:
    """A CUDA-event timer over PyTorch kernels, and metadata for meta.json."""
    try:
        import torch
    except ImportError:
        raise CalibrationUnavailable("PyTorch is not installed: pip install torch") from None
    if not torch.cuda.is_available():
        raise CalibrationUnavailable("no CUDA device: run trainsim calibrate on the GPU to measure")

    def run(kind: str, shape: tuple[int, ...]) -> list[float]:
        if kind in ("launch", "launch_autograd"):
            return _host_times(torch, kind, shape[0], repeats, warmup)
        if kind == "sustained_gemm":
            return _held_gemm(torch, shape, meta)
        if kind == "gemm":
            m, n, k = shape
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            op = lambda: a @ b  # noqa: E731
        elif kind == "adamw_fused_fp32":
            p = torch.randn(shape[0], device="cuda", dtype=torch.float32, requires_grad=True)
            p.grad = torch.randn_like(p)
            op = torch.optim.AdamW([p], lr=1e-4, fused=True).step
        else:
            x = torch.randn(shape[0], device="cuda", dtype=torch.bfloat16)
            gelu = lambda: torch.nn.functional.gelu(x, approximate="tanh")  # noqa: E731
            op = gelu if kind == "gelu" else x.clone
        times = []
        for i in range(warmup + repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            op()
            end.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end) / 1e3)
        return times

    meta = {"torch": torch.__version__, "device": "cuda", "name": torch.cuda.get_device_name(0)}
    return run, meta


def _host_times(torch, kind: str, n: int, repeats: int, warmup: int) -> list[float]:
    """CPU seconds to issue ``n`` tiny kernels back to back, each run after the GPU has
    drained, wall clock on the CPU side: the same out-of-place op without autograd
    (``launch``) and as an op autograd records (``launch_autograd``), so that their
    difference is the recording alone."""
    import time

    recorded = kind == "launch_autograd"
    x = torch.zeros(1, device="cuda", requires_grad=recorded)
    times = []
    with torch.enable_grad() if recorded else torch.no_grad():
        for i in range(warmup + repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(n):
                x * 1.0
            if i >= warmup:
                times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return times


def _held_gemm(torch, shape: tuple[int, ...], meta: dict) -> list[float]:
    """Seconds of each GEMM of a run about :data:`SUSTAIN_S` long, back to back after a
    rest (the earlier kernels' heat gone): queued in batches of :data:`BATCH`, each timed with
    CUDA events and the batch waited for once, so the GPU never idles between them; the
    board's power (W) and SM clock (MHz) over the run's second half into ``meta``, sampled at
    most every :data:`SAMPLE_S` where the driver reports them."""
    import time

    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    time.sleep(REST_S)
    times: list[float] = []
    power: list[float] = []
    clock: list[float] = []
    last = 0.0
    while sum(times) < SUSTAIN_S:
        events = []
        for _ in range(BATCH):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) / 1e3 for s, e in events]
        if sum(times) > SUSTAIN_S / 2 and time.monotonic() - last >= SAMPLE_S:
            last = time.monotonic()
            power += _reading(lambda: torch.cuda.power_draw() / 1e3)  # mW -> W
            clock += _reading(torch.cuda.clock_rate)  # MHz
    if power:
        meta["held_power_w"] = statistics.median(power)
    if clock:
        meta["held_sm_clock_mhz"] = statistics.median(clock)
    return times


def _reading(read) -> list[float]:
    """``[read()]``, or ``[]`` where the driver does not report it (NVML through PyTorch)."""
    try:
        return [float(read())]
    except Exception:  # noqa: BLE001 - a reading the board does not give is left out
        return []


def host_and_clock(timer: Timer, meta: dict) -> dict:
    """``host.json``'s values (module doc) from ``timer``'s runs."""
    bare = statistics.median(timer("launch", (LAUNCHES,))) / LAUNCHES
    recorded = statistics.median(timer("launch_autograd", (LAUNCHES,))) / LAUNCHES
    held = timer("sustained_gemm", SUSTAIN)
    burst = statistics.median(held[:BURST])
    tail = statistics.median(held[len(held) // 2 :])
    out = {
        "cpu_launch_s": bare,
        "cpu_op_forward_s": max(recorded - bare, 0.0),
        "sustained_compute": min(burst / tail, 1.0),
    }
    for key in ("held_power_w", "held_sm_clock_mhz"):
        if key in meta:
            out[key] = meta[key]
    return out


def run_microbenchmarks(
    out: str | Path, timer: Timer, meta: dict, shapes: list[tuple[int, int, int]] | None = None
) -> list[Path]:
    """Measure with ``timer`` and write the calibration folder ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for m, n, k in shapes or reference_shapes():
        times = timer("gemm", (m, n, k))
        s = statistics.median(times)
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "s": s,
                "s_min": min(times),
                "tflops": 2 * m * n * k / s / 1e12,
            }
        )
    pd.DataFrame(rows).to_csv(out / "gemm.csv", index=False)
    rows = []
    kernels = [
        (op, elems, "torch.bfloat16", 2 * 2) for op in ("copy", "gelu") for elems in COPY_SIZES
    ]
    kernels += [("adamw_fused_fp32", n, "float32", ADAMW_BYTES_PER_PARAM) for n in ADAMW_SIZES]
    for op, elems, dtype, per_elem in kernels:
        s = statistics.median(timer(op, (elems,)))
        moved = per_elem * elems
        rows.append(
            {
                "op": op,
                "elems": elems,
                "dtype": dtype,
                "s": s,
                "bytes_moved": moved,
                "gbps": moved / s / 1e9,
            }
        )
    pd.DataFrame(rows).to_csv(out / "membound.csv", index=False)
    (out / "host.json").write_text(json.dumps(host_and_clock(timer, meta), indent=1))
    (out / "meta.json").write_text(json.dumps(meta))
    return [out / "gemm.csv", out / "membound.csv", out / "host.json", out / "meta.json"]
