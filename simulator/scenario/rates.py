"""Rates of events: ``COUNT / [DIVISOR /]... TIME`` read as events per second."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator

from simulator.units import Unit, parse_quantity


def parse_rate(value: Any) -> float:
    """A rate in events per second from ``"N / ... / TIME"`` (0 may be a bare number).

    A bare number is refused: ``rate: 0.5`` could mean per second, hour or day, and read per
    second it is 43,200 a day.

    >>> parse_rate("0.5 / h") * 3600
    0.5
    >>> round(parse_rate("148 / 16384 / 54 d") * 86400, 10)
    0.0001672815
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("a rate is a count over a time, e.g. '0.3 / d' or '148 / 16384 / 54 d'")
    if not isinstance(value, str) and value != 0:
        raise ValueError(
            f"a rate needs its time unit: write '{value:g} / s', '{value:g} / h' or "
            f"'{value:g} / d' (a bare {value:g} would be read per second)"
        )
    if isinstance(value, str):
        parts = [p.strip() for p in value.split("/")]
        if len(parts) < 2 or not all(parts):
            raise ValueError(f"a rate reads COUNT / TIME, e.g. '0.3 / d' (got {value!r})")
        try:
            number = float(parts[0])
            for divisor in parts[1:-1]:
                number /= float(divisor)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"cannot read {value!r} as COUNT / ... / TIME") from None
        time = parts[-1] if parts[-1][0].isdigit() else "1 " + parts[-1]
        seconds = parse_quantity(time, "time")
        if seconds <= 0:
            raise ValueError(f"the time in {value!r} must be positive")
        value = number / seconds
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a rate must be finite and non-negative (got {value!r})")
    return float(value)


Rate = Annotated[float, BeforeValidator(parse_rate), Unit("1/s")]
