"""Resource bounds: the largest work a command accepts before it starts.

Each bound is checked before anything is allocated, and a request beyond it is bad input
(exit 2) whose message names the flag or field, the bound and this module. The bounds keep a
typo (``--seeds 100000000``, a rate of ``1e300 / s``, a grid of 10^12 points) from running
for hours or until memory runs out; they are far above what a study needs. A user who means
it raises them all at once: ``trainsim --raise-limits 100 goodput ...`` (or the environment
variable ``TRAINSIM_RAISE_LIMITS=100``).

=============================  ============  ==============================================
bound                          value         what it caps
=============================  ============  ==============================================
``seeds``                      10,000        ``goodput --seeds``
``days``                       3,650         ``goodput --days`` (ten years of wall clock)
``interval_points``            1,000         ``goodput --sweep-checkpoint-interval A:B:N``
``events_per_seed``            1,000,000     expected interruptions of one seed (rate x days)
``sweep_points``               100,000       points of a sweep spec (grid x zip x samples)
=============================  ============  ==============================================
"""

from __future__ import annotations

import os

BOUNDS = {
    "seeds": 10_000,
    "days": 3_650,
    "interval_points": 1_000,
    "events_per_seed": 1_000_000,
    "sweep_points": 100_000,
}
ENV = "TRAINSIM_RAISE_LIMITS"
_factor: float | None = None


def raise_limits(factor: float) -> None:
    """Multiply every bound by ``factor`` (>= 1) for this process."""
    global _factor
    if not factor >= 1:
        raise ValueError(f"--raise-limits {factor:g}: give a factor of 1 or more")
    _factor = float(factor)


def factor() -> float:
    """The factor the bounds are raised by (1: as listed)."""
    if _factor is not None:
        return _factor
    try:
        return max(1.0, float(os.environ.get(ENV, "1")))
    except ValueError:
        return 1.0


def bound(name: str) -> float:
    """The bound ``name`` (:data:`BOUNDS`), raised by :func:`factor`."""
    return BOUNDS[name] * factor()


def beyond(name: str, value: float, what: str) -> str | None:
    """A message when ``value`` exceeds bound ``name`` (None otherwise); ``what`` says which
    flag or field asked for it, and the message how to raise the bound."""
    limit = bound(name)
    if value <= limit:
        return None
    return (
        f"{what} asks for {value:,.4g}, beyond the bound of {limit:,.0f} ({name}, "
        f"simulator/limits.py); if you mean it: trainsim --raise-limits N ... multiplies "
        "every bound by N"
    )
