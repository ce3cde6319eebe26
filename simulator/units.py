"""Parse human quantities ("400 Gb/s", "80 GiB", "989 TFLOP/s", "1.5 us") into SI floats.

Internally the simulator uses seconds (s), bytes (B), floating-point operations (FLOP),
bytes per second (B/s) and FLOP per second (FLOP/s). Unit strings are parsed here, once, at
the boundary; nothing else in the package converts units.

Decimal prefixes (k, M, G, T, P, E) are powers of 1000 and binary prefixes (Ki, Mi, Gi, Ti, Pi)
powers of 1024, as in IEC 80000-13. A lowercase ``b`` is a bit (1/8 byte), an uppercase ``B`` a
byte, so ``"400 Gb/s"`` is 50e9 B/s. Bare numbers (or numbers written as strings, which YAML 1.1
produces for ``1e9``) are taken to be already in SI units.

Examples
--------
>>> parse_quantity("400 Gb/s", "bandwidth")
50000000000.0
>>> parse_quantity("80 GiB", "bytes")
85899345920.0
>>> parse_quantity("1.5 us", "time")
1.5e-06
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

Dimension = Literal["bytes", "bandwidth", "flops", "flops_rate", "time", "count", "power"]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([^\s].*?)?\s*$")


class UnitError(ValueError):
    """A quantity string that cannot be read in the requested dimension."""


def _prefix_factor(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    return None


def _unit_factor(unit: str, dimension: Dimension) -> float | None:
    """Multiplier from ``unit`` to the SI base of ``dimension``; None if it does not belong."""
    u = unit.replace(" ", "")
    if dimension == "time":
        return _TIME.get(u)
    if dimension == "count":
        return _prefix_factor(u)
    if dimension == "power":  # watts: "700 W", "1.2 kW", "20 MW"
        return _DECIMAL.get(u[:-1]) if u.endswith("W") else None
    if dimension in ("bytes", "bandwidth"):
        if dimension == "bandwidth":
            for suffix in ("/s", "ps"):
                if u.endswith(suffix):
                    u = u[: -len(suffix)]
                    break
            else:
                return None
        elif u.endswith("/s"):
            return None
        for base, scale in (
            ("B", 1.0),
            ("b", 0.125),
            ("bit", 0.125),
            ("byte", 1.0),
            ("bytes", 1.0),
        ):
            if u.endswith(base):
                prefix = u[: -len(base)]
                factor = _prefix_factor(prefix)
                if factor is not None:
                    return factor * scale
        return None
    if dimension in ("flops", "flops_rate"):
        # "FLOP/s" and "FLOPS" are rates; "FLOP" and "FLOPs" (plural) are counts.
        rate = u.endswith("/s") or u.endswith("FLOPS")
        u = u[:-2] if u.endswith("/s") else (u[:-1] if u.endswith("FLOPS") else u)
        if rate != (dimension == "flops_rate"):
            return None
        for base in ("FLOPs", "FLOP", "flops", "flop"):
            if u.endswith(base):
                factor = _DECIMAL.get(u[: -len(base)])
                if factor is not None:
                    return factor
        return None
    return None


def parse_quantity(value: object, dimension: Dimension) -> float:
    """Return ``value`` in SI units of ``dimension``.

    Parameters
    ----------
    value
        A number (already SI), or a string: a number optionally followed by a unit.
    dimension
        What the quantity measures: ``bytes`` (B), ``bandwidth`` (B/s), ``flops`` (FLOP),
        ``flops_rate`` (FLOP/s), ``time`` (s), ``power`` (W) or ``count`` (dimensionless,
        "16K" = 16000).

    Raises
    ------
    UnitError
        If the value is not a finite non-negative number or the unit does not fit the dimension.
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a {dimension} quantity, got a boolean")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            raise UnitError(f"cannot read {value!r} as a {dimension} quantity")
        unit = match.group(2) or ""
        factor = _unit_factor(unit, dimension) if unit else 1.0
        if factor is None:
            raise UnitError(
                f"unit {unit!r} in {value!r} is not a {dimension} unit "
                f"(e.g. {_EXAMPLES[dimension]})"
            )
        number = float(match.group(1)) * factor
    else:
        raise UnitError(
            f"expected a {dimension} quantity (number or string), got {type(value).__name__}"
        )
    if not math.isfinite(number) or number < 0:
        raise UnitError(f"{value!r} must be a finite, non-negative {dimension} quantity")
    return number


_EXAMPLES: dict[str, str] = {
    "bytes": '"80 GiB", "25 MB"',
    "bandwidth": '"400 Gb/s", "450 GB/s"',
    "flops": '"3.8e25 FLOP", "1 PFLOP"',
    "flops_rate": '"989 TFLOP/s"',
    "time": '"1.5 us", "10 ms"',
    "count": '"16K", "2048"',
}


