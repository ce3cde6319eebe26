"""Random streams of one seed: failure arrivals per cause, maintenance, repair times.

Each cause draws from its own generator (``numpy`` PCG64 seeded by ``[seed, stream]``), so a
seed gives the same failures whatever the checkpoint interval or policy (common random numbers
across a sweep), and changing one cause leaves the others' arrivals alone.

A cause's stream over the whole job is a renewal process whose gaps follow its law with mean
``1 / rate``: Weibull ``scale x E^(1/shape)`` with ``E`` a standard exponential draw and
``scale = mean / Gamma(1 + 1/shape)``; shape 1 is the exponential, draw for draw.
"""

from __future__ import annotations

import math

import numpy as np

REPAIR_STREAM = 1_000_003
MAINTENANCE_STREAM = 1_000_033


def rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream])


def renewal_times(
    gen: np.random.Generator, rate: float, shape: float, horizon: float
) -> np.ndarray:
    """Arrival times in ``[0, horizon)`` of a renewal process with Weibull(``shape``) gaps of
    mean ``1 / rate`` (s)."""
    if rate <= 0 or horizon <= 0:
        return np.empty(0)
    scale = (1.0 / rate) / math.gamma(1.0 + 1.0 / shape)
    expected = rate * horizon
    chunk = int(expected + 6.0 * math.sqrt(expected) + 16)
    times, t = [], 0.0
    while t < horizon:
        gaps = gen.standard_exponential(chunk)
        if shape != 1.0:
            gaps = gaps ** (1.0 / shape)
        part = t + np.cumsum(gaps * scale)
        times.append(part)
        t = float(part[-1])
    out = np.concatenate(times)
    return out[out < horizon]


def failure_arrivals(
    seed: int, rates: np.ndarray, shapes: np.ndarray, horizon: float
) -> tuple[np.ndarray, np.ndarray]:
    """All causes' arrivals merged: (times, cause index), sorted by time."""
    times, kinds = [], []
    for k, (rate, shape) in enumerate(zip(rates, shapes, strict=True)):
        t = renewal_times(rng(seed, k), float(rate), float(shape), horizon)
        times.append(t)
        kinds.append(np.full(len(t), k, dtype=np.int64))
    if not times:
        return np.empty(0), np.empty(0, dtype=np.int64)
    t, k = np.concatenate(times), np.concatenate(kinds)
    order = np.argsort(t, kind="stable")
    return t[order], k[order]


def maintenance_times(seed: int, rate: float, periodic: bool, horizon: float) -> np.ndarray:
    """Planned interruptions: every ``1/rate`` from a random phase, or a Poisson stream."""
    if rate <= 0:
        return np.empty(0)
    gen = rng(seed, MAINTENANCE_STREAM)
    if periodic:
        period = 1.0 / rate
        start = gen.uniform(0.0, period)
        return np.arange(start, horizon, period)
    return renewal_times(gen, rate, 1.0, horizon)


class RepairTimes:
    """Draws repair durations (s): exponential, lognormal (``sigma`` of the log) or fixed."""

    def __init__(self, seed: int, law: str, mean: float, sigma: float):
        self.gen = rng(seed, REPAIR_STREAM)
        self.law, self.mean, self.sigma = law, mean, sigma

    def draw(self) -> float:
        if self.law == "fixed":
            return self.mean
        if self.law == "exponential":
            return self.mean * float(self.gen.standard_exponential())
        mu = math.log(self.mean) - 0.5 * self.sigma**2  # so that the mean is ``mean``
        return float(self.gen.lognormal(mu, self.sigma))
