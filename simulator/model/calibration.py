"""Fit the compute model's efficiency curves to kernel microbenchmarks.

Files (``simulator/data/calibration/<device>/``, the format of shared/calibration):

- ``gemm.csv``: columns ``m, n, k, s`` - a bf16 ``(m x k) @ (k x n)`` took ``s`` seconds;
- ``membound.csv``: columns ``op, bytes_moved, s`` - a memory-bound kernel moved that many
  bytes (read + written) in ``s`` seconds.

GEMM model, fitted once per device::

    t(m, n, k) = t0 + 2 m n k / (peak x e(m, n, k)),
    e(m, n, k) = e_max x m/(m + x) x n/(n + x) x k/(k + x)

``e_max`` is what large GEMMs reach (0.71 of the H200's 989 TFLOP/s); ``x`` (about 21) says
how fast small dimensions lose it (tile quantisation, too few thread blocks); ``t0`` absorbs
the launch and timing latency of a kernel measured alone (about 37 us here), which a training
step's asynchronous launches hide, so the simulator applies ``e`` and its own small launch
overhead instead. Fit: least squares on log time over a grid of (x, t0, e_max); RMS error
7.4% over the 55 shapes of the H200 file.

Memory-bound model: ``t = t0 + bytes / (HBM bandwidth x e)``, each ``e`` from the slope
between the two largest measurements of a kernel (their launch latency cancels):

- ``e_mem`` from plain copies (0.88 on H200): data movement (casts, layout copies, residual
  adds, gathers, reductions that only read);
- ``e_math`` from tanh-GeLU (0.79 on H200): a kernel doing arithmetic on each value (8 FLOPs
  per value as :mod:`simulator.model.ops` counts an activation, 2 FLOP per byte moved in
  bf16) does not stream at a copy's rate; a kernel of lower arithmetic intensity sits between
  the two, linear in FLOPs per byte (:meth:`MemFit.efficiency`);
- ``e_optimizer`` from PyTorch's fused AdamW over fp32 parameters (0.72 on H200): 28 B per
  parameter (p, g, m, v read; p, m, v written), not the file's 20.

A file without GeLU or AdamW rows (written by ``trainsim calibrate`` before it measured them)
keeps the copy's efficiency for them. All efficiencies transfer to other GPUs of the same
family by their peak numbers unless a file for that device exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.model.ops import ACTIVATION_FLOPS_PER_VALUE

DATA = Path(__file__).resolve().parents[1] / "data" / "calibration"
H200_PEAK_BF16 = 989.4e12
H200_HBM_BPS = 4.8e12


@dataclass(frozen=True)
class GemmFit:
    e_max: float
    x_half: float
    t0_s: float
    rms_log_error: float

    def efficiency(self, m: float, n: float, k: float) -> float:
        x = self.x_half
        return self.e_max * (m / (m + x)) * (n / (n + x)) * (k / (k + x))


# The tanh-GeLU of membound.csv as simulator.model.ops counts an activation, per value read and
# written in bf16 (4 B): its arithmetic intensity in FLOP per byte moved.
GELU_FLOP_PER_BYTE = ACTIVATION_FLOPS_PER_VALUE / 4.0
ADAMW_BYTES_PER_PARAM = 28.0  # fused AdamW, fp32: p, g, m, v read; p, m, v written


@dataclass(frozen=True)
class MemFit:
    """HBM efficiencies of memory-bound kernels (fractions of the HBM bandwidth)."""

    e_mem: float  # plain copies
    t0_s: float
    e_math: float | None = None  # tanh-GeLU; None: as a copy
    e_optimizer: float | None = None  # fused AdamW; None: as a copy

    def efficiency(self, flop_per_byte: float = 0.0) -> float:
        """A memory-bound kernel's efficiency at ``flop_per_byte``: the copy's at 0, GeLU's
        at GeLU's intensity and beyond, linear in between."""
        if self.e_math is None or flop_per_byte <= 0:
            return self.e_mem
        w = min(flop_per_byte / GELU_FLOP_PER_BYTE, 1.0)
        return self.e_mem + w * (self.e_math - self.e_mem)

    @property
    def optimizer(self) -> float:
        """A fused optimizer step's efficiency."""
        return self.e_mem if self.e_optimizer is None else self.e_optimizer


def fit_gemm(frame: pd.DataFrame, peak_flops: float) -> GemmFit:
    """Fit :class:`GemmFit` to a gemm.csv table measured on a device of ``peak_flops``: the
    least RMS log error over a grid of ``x_half`` (60), ``t0_s`` (51) and ``e_max`` (71).

    Each ``x_half``'s (t0, e_max, measurement) errors go through one buffer, each step in
    place (the same operations in the same order as ``np.log((t0 + F / (P e s)) / t) ** 2``,
    so the same bits): a fresh 1.6 MB array per step and ``x_half`` cost page faults, 4x the
    arithmetic (0.12 s of every process's first run, now 0.03 s)."""
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    t = frame["s"].to_numpy(float)
    flops = 2 * m * n * k
    t0s = np.linspace(0, 50e-6, 51)[:, None, None]
    effs = np.linspace(0.3, 1.0, 71)[None, :, None]
    peak_effs = peak_flops * effs
    sq = np.empty((t0s.size, effs.size, t.size))  # log(predicted / measured) ** 2
    best = (np.inf, 0.0, 0.0, 0.0)
    for x in np.geomspace(4, 4096, 60):
        shape = (m / (m + x)) * (n / (n + x)) * (k / (k + x))
        np.add(t0s, flops / (peak_effs * shape), out=sq)  # predicted s
        np.divide(sq, t, out=sq)
        np.log(sq, out=sq)
        np.square(sq, out=sq)
        err = np.sqrt(np.mean(sq, axis=2))
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if err[i, j] < best[0]:
            best = (float(err[i, j]), float(x), float(t0s[i, 0, 0]), float(effs[0, j, 0]))
    err, x, t0, e = best
    return GemmFit(e_max=e, x_half=x, t0_s=t0, rms_log_error=err)


