"""Drawing duration factors: log-normal spreads, and the slowest of several GPUs' draws.

A factor is ``exp(sigma * z)`` with ``z`` standard normal: its median is 1 (a calibrated
kernel time is a median). The slowest of ``c`` independent draws is drawn directly from its
own distribution: the normal quantile of ``u^(1/c)``, ``u`` uniform - one number per task and
column whatever the number of peers it stands for. numpy has no normal quantile (and scipy
is no dependency), so it is tabulated once per ``c`` at ``TABLE`` equally spaced ``u`` and
interpolated linearly: draws beyond the table's last point (probability 1 / ``TABLE``; 4.4
standard deviations for the slowest of 8) are held at it.
"""

from __future__ import annotations

from functools import cache
from statistics import NormalDist

import numpy as np

TABLE = 1 << 16


@cache
def _slowest_quantiles(peers: int) -> np.ndarray:
    """The quantiles of the largest of ``peers`` standard normals at u = (k + 0.5) / TABLE."""
    inv = NormalDist().inv_cdf
    return np.array([inv(((k + 0.5) / TABLE) ** (1.0 / peers)) for k in range(TABLE)])


def slowest_of(rng: np.random.Generator, peers: int, size) -> np.ndarray:
    """Standard normal draws of the largest of ``peers`` independent ones (``size`` of them)."""
    if peers == 1:
        return rng.standard_normal(size)
    table = _slowest_quantiles(peers)
    x = np.clip(rng.random(size) * TABLE - 0.5, 0.0, TABLE - 1.0)
    k = np.minimum(x.astype(np.int64), TABLE - 2)
    w = x - k
    return table[k] * (1.0 - w) + table[k + 1] * w
