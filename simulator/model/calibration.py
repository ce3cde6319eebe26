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

Memory-bound model: ``t = t0 + bytes / (HBM bandwidth x e_mem)``, ``e_mem`` from the largest
copies (0.88 on H200). Both efficiencies transfer to other GPUs of the same family by their
peak numbers unless a file for that device exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

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


@dataclass(frozen=True)
class MemFit:
    e_mem: float
    t0_s: float


def fit_gemm(frame: pd.DataFrame, peak_flops: float) -> GemmFit:
    """Fit :class:`GemmFit` to a gemm.csv table measured on a device of ``peak_flops``."""
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    t = frame["s"].to_numpy(float)
    flops = 2 * m * n * k
    t0s = np.linspace(0, 50e-6, 51)[:, None, None]
    effs = np.linspace(0.3, 1.0, 71)[None, :, None]
    best = (np.inf, 0.0, 0.0, 0.0)
    for x in np.geomspace(4, 4096, 60):
        shape = (m / (m + x)) * (n / (n + x)) * (k / (k + x))
        pred = t0s + flops / (peak_flops * effs * shape)
        err = np.sqrt(np.mean(np.log(pred / t) ** 2, axis=2))
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if err[i, j] < best[0]:
            best = (float(err[i, j]), float(x), float(t0s[i, 0, 0]), float(effs[0, j, 0]))
    err, x, t0, e = best
    return GemmFit(e_max=e, x_half=x, t0_s=t0, rms_log_error=err)


def fit_membound(frame: pd.DataFrame, hbm_bps: float) -> MemFit:
    """Fit :class:`MemFit` from the two largest plain copies (slope and intercept)."""
    copies = frame[frame["op"] == "copy"].sort_values("bytes_moved").tail(2)
    b = copies["bytes_moved"].to_numpy(float)
    t = copies["s"].to_numpy(float)
    slope = (t[1] - t[0]) / (b[1] - b[0])
    return MemFit(e_mem=float(1.0 / (slope * hbm_bps)), t0_s=float(t[0] - slope * b[0]))


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
    return fit_gemm(gemm, peak_flops), fit_membound(mem, hbm_bps)
