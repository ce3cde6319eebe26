"""Load a scenario YAML: includes, ``--set`` overrides, validation, errors with file:line:col.

>>> from simulator.scenario import load_scenario_text
>>> s = load_scenario_text('''
... model: llama3-8b
... cluster: {accelerator: H100, gpus: 8}
... training: {global_batch: 64, seq_len: 8192}
... ''')
>>> s.dp
8
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from simulator.scenario.checks import check_scenario
from simulator.scenario.errors import FieldPath, Position, Problem, ScenarioError, dotted
from simulator.scenario.schema import Scenario, TopologyConfig
from simulator.scenario.yaml_source import (
    Positions,
    expand_includes,
    load_value,
    parse_yaml,
    read_yaml_file,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MAX_PROBLEMS = 20


def _locate(loc: tuple, data: Any, positions: Positions) -> tuple[Position, FieldPath]:
    """Map a pydantic ``loc`` onto the data: the best position and the user-visible path.

    Segments that are not keys of the data (union tags like ``fat_tree``, validator names) are
    skipped, except a last segment, which names a missing field.
    """
    path: FieldPath = ()
    node = data
    for i, seg in enumerate(loc):
        if isinstance(node, dict) and seg in node:
            path, node = path + (seg,), node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
            path, node = path + (seg,), node[seg]
        elif isinstance(node, dict) and node.get("kind") == seg:
            continue  # a discriminated union's tag (e.g. ``fat_tree``) is not a key
        elif i == len(loc) - 1 and isinstance(seg, str) and not isinstance(node, list):
            shown = path + (seg,)
            return _nearest(path, positions), shown
    return _nearest(path, positions), path


def _nearest(path: FieldPath, positions: Positions) -> Position:
    while path not in positions and path:
        path = path[:-1]
    return positions.get(path, Position("<scenario>"))


def _message(err: dict) -> str:
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if err["type"] not in ("value_error", "assertion_error") and "input" in err:
        shown = repr(err["input"])
        msg += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return msg


def _validation_problems(exc: ValidationError, data: Any, positions: Positions) -> list[Problem]:
    problems, seen = [], set()
    for err in exc.errors(include_url=False):
        pos, path = _locate(err["loc"], data, positions)
        problem = Problem(pos, dotted(path), _message(err))
        if str(problem) not in seen:
            seen.add(str(problem))
            problems.append(problem)
    return problems[:MAX_PROBLEMS]


def parse_override(text: str) -> tuple[FieldPath, Any]:
    """``"parallelism.tp=4"`` -> ``(("parallelism", "tp"), 4)``; the value is read as YAML."""
    key, sep, raw = text.partition("=")
    where = Position(f"--set {text}")
    if not sep or not key.strip():
        raise ScenarioError.single(where, "", "an override reads key.path=value")
    segments = [seg.strip() for seg in key.split(".")]
    if not all(segments):
        raise ScenarioError.single(where, "", f"empty segment in the key path {key.strip()!r}")
    try:
        value = load_value(raw, where.source) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError.single(where, key.strip(), f"cannot read the value: {exc}") from None
    except ScenarioError as exc:  # e.g. a flow mapping that repeats a key
        message = "; ".join(p.message for p in exc.problems)
        raise ScenarioError.single(
            where, key.strip(), f"cannot read the value: {message}"
        ) from None
    path = tuple(int(seg) if seg.isdigit() else seg for seg in segments)
    return path, value


def _blame(positions: Positions, path: FieldPath, where: Position) -> None:
    """Attribute ``path`` and everything under it to the override ``where``."""
    for known in [k for k in positions if k[: len(path)] == path]:
        del positions[known]
    positions[path] = where


def apply_override(data: dict, positions: Positions, text: str) -> None:
    """Set one ``key.path=value`` in ``data`` (creating mappings as needed).

    A path the override creates, or a value whose structure it replaces, is blamed on the
    override, so that validation errors name the ``--set`` rather than the file.
    """
    path, value = parse_override(text)
    where = Position(f"--set {text}")
    node: Any = data
    for i, seg in enumerate(path[:-1]):
        here = path[: i + 1]
        if isinstance(node, dict):
            if not isinstance(node.get(seg), dict | list):
                if isinstance(path[i + 1], int):
                    raise ScenarioError.single(
                        where,
                        dotted(here),
                        "no list here to index; set the whole list, e.g. "
                        f"--set '{'.'.join(map(str, here))}=[...]'",
                    )
                node[seg] = {}  # overriding a catalog name by a field, or a new section
                _blame(positions, here, where)
            node = node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and seg < len(node):
            node = node[seg]
        else:
            raise ScenarioError.single(where, dotted(here), "no such element")
    last = path[-1]
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError.single(where, dotted(path), "no such element")
    _blame(positions, path, where)


def _promote_names(data: dict, overrides: list[str]) -> None:
    """Let ``--set model.layers=2`` refine ``model: llama3-8b`` (a name becomes {name: ...})."""
    for section in ("model", "precision", "framework"):
        if isinstance(data.get(section), str) and any(
            o.startswith(section + ".") for o in overrides
        ):
            key = "recipe" if section == "precision" else "name"
            data[section] = {key: data[section]}
    cluster = data.get("cluster")
    if (
        isinstance(cluster, dict)
        and isinstance(cluster.get("accelerator"), str)
        and any(o.startswith("cluster.accelerator.") for o in overrides)
    ):
        cluster["accelerator"] = {"name": cluster["accelerator"]}


def build_scenario(
    data: Any, positions: Positions, source: str, overrides: list[str] | tuple[str, ...] = ()
) -> Scenario:
    """Validate parsed data (after includes) with overrides applied; raise ScenarioError."""
    if not isinstance(data, dict):
        raise ScenarioError.single(
            positions.get((), Position(source)), "", "a scenario must be a YAML mapping of sections"
        )
    origin = (copy.deepcopy(data), copy.deepcopy(positions), source, tuple(overrides))
    _promote_names(data, list(overrides))
    for text in overrides:
        apply_override(data, positions, text)
    if any("include" in text for text in overrides):
        # an override may bring an include: of its own (--set 'cluster.topology={include:
        # topologies/dgx-h100-superpod.yaml, nodes: 4}'): a path relative to the scenario
        # file's folder, the working folder or the project, as the file's own includes are
        here = Path(source).parent if Path(source).is_file() else Path.cwd()
        try:
            data = expand_includes(data, positions, here, [Path.cwd(), PROJECT_ROOT])
        except RecursionError:
            raise ScenarioError.single(Position(source), "", "nested too deeply") from None
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        problems = _validation_problems(exc, data, positions)
        raise ScenarioError(_with_overrides(problems, overrides)) from None
    findings = check_scenario(scenario)
    if findings:
        raise ScenarioError(
            _with_overrides(
                [Problem(_nearest(path, positions), dotted(path), msg) for path, msg in findings],
                overrides,
            )
        )
    scenario._origin = origin
    return scenario


def with_overrides(scenario: Scenario, changes: dict[str, Any] | list[str]) -> Scenario:
    """``scenario`` rebuilt from its file's data with more overrides (``{"key": value}`` or
    ``["key=value"]``), validated as a file with ``--set`` is: ScenarioError naming the field.
    ValueError for a scenario not loaded from YAML, or changed in code since."""
    origin = getattr(scenario, "_origin", None)
    if origin is None:
        raise ValueError("with_overrides rebuilds a scenario loaded from YAML (api.load)")
    data, positions, source, before = origin
    if isinstance(changes, dict):
        changes = [f"{k}={json.dumps(v)}" for k, v in changes.items()]  # a string stays one
    if build_scenario(copy.deepcopy(data), copy.deepcopy(positions), source, before) != scenario:
        raise ValueError(
            "this scenario was changed in code after loading (model_copy): with_overrides "
            "would lose that change; load it with api.load(path, overrides) instead"
        )
    return build_scenario(
        copy.deepcopy(data), copy.deepcopy(positions), source, [*before, *changes]
    )


def _with_overrides(problems: list[Problem], overrides) -> list[Problem]:
    """Problems found at a place in the file while overrides were in force say so: a
    consistency check blames the field it checks (``parallelism.pp``), which may be the
    file's while the change that broke it came from ``--set model.layers=6``."""
    if not overrides:
        return problems
    shown = ", ".join(f"--set {o}" for o in overrides[:3])
    if len(overrides) > 3:
        shown += f" and {len(overrides) - 3} more"
    return [
        p
        if p.position.source.startswith("--set ")
        else Problem(p.position, p.field, f"{p.message} (with {shown})")
        for p in problems
    ]


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, include, override and validate the scenario in ``path``.

    Raises
    ------
    ScenarioError
        For any problem with the input; its message names file:line:col and the field.

    >>> try:
    ...     load_scenario("scenarios/examples/pipeline-1f1b.yaml", ["parallelism.pp=3"])
    ... except ScenarioError as exc:
    ...     print(str(exc).splitlines()[0][:80])
    scenarios/examples/pipeline-1f1b.yaml:10:3: parallelism.tp: tp x pp x cp = 2 x 3
    """
    path = Path(path)
    data, positions = read_yaml_file(path)
    try:
        data = expand_includes(data, positions, path.parent, [Path.cwd(), PROJECT_ROOT])
    except RecursionError:
        raise ScenarioError.single(Position(str(path)), "", "nested too deeply") from None
    return build_scenario(data, positions, str(path), overrides)


def load_scenario_text(
    text: str,
    source: str = "<string>",
    overrides: list[str] | tuple[str, ...] = (),
    base_dir: Path | None = None,
) -> Scenario:
    """Like :func:`load_scenario` for YAML text; includes resolve against ``base_dir``."""
    data, positions = parse_yaml(text, source)
    data = expand_includes(data, positions, base_dir or Path.cwd(), [PROJECT_ROOT])
    return build_scenario(data, positions, source, overrides)


_TOPOLOGY = TypeAdapter(TopologyConfig)


def load_topology(path: str | Path, overrides: list[str] | tuple[str, ...] = ()):
    """Load a topology YAML (the ``cluster.topology`` section on its own, as in topologies/),
    with ``overrides`` as ``--set`` takes them (keys within the section).

    >>> pod = load_topology("topologies/dgx-h100-superpod.yaml", ["nodes=4"])
    >>> type(pod).__name__, pod.nodes, pod.nic_bandwidth / 1e9  # GB/s: 400 Gb/s NDR
    ('FatTreeTopology', 4, 50.0)

    Raises
    ------
    ScenarioError
        With file:line:col and field, as for scenarios.
    """
    path = Path(path)
    data, positions = read_yaml_file(path)
    data = expand_includes(data, positions, path.parent, [Path.cwd(), PROJECT_ROOT])
    if not isinstance(data, dict):
        raise ScenarioError.single(Position(str(path), 1, 1), "", "a topology must be a mapping")
    for text in overrides:
        apply_override(data, positions, text)
    try:
        return _TOPOLOGY.validate_python(data)
    except ValidationError as exc:
        raise ScenarioError(_validation_problems(exc, data, positions)) from None


def scenario_data(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The scenario in ``path`` as plain data: includes expanded, ``overrides`` applied, not
    validated and no defaults filled in (what a written scenario file holds: ``trainsim
    plan --out`` writes its plans so). ScenarioError for a file that cannot be read."""
    path = Path(path)
    data, positions = read_yaml_file(path)
    data = expand_includes(data, positions, path.parent, [Path.cwd(), PROJECT_ROOT])
    if not isinstance(data, dict):
        raise ScenarioError.single(Position(str(path)), "", "a scenario must be a YAML mapping")
    _promote_names(data, list(overrides))
    for text in overrides:
        apply_override(data, positions, text)
    return data
