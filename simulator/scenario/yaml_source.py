"""Safe YAML loading that remembers where every value was written, with ``include:`` expansion.

pydantic reports a field path but no line numbers, so the loader builds plain data from
``yaml.compose()`` nodes itself and records a :class:`Position` for each path. YAML is loaded
with PyYAML's SafeLoader rules (no object construction). Mapping keys are taken as the text
written, so YAML 1.1's ``on:``/``off:`` keys stay strings; values follow YAML 1.1 (``1e9`` is
a string, which the units parser accepts).

A mapping with an ``include: PATH`` key is replaced by the mapping in that file, deep-merged
with its sibling keys, which win. PATH is resolved against the including file's folder, then
each folder of ``search_dirs`` (the project root, so ``include: topologies/nvl72.yaml`` works
from anywhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator.scenario.errors import FieldPath, Position, ScenarioError

MAX_NODES = 200_000  # guards against alias bombs ("billion laughs")
MAX_INCLUDE_DEPTH = 8

Positions = dict[FieldPath, Position]
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def _mark(node: yaml.Node, source: str) -> Position:
    return Position(source, node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Turns a composed node tree into plain data and a path -> Position map."""

    def __init__(self, source: str, loader: yaml.SafeLoader):
        self.source = source
        self.loader = loader
        self.positions: Positions = {}
        self.count = 0

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise ScenarioError.single(
                _mark(node, self.source), "", f"document has more than {MAX_NODES} nodes"
            )
        self.positions.setdefault(path, _mark(node, self.source))
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            raise ScenarioError.single(
                _mark(node, self.source), "", f"YAML tag {node.tag!r} is not allowed"
            )
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # resolves "<<" merge keys
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ScenarioError.single(
                        _mark(key_node, self.source), "", "mapping keys must be plain words"
                    )
                key = key_node.value
                if key in out:
                    raise ScenarioError.single(
                        _mark(key_node, self.source),
                        ".".join(map(str, path + (key,))),
                        "duplicate key",
                    )
                self.positions[path + (key,)] = _mark(key_node, self.source)
                out[key] = self.build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self.loader.construct_object(node, deep=True)


def parse_yaml(text: str, source: str) -> tuple[Any, Positions]:
    """Parse one YAML document; return its data and the position of every path in it."""
    try:
        loader = yaml.SafeLoader(text)  # the reader rejects control characters here
    except yaml.YAMLError as exc:
        raise ScenarioError.single(Position(source), "", f"YAML: {exc}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {(): Position(source, 1, 1)}
        builder = _Builder(source, loader)
        data = builder.build(node, ())
        return data, builder.positions
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Position(source, mark.line + 1, mark.column + 1) if mark else Position(source)
        raise ScenarioError.single(pos, "", f"YAML syntax: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:  # e.g. reader errors on control characters
        raise ScenarioError.single(Position(source), "", f"YAML: {exc}") from None
    except RecursionError:
        raise ScenarioError.single(Position(source), "", "YAML nested too deeply") from None
    finally:
        loader.dispose()


def read_yaml_file(path: Path) -> tuple[Any, Positions]:
    """Read and parse a YAML file; a missing or unreadable file is a ScenarioError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError.single(Position(str(path)), "", f"cannot read file: {exc}") from None
    return parse_yaml(text, str(path))


def deep_merge(base: Any, over: Any) -> Any:
    """Merge mapping ``over`` onto ``base`` recursively; anything else in ``over`` replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = deep_merge(base[key], value) if key in base else value
        return out
    return over


def expand_includes(
    data: Any,
    positions: Positions,
    here: Path,
    search_dirs: list[Path],
    path: FieldPath = (),
    depth: int = 0,
) -> Any:
    """Replace every ``include:`` mapping in ``data`` by the included file, merged.

    ``positions`` is updated in place so included values point into the included file.
    """
    if isinstance(data, list):
        return [
            expand_includes(v, positions, here, search_dirs, path + (i,), depth)
            for i, v in enumerate(data)
        ]
    if not isinstance(data, dict):
        return data
    data = {
        k: expand_includes(v, positions, here, search_dirs, path + (k,), depth)
        for k, v in data.items()
    }
    if "include" not in data:
        return data
    pos = positions.get(path + ("include",), Position(str(here)))
    target = data.pop("include")
    if not isinstance(target, str):
        raise ScenarioError.single(
            pos, ".".join(map(str, path + ("include",))), "include must be a file path"
        )
    if depth >= MAX_INCLUDE_DEPTH:
        raise ScenarioError.single(pos, "include", "includes nested too deeply (a cycle?)")
    file = _resolve(target, here, search_dirs)
    if file is None:
        raise ScenarioError.single(
            pos, ".".join(map(str, path + ("include",))), f"included file {target!r} not found"
        )
    inc_data, inc_positions = read_yaml_file(file)
    if not isinstance(inc_data, dict):
        raise ScenarioError.single(
            Position(str(file), 1, 1), "", "an included file must hold a mapping"
        )
    inc_data = expand_includes(inc_data, inc_positions, file.parent, search_dirs, (), depth + 1)
    for sub, p in inc_positions.items():
        positions.setdefault(path + sub, p)  # a key the includer wrote keeps its position
    return deep_merge(inc_data, data)


def _resolve(target: str, here: Path, search_dirs: list[Path]) -> Path | None:
    for folder in [here, *search_dirs]:
        candidate = (folder / target).expanduser()
        if candidate.is_file():
            return candidate
    return None
