"""Closed forms for checkpoint intervals and the expected effective training time ratio.

All times in seconds. ``delta`` is the checkpoint cost (time training pauses per checkpoint),
``mtti`` the mean time between (unplanned) interruptions.

>>> round(young_interval(300.0, 10800.0), 3)
2545.584
>>> round(daly_interval(300.0, 10800.0), 3)
2349.513
"""

from __future__ import annotations

import math


def young_interval(delta: float, mtti: float) -> float:
    """Young (1974), "A first order approximation to the optimum checkpoint interval", CACM
    17(9): ``sqrt(2 delta M)`` of compute between checkpoints."""
    return math.sqrt(2.0 * delta * mtti)


def daly_interval(delta: float, mtti: float) -> float:
    """Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
    dumps", FGCS 22(3), eq. 37: for ``delta < 2M``,
    ``sqrt(2 delta M) [1 + (1/3) sqrt(delta/(2M)) + (1/9) (delta/(2M))] - delta``; else ``M``.
    """
    if delta >= 2.0 * mtti:
        return mtti
    x = delta / (2.0 * mtti)
    return math.sqrt(2.0 * delta * mtti) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def kokolis_ettr(rate: float, restart: float, interval: float, write: float) -> float:
    """Expected ETTR of Kokolis et al. 2024 ("Revisiting Reliability in Large-Scale Machine
    Learning Research Clusters", arXiv:2410.21680, HPCA 2025, sec. on estimating ETTR):
    ``(1 - N r_f (u0 + dt/2)) / (1 + w/dt)``.

    Parameters
    ----------
    rate
        Job failure rate ``N r_f`` (1/s): nodes times failures per node per second.
    restart
        ``u0``, time from a failure to training again (s).
    interval
        ``dt``, training time between checkpoints (s).
    write
        ``w``, time training pauses per checkpoint (s).

    Notes
    -----
    First order in ``rate x (restart + interval)``: it charges each failure half an interval
    of lost work and one restart, and ignores failures during restarts and checkpoint writes,
    waiting for spares, and non-exponential arrivals. It holds when the job's MTTI is much
    longer than ``restart + interval``. As they become comparable it underestimates ETTR:
    a failure soon after a restart loses less than half an interval, and the linear term
    keeps charging it in full (1 h MTTI, 10 min restart, 30 min interval: 0.56 against 0.63
    simulated).
    """
    return (1.0 - rate * (restart + interval / 2.0)) / (1.0 + write / interval)