def _slope_fit(bytes_moved, seconds, hbm_bps: float) -> tuple[float, float]:
    """(efficiency, intercept s) of the line through the two largest sizes measured (a size
    measured more than once by its median time); NaN when there are not two sizes or the
    larger one was not slower."""
    times = pd.Series(np.asarray(seconds, float)).groupby(np.asarray(bytes_moved, float)).median()
    if len(times) < 2:
        return float("nan"), float("nan")
    (b0, b1), (t0, t1) = times.index[-2:], times.to_numpy()[-2:]
    if t1 <= t0:
        return float("nan"), float("nan")
    slope = (t1 - t0) / (b1 - b0)
    return float(1.0 / (slope * hbm_bps)), float(t0 - slope * b0)


def _plausible(e: float) -> bool:
    """An HBM efficiency a kernel can have: above 0, at most the bandwidth (NaN is not)."""
    return 0.0 < e <= 1.0


def fit_membound(frame: pd.DataFrame, hbm_bps: float, source: str = "membound.csv") -> MemFit:
    """Fit :class:`MemFit`: copies, GeLU and fused AdamW each from their two largest sizes.
    Copies must give a plausible efficiency (:class:`CalibrationError` naming ``source``);
    GeLU or AdamW rows that do not are left out (their kernels then stream as copies)."""
    copies = frame[frame["op"] == "copy"]
    e_mem, t0 = _slope_fit(copies["bytes_moved"], copies["s"], hbm_bps)
    if not _plausible(e_mem):
        raise CalibrationError(
            f"{source}: the two largest copies give an HBM efficiency of {e_mem:.3g} (bytes "
            f"over time over {hbm_bps / 1e12:g} TB/s): they need two sizes, the larger one "
            f"slower, and at most the device's HBM bandwidth"
        )
    gelu = frame[frame["op"] == "gelu"]
    adam = frame[frame["op"] == "adamw_fused_fp32"]
    e_math = _slope_fit(gelu["bytes_moved"], gelu["s"], hbm_bps)[0]
    e_opt = float("nan")
    if "elems" in adam:
        moved = adam["elems"].to_numpy(float) * ADAMW_BYTES_PER_PARAM
        e_opt = _slope_fit(moved, adam["s"], hbm_bps)[0]
    return MemFit(
        e_mem=e_mem,
        t0_s=t0,
        e_math=e_math if _plausible(e_math) else None,
        e_optimizer=e_opt if _plausible(e_opt) else None,
    )


class CalibrationError(ValueError):
    """A calibration folder that cannot be used; the message names the file and the problem."""


REQUIRED = {"gemm.csv": ("m", "n", "k", "s"), "membound.csv": ("op", "bytes_moved", "s")}


def load_calibration(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and check ``gemm.csv`` and ``membound.csv`` in ``folder``."""
    folder = Path(folder)
    frames = []
    for name, columns in REQUIRED.items():
        path = folder / name
        try:
            frame = pd.read_csv(path)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise CalibrationError(f"{path}: cannot read: {exc}") from None
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise CalibrationError(f"{path}: missing column(s) {', '.join(missing)}")
        numeric = [c for c in columns if c != "op"]
        bad = frame[numeric].apply(pd.to_numeric, errors="coerce")
        if bad.isna().any().any() or (bad <= 0).any().any():
            raise CalibrationError(f"{path}: {', '.join(numeric)} must be positive numbers")
        if len(frame) < 2:
            raise CalibrationError(f"{path}: needs at least two measurements")
        frames.append(frame)
    if (frames[1]["op"] == "copy").sum() < 2:
        raise CalibrationError(
            f"{folder / 'membound.csv'}: needs two 'copy' rows of different sizes"
        )
    return frames[0], frames[1]


@lru_cache(maxsize=8)
def device_fits(
    device: str = "h200", peak_flops: float = H200_PEAK_BF16, hbm_bps: float = H200_HBM_BPS
) -> tuple[GemmFit, MemFit]:
    """The fits of a calibration folder: a name under simulator/data/calibration or a path,
    measured on a device of ``peak_flops`` and ``hbm_bps`` (cached: the search takes ~0.5 s).
    """
    folder = Path(device) if Path(device).is_dir() else DATA / device
    gemm, mem = load_calibration(folder)
    return fit_gemm(gemm, peak_flops), fit_membound(mem, hbm_bps, str(folder / "membound.csv"))
