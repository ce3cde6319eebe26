"""The columns of a sweep's results that make it a table for analysis.

Each swept key ``K`` has two columns: ``K`` holds the value the point ran with as the scenario
resolved it (a number in SI units for a quantity: ``400 Gb/s`` is ``5e10``, in bytes per second
as every bandwidth of a scenario is; a count as an integer; a list of numbers for
``oversubscription``; text for a name), so that pandas and DuckDB sort and filter
it as numbers; ``K_text`` holds it as written in the spec (``"400 Gb/s"``), for labels. The
base scenario's row (point -1) carries the base's own values in both.

Stream utilisation (a dict per run) becomes one column per stream, ``util_<stream>``: the
fraction of the step that stream was busy.
"""

from __future__ import annotations

import json
import math
from typing import Any

TEXT_SUFFIX = "_text"
UTIL_PREFIX = "util_"
_DIMENSIONS = ("bandwidth", "bytes", "time", "flops_rate", "flops", "count")


def text_column(key: str) -> str:
    """The column holding ``key``'s values as written."""
    return key + TEXT_SUFFIX


def resolved_value(scenario: Any, key: str) -> Any:
    """The value of dotted ``key`` in a resolved scenario (a pydantic model), or None when a
    part of the path is absent (a key of a section the scenario does not have)."""
    node = scenario
    for part in key.split("."):
        if node is None:
            return None
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list | tuple):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                return None
        else:
            node = getattr(node, part, None)
    return _plain(node)


def written_value(data: Any, key: str) -> Any:
    """The value of dotted ``key`` in a scenario's YAML data (includes expanded), or None."""
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def _plain(value: Any) -> Any:
    """A pydantic model as its dict, an enum as its value, a tuple as a list."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "value") and isinstance(value.value, str | int | float):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def numeric(resolved: Any, written: Any) -> Any:
    """The analysis value of a swept key: the resolved value when it is a number or a list of
    numbers, or a boolean; else the written value read as a quantity in SI units when it is one (an
    infeasible point has no resolved scenario); else the text (a schedule's name)."""
    for candidate in (resolved, written):
        if isinstance(candidate, bool):  # a switch (rail_optimized) stays true/false
            return candidate
        if _is_number(candidate):
            return candidate
        if isinstance(candidate, list) and candidate and all(_is_number(v) for v in candidate):
            return [float(v) for v in candidate]
    if isinstance(written, str):
        si = as_quantity(written)
        if si is not None:
            return si
    if resolved is None and written is None:
        return None
    return text(written if written is not None else resolved)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def quantity_and_kind(value: str) -> tuple[float, str | None] | None:
    """``"400 Gb/s"`` -> (5e10, "bandwidth"), ``"2"`` -> (2.0, None): a number with or without
    a unit in SI units and the kind of unit; None if the text is neither."""
    from simulator.units import UnitError, parse_quantity

    try:
        return float(value), None
    except ValueError:
        pass
    for dimension in _DIMENSIONS:
        try:
            return parse_quantity(value, dimension), dimension
        except UnitError:
            continue
    return None


def as_quantity(value: str) -> float | None:
    """``"400 Gb/s"`` -> 5e10 (bytes/s), ``"16K"`` -> 16000, ``"2"`` -> 2.0; None if the text
    is not a number with a unit."""
    found = quantity_and_kind(value)
    return None if found is None else found[0]


def text(value: Any) -> str | None:
    """A swept value as written: ``2.0`` -> ``"2"``, ``[4, 7]`` -> ``"[4, 7]"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(text(v) or "null" for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def utilisation_columns(row: dict) -> dict:
    """``row`` with its ``utilisation`` (a dict, or its JSON text) spread into one
    ``util_<stream>`` column per stream. A row that has none is returned as it is."""
    util = row.get("utilisation")
    if util is None or (isinstance(util, float) and math.isnan(util)):
        return row
    if isinstance(util, str):
        util = json.loads(util)
    out = {k: v for k, v in row.items() if k != "utilisation"}
    for stream, busy in sorted(util.items()):
        out[UTIL_PREFIX + stream] = float(busy)
    return out
