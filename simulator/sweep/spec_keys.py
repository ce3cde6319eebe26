"""Checks of a sweep spec's keys and size, before any point is made: every key a dotted
scenario path an override can set, and no more points than :mod:`simulator.limits` allows."""

from __future__ import annotations

import copy
import math
from pathlib import Path

from simulator.scenario import ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.scenario.loader import apply_override
from simulator.scenario.yaml_source import Positions


def point_count(model) -> int:
    """How many points ``model`` has (grid x zip x samples), without making them."""
    n = math.prod(len(v) for v in model.grid.values()) if model.grid else 1
    if model.zip:
        n *= len(next(iter(model.zip.values())))
    if model.samples:
        n *= model.samples.count
    return n


def check_point_count(model, path: Path, positions: Positions) -> None:
    """A spec of more points than :mod:`simulator.limits` allows is refused before any is
    made (10^12 grid points would fill memory; 10^6 would simulate for hours)."""
    from simulator import limits

    n = point_count(model)
    section = next((k for k in ("grid", "zip", "samples") if getattr(model, k)), "grid")
    message = limits.beyond("sweep_points", n, f"this spec's {section}")
    if message:
        where = positions.get((section,), Position(str(path)))
        raise ScenarioError.single(where, section, message)


def key_sites(spec):
    """(section path, key) of every set, swept and sampled key."""
    m = spec.model
    sections = [(("set",), m.set), (("grid",), m.grid), (("zip",), m.zip)]
    if m.samples:
        sections.append((("samples", "keys"), m.samples.keys))
    for section, keys in sections:
        for key in keys:
            yield section, key


def check_key_paths(spec) -> None:
    """Every key is a dotted scenario path that an override can set on the base: not empty,
    no empty segment, not a number, and indexing only lists the base has (an unknown field is
    found later, with the values)."""
    problems = []
    for section, key in key_sites(spec):
        where = spec.positions.get(section + (key,), Position(str(spec.path)))
        name = ".".join(section) + f".{key}"
        if not isinstance(key, str):
            problems.append(Problem(where, name, f"a key is a dotted scenario path, not {key!r}"))
            continue
        if (
            not key
            or any(not part.strip() for part in key.split("."))
            or not (key.split(".")[0].isidentifier())
        ):
            problems.append(
                Problem(
                    where,
                    name,
                    "a key is a dotted scenario path that starts with a "
                    "section's name and has no empty part, e.g. parallelism.tp",
                )  # fmt: skip
            )
            continue
        data, positions = copy.deepcopy(spec.base_data), dict(spec.base_positions)
        try:
            apply_override(data, positions, f"{key}=0")
        except ScenarioError as exc:
            problems.append(Problem(where, name, exc.problems[0].message))
    if problems:
        raise ScenarioError(problems)
