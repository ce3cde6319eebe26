"""Sweep spec files: a base scenario and the points to run, validated before anything runs.

A spec is YAML::

    name: nic-x-oversubscription            # optional; names the study
    base: ../examples/mixtral-8x22b.yaml    # the base scenario (relative to this file)
    set:                                    # optional overrides of the base for every point
      training.global_batch: 64
    grid:                                   # product of the lists
      cluster.topology.nic_bandwidth: [100 Gb/s, 400 Gb/s]
      cluster.topology.oversubscription: [[1], [4]]
    zip:                                    # lists walked together (equal lengths)
      parallelism.tp: [1, 2]
      parallelism.pp: [2, 1]
    samples:                                # random points, seeded
      count: 8
      seed: 0
      keys:
        parallelism.pp: [1, 2, 4]               # a choice
        training.micro_batch: {low: 1, high: 8, log: true, integer: true}
    plots:                                  # optional pictures of the results
      - {kind: heatmap, metric: step_time_s, x: ..., y: ...}

Keys are dotted scenario paths, exactly as ``trainsim run --set key=value`` takes them. The
points are the product grid x zip x samples (each absent part counts as one empty point).

Every key is checked against the base scenario with each of its values before any point runs:
an unknown key, an empty list or a value of the wrong type is a :class:`ScenarioError` naming
the spec's file:line:col. Combinations that are inconsistent (``tp`` that does not divide the
heads) are not spec errors: they become rows marked infeasible, with the loader's message.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.scenario import Scenario, ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.scenario.loader import (
    PROJECT_ROOT,
    _validation_problems,
    build_scenario,
)
from simulator.scenario.yaml_source import (
    Positions,
    SafeDumper12,
    expand_includes,
    read_yaml_file,
)
from simulator.sweep.columns import quantity_and_kind, written_value
from simulator.sweep.spec_keys import check_key_paths, check_point_count
from simulator.sweep.tables import NUMERIC

Values = Annotated[list[Any], Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Range(_Strict):
    """A sampled number: uniform in [low, high], or log-uniform with ``log``; rounded to an
    integer with ``integer``. The ends may carry units (``{low: 100 Gb/s, high: 800 Gb/s}``),
    the same kind of unit at both ends; values are then drawn in SI units (B/s here)."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    @model_validator(mode="before")
    @classmethod
    def ends_in_si(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not any(
            isinstance(data.get(k), str) for k in ("low", "high")
        ):
            return data
        out, kinds = dict(data), set()
        for k in ("low", "high"):
            if isinstance(data.get(k), str):
                out[k], kind = _si(data[k])
                if kind is not None:
                    kinds.add(kind)
        if len(kinds) > 1:
            shown = ", ".join(sorted(kinds))
            raise ValueError(f"low and high are different kinds of quantity ({shown})")
        return out

    @model_validator(mode="after")
    def ordered(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers")
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


def _si(text: str) -> tuple[float, str | None]:
    """A quantity with a unit in SI units, and the kind of unit it has (None for a bare
    number, which YAML may hand over as text)."""
    found = quantity_and_kind(text)
    if found is None:
        raise ValueError(
            f"cannot read {text!r} as a number with a unit (e.g. 400 Gb/s, 80 GB, 5 ms, 16K)"
        )
    return found


def _distribution_kind(value: Any) -> str:
    """A mapping is a range (``{low, high}``); anything else a list of choices: only that
    branch's errors are reported (a range's "high is below low", not "should be a list")."""
    return "range" if isinstance(value, dict | Range) else "choices"


Distribution = Annotated[
    Annotated[Values, Tag("choices")] | Annotated[Range, Tag("range")],
    Discriminator(_distribution_kind),
]


class Samples(_Strict):
    """``count`` random points, each key drawn independently from its choices or range."""

    count: Annotated[int, Field(ge=1, le=1_000_000)]
    seed: Annotated[int, Field(ge=0)] = 0
    keys: Annotated[dict[str, Distribution], Field(min_length=1)]


class PlotSpec(_Strict):
    """A picture of the results: ``line`` draws ``metric`` against ``x`` with one line per
    value of ``group``; ``heatmap`` colours ``metric`` over ``x`` by ``y``."""

    kind: Literal["line", "heatmap"]
    metric: str = "step_time_s"
    x: str
    y: str | None = None
    group: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def heatmap_has_y(self):
        if self.kind == "heatmap" and self.y is None:
            raise ValueError("a heatmap needs y")
        return self


class SweepSpecModel(_Strict):
    """The schema of a spec file (see the module doc)."""

    name: str | None = None
    description: str | None = None
    base: str
    set: dict[str, Any] = {}
    grid: dict[str, Values] = {}
    zip: dict[str, Values] = {}
    samples: Samples | None = None
    plots: list[PlotSpec] = []

    @field_validator("zip")
    @classmethod
    def zip_lengths_agree(cls, zipped: dict[str, list]) -> dict[str, list]:
        lengths = {k: len(v) for k, v in zipped.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k}: {n}" for k, n in lengths.items())
            raise ValueError(f"zip lists are walked together and need equal lengths ({shown})")
        return zipped


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index and the overrides (dotted key -> value as written)."""

    index: int
    values: dict[str, Any]


@dataclass
class SweepSpec:
    """A loaded, checked spec: the base scenario's data (includes expanded), its positions, and
    where each swept value was written."""

    path: Path
    model: SweepSpecModel
    base_path: Path
    base_data: dict
    base_positions: Positions
    positions: Positions = field(repr=False)

    @property
    def name(self) -> str:
        return self.model.name or self.path.stem

    @property
    def keys(self) -> list[str]:
        """Every swept key, in spec order (grid, zip, samples)."""
        m = self.model
        out = list(m.grid) + [k for k in m.zip if k not in m.grid]
        if m.samples:
            out += [k for k in m.samples.keys if k not in out]
        return out

    def points(self) -> list[Point]:
        """The points: grid x zip x samples, in a stable order."""
        return [Point(i, v) for i, v in enumerate(expand(self.model))]

    def base_overrides(self) -> list[str]:
        """The spec's ``set:`` as ``key=value`` overrides."""
        return [override_text(k, v) for k, v in self.model.set.items()]

    def base_value(self, key: str) -> Any:
        """``key``'s value as the base is written: the spec's ``set:``, else the base
        scenario's file (includes expanded); None where the base takes the default."""
        if key in self.model.set:
            return self.model.set[key]
        return written_value(self.base_data, key)

    def overrides(self, values: dict[str, Any]) -> list[str]:
        """``set:`` plus one point's values, as ``key=value`` overrides (point values win)."""
        merged = {**self.model.set, **values}
        return [override_text(k, v) for k, v in merged.items()]

    def scenario(self, values: dict[str, Any]) -> Scenario:
        """The resolved scenario of a point; ScenarioError if the point is infeasible."""
        data = copy.deepcopy(self.base_data)
        positions = dict(self.base_positions)
        return build_scenario(data, positions, str(self.base_path), self.overrides(values))


def override_text(key: str, value: Any) -> str:
    """``("parallelism.tp", 4)`` -> ``"parallelism.tp=4"``: the value written as one-line YAML,
    so that :func:`simulator.scenario.loader.parse_override` reads back the same value."""
    text = yaml.dump(
        value, Dumper=SafeDumper12, default_flow_style=True, width=10**6, sort_keys=False
    )
    text = text.strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    elif text.endswith("..."):
        text = text[:-3].strip()
    return f"{key}={text}"


def expand(spec: SweepSpecModel) -> list[dict[str, Any]]:
    """The points of ``spec`` as dicts of dotted key -> value: grid x zip x samples."""
    grid = [
        dict(zip(spec.grid, combo, strict=True)) for combo in itertools.product(*spec.grid.values())
    ]
    n_zip = len(next(iter(spec.zip.values()))) if spec.zip else 0
    zipped = [{k: v[i] for k, v in spec.zip.items()} for i in range(n_zip)] or [{}]
    sampled = draw_samples(spec.samples) if spec.samples else [{}]
    return [{**g, **z, **s} for g in grid for z in zipped for s in sampled]


def draw_samples(samples: Samples) -> list[dict[str, Any]]:
    """``samples.count`` points drawn with :class:`random.Random` seeded by ``samples.seed``
    (the same seed gives the same points on every machine and Python version >= 3.2)."""
    rng = random.Random(samples.seed)
    out = []
    for _ in range(samples.count):
        point = {}
        for key, dist in samples.keys.items():
            if isinstance(dist, Range):
                if dist.log:
                    x = math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
                else:
                    x = rng.uniform(dist.low, dist.high)
                point[key] = int(round(x)) if dist.integer else x
            else:
                point[key] = dist[rng.randrange(len(dist))]
        out.append(point)
    return out


def _resolve_base(target: str, here: Path) -> Path | None:
    for folder in (here, Path.cwd(), PROJECT_ROOT):
        candidate = (folder / target).expanduser()
        if candidate.is_file():
            return candidate
    return None


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec file.

    Raises
    ------
    ScenarioError
        For an unreadable file, a bad field, a missing base scenario, an unknown key, an empty
        list or a value of the wrong type; each problem names the spec's file:line:col.
    """
    path = Path(path)
    data, positions = read_yaml_file(path)
    if not isinstance(data, dict):
        raise ScenarioError.single(
            positions.get((), Position(str(path))), "", "a sweep spec must be a YAML mapping"
        )
    try:
        model = SweepSpecModel.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_validation_problems(exc, data, positions)) from None
    if not (model.grid or model.zip or model.samples):
        raise ScenarioError.single(
            positions.get((), Position(str(path))), "", "give grid, zip or samples: no points"
        )
    check_point_count(model, path, positions)
    spec = spec_from_model(model, path, positions)
    check_key_paths(spec)
    _check_keys_once(spec)
    _check_plots(spec)
    _check_values(spec)
    return spec


def _check_keys_once(spec: SweepSpec) -> None:
    """A key is set or swept in one place: in two (``grid`` and ``zip``, ``set`` and
    ``grid``) one value would silently win."""
    m = spec.model
    sections = [("set", m.set), ("grid", m.grid), ("zip", m.zip)]
    if m.samples:
        sections.append(("samples.keys", m.samples.keys))
    first: dict[str, str] = {}
    problems = []
    for name, keys in sections:
        for key in keys:
            if key in first:
                path = tuple(name.split(".")) + (key,)
                where = spec.positions.get(path, Position(str(spec.path)))
                problems.append(
                    Problem(
                        where,
                        f"{name}.{key}",
                        f"{key!r} is already in {first[key]}: give each key in one place "
                        "(a point takes one value per key)",
                    )
                )
            else:
                first[key] = name
    if problems:
        raise ScenarioError(problems)


def _check_plots(spec: SweepSpec) -> None:
    """A plot's x, y and group must be swept keys, its metric a numeric result, and its
    file a plain name (it is written inside --out, nowhere else)."""
    problems = []
    known = NUMERIC  # the numeric metrics of a results row
    for i, plot in enumerate(spec.model.plots):
        if plot.file is not None and (
            Path(plot.file).name != plot.file or plot.file in ("", ".", "..")
        ):
            where = spec.positions.get(("plots", i, "file"), Position(str(spec.path)))
            problems.append(
                Problem(
                    where,
                    f"plots[{i}].file",
                    f"{plot.file!r}: give a file name, written inside --out (no folder, no ..)",
                )  # fmt: skip
            )
        for axis in ("x", "y", "group"):
            key = getattr(plot, axis)
            if key is not None and key not in spec.keys:
                where = spec.positions.get(("plots", i, axis), Position(str(spec.path)))
                problems.append(Problem(where, f"plots[{i}].{axis}", f"{key!r} is not swept"))
        if plot.metric not in known:
            where = spec.positions.get(("plots", i, "metric"), Position(str(spec.path)))
            problems.append(
                Problem(
                    where,
                    f"plots[{i}].metric",
                    f"{plot.metric!r} is not a metric; known: {', '.join(known)}",
                )
            )
    if problems:
        raise ScenarioError(problems)


def spec_from_model(
    model: SweepSpecModel, path: Path, positions: Positions | None = None
) -> SweepSpec:
    """A spec from its validated fields (``path`` names it and anchors a relative base);
    used by :func:`load_spec` and by plan search, which writes its candidates as a ``zip``."""
    positions = positions or {}
    base_path = _resolve_base(model.base, path.parent)
    if base_path is None:
        raise ScenarioError.single(
            positions.get(("base",), Position(str(path))),
            "base",
            f"base scenario {model.base!r} not found",
        )
    base_data, base_positions = read_yaml_file(base_path)
    base_data = expand_includes(
        base_data, base_positions, base_path.parent, [Path.cwd(), PROJECT_ROOT]
    )
    return SweepSpec(path, model, base_path, base_data, base_positions, positions)


def _value_sites(spec: SweepSpec) -> list[tuple[str, Any, Position, Position]]:
    """(key, value, where the value was written, where the key was) for every swept and set
    value."""
    m, pos = spec.model, spec.positions
    sites = [(k, v, pos[("set", k)], pos[("set", k)]) for k, v in m.set.items()]
    for section in ("grid", "zip"):
        for key, values in getattr(m, section).items():
            at = pos[(section, key)]
            sites += [(key, v, pos[(section, key, i)], at) for i, v in enumerate(values)]
    if m.samples:
        for key, dist in m.samples.keys.items():
            where = ("samples", "keys", key)
            if isinstance(dist, Range):
                probe = [dist.low, dist.high]
                sites += [
                    (key, int(round(v)) if dist.integer else v, pos[where], pos[where])
                    for v in probe
                ]
            else:
                sites += [(key, v, pos[where + (i,)], pos[where]) for i, v in enumerate(dist)]
    return sites


def _check_values(spec: SweepSpec) -> None:
    """Apply each value on its own to the base; a field-level error about the key itself is a
    spec error, located at the value in the spec. Errors elsewhere (cross-section
    consistency, validators of an enclosing section) only make some points infeasible."""
    base_set = {k: v for k, v in spec.model.set.items()}
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for key, value, where, key_at in _value_sites(spec):
        shown = override_text(key, value)
        if (key, shown) in seen:
            continue
        seen.add((key, shown))
        data = copy.deepcopy(spec.base_data)
        positions = dict(spec.base_positions)
        overrides = [override_text(k, v) for k, v in {**base_set, key: value}.items()]
        try:
            build_scenario(data, positions, str(spec.base_path), overrides)
        except ScenarioError as exc:
            if not _field_level(data):
                continue  # a consistency finding: this point will be infeasible, not wrong
            for p in exc.problems:
                if p.message == "unknown field" and p.field == key:
                    problems.append(Problem(key_at, key, p.message))
                elif p.message == "unknown field" and key.startswith(p.field + "."):
                    # reported at its first unknown part
                    problems.append(Problem(key_at, key, f"{p.field}: {p.message}"))
                elif p.field == key or p.field.startswith((key + ".", key + "[")):
                    problems.append(Problem(where, key, p.message))
                elif p.position.source.startswith("--set ") and not p.field:
                    problems.append(Problem(where, key, p.message))
    if problems:  # an unknown key is found once per value: say it once
        unique = {(str(p.position), p.field, p.message): p for p in problems}
        raise ScenarioError(list(unique.values()))


def _field_level(data: Any) -> bool:
    """Whether ``data`` (overrides applied) fails the schema itself, not only the checks."""
    try:
        Scenario.model_validate(data)
    except ValidationError:
        return True
    except (TypeError, ValueError):
        return True
    return False