# ----------------------------------------------------------------------------- schema types
# The pydantic field types of every quantity in a scenario or accelerator: a unit string or an
# SI number, parsed by :func:`parse_quantity`, then bounded. One definition each, so the
# scenario schema and the accelerator catalog cannot disagree about what a "bytes" field takes.

MIN_BANDWIDTH_BPS = 1e6
"""Slowest link or memory accepted (1 MB/s). No training fabric comes near it (1 GbE is
125 MB/s), and far smaller rates (1e-300 B/s) push simulated time past the largest float."""

MIN_FLOPS_RATE = 1e9
"""Slowest accelerator accepted (1 GFLOP/s, below one CPU core); same reason as above."""

MAX_LINK_LATENCY_S = 1.0
"""Largest per-hop latency accepted: a datacenter hop is microseconds; 1 s is already absurd."""


def _at_least(floor: float, what: str, why: str):
    def check(value: float) -> float:
        if value < floor:
            raise ValueError(f"{value:g} is below the {what} floor: {why}")
        return value

    return AfterValidator(check)


def _at_most(ceiling: float, what: str, why: str):
    def check(value: float) -> float:
        if value > ceiling:
            raise ValueError(f"{value:g} is above the {what} ceiling: {why}")
        return value

    return AfterValidator(check)


SI_UNITS: dict[str, str] = {
    "bytes": "B", "bandwidth": "B/s", "flops": "FLOP", "flops_rate": "FLOP/s", "time": "s",
    "count": "", "power": "W",
}  # fmt: skip
"""The SI unit each dimension's values are held in, once parsed."""


def _parsed(dimension: Dimension) -> BeforeValidator:
    def parse(v):
        return parse_quantity(v, dimension)

    parse.si_unit = SI_UNITS[dimension]  # read by si_unit (the scenario reference's column)
    return BeforeValidator(parse)


class Unit:
    """A field's SI unit where its type does not say it (``Annotated[float, Unit("B")]``):
    read by :func:`si_unit` for the scenario reference; pydantic ignores it."""

    def __init__(self, si_unit: str):
        self.si_unit = si_unit

    def __repr__(self) -> str:
        return f"Unit({self.si_unit!r})"


def si_unit(annotation, metadata=()) -> str:
    """The SI unit of a field typed with a quantity of this module (``Seconds`` -> "s", also
    inside ``X | None``), "" for any other; ``metadata``: a pydantic field's own (where it
    keeps a top-level ``Annotated``'s validators)."""
    import typing

    marks = list(metadata)
    if typing.get_origin(annotation) is typing.Annotated:
        marks += typing.get_args(annotation)[1:]
    for m in marks:
        unit = getattr(m, "si_unit", None) or getattr(getattr(m, "func", None), "si_unit", None)
        if unit:
            return unit
    for arg in typing.get_args(annotation):  # X | None, lists of X
        if typing.get_origin(arg) is not typing.Annotated or arg is annotation:
            continue
        unit = si_unit(arg)
        if unit:
            return unit
    return ""


Bytes = Annotated[float, _parsed("bytes"), Field(gt=0)]
"""A positive byte count (B): capacities, buffer sizes."""

Bandwidth = Annotated[
    float,
    _parsed("bandwidth"),
    _at_least(
        MIN_BANDWIDTH_BPS,
        "1 MB/s",
        "no training link or memory is that slow (1 GbE is 125 MB/s), and tinier rates "
        "overflow simulated time",
    ),
]
"""A bandwidth (B/s) of at least :data:`MIN_BANDWIDTH_BPS`."""

FlopsRate = Annotated[
    float,
    _parsed("flops_rate"),
    _at_least(
        MIN_FLOPS_RATE,
        "1 GFLOP/s",
        "one CPU core is faster, and tinier rates overflow simulated time",
    ),
]
"""A compute rate (FLOP/s) of at least :data:`MIN_FLOPS_RATE`."""

Seconds = Annotated[float, _parsed("time"), Field(ge=0)]
"""A non-negative duration (s)."""

Watts = Annotated[float, _parsed("power"), Field(gt=0, le=1e6)]
"""A power (W): one device's draw or limit, at most 1 MW."""

LinkLatency = Annotated[
    float,
    _parsed("time"),
    Field(ge=0),
    _at_most(MAX_LINK_LATENCY_S, "1 s", "a datacenter hop takes microseconds"),
]
"""A per-hop latency (s), at most :data:`MAX_LINK_LATENCY_S`."""
