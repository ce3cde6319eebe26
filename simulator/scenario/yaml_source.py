"""Safe YAML loading that remembers where every value was written, with ``include:`` expansion.

pydantic reports a field path but no line numbers, so the loader builds plain data from
``yaml.compose()`` nodes itself and records a :class:`Position` for each path. YAML is loaded
with PyYAML's SafeLoader rules (no object construction). Mapping keys are taken as the text
written, so YAML 1.1's ``on:``/``off:`` keys stay strings; values follow YAML 1.1, except that
scientific notation is a number as in YAML 1.2 (``1e-9``: :data:`YAML12_FLOAT`).

A mapping with an ``include: PATH`` key is replaced by the mapping in that file, deep-merged
with its sibling keys, which win. PATH is resolved against the including file's folder and
the folders above it, then each folder of ``search_dirs`` (the project root, so ``include:
topologies/nvl72.yaml`` works from anywhere).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from simulator.scenario.errors import FieldPath, Position, Problem, ScenarioError

MAX_NODES = 200_000  # guards against alias bombs ("billion laughs")
MAX_INCLUDE_DEPTH = 8
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted. A scenario nests about 4 deep
(``cluster.topology.node.gpus``); printing 260+ levels overflows pydantic's serialiser and
PyYAML's composer recurses once per level."""
MAX_FILE_BYTES = 2**20
"""Largest file read (1 MiB). Scenarios are a few kB; a 50 MB file took minutes to refuse."""

YAML12_FLOAT = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
"""Scientific notation YAML 1.1 leaves as text (``1e-9``, ``5e1``, ``1.5e3``: 1.1 wants a dot
and a signed exponent) and YAML 1.2 reads as a number: read as a float here, as users write
failure rates and fractions."""


def _with_yaml12_floats(base: type) -> type:
    """``base`` (a safe loader class) that also reads :data:`YAML12_FLOAT` plain scalars as
    floats (quoted, they stay text)."""
    loader = type(f"{base.__name__}12", (base,), {})
    loader.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT, list("-+0123456789."))
    return loader


SafeLoader12 = _with_yaml12_floats(yaml.SafeLoader)
SafeDumper12 = _with_yaml12_floats(yaml.SafeDumper)
"""Writes the text ``"1e9"`` quoted, so that :data:`SafeLoader12` reads it back as text."""


def load_value(text: str, source: str = "<value>") -> Any:
    """One YAML value (a ``--set`` value, a ``--fix`` value) read as files are: numbers as
    YAML 1.2 has them, and a mapping that repeats a key refused (ScenarioError at
    ``source``), where PyYAML alone keeps the last."""
    return parse_yaml(text, source)[0]


_C_SAFE = getattr(yaml, "CSafeLoader", None)
_FAST_LOADER: type | None = _with_yaml12_floats(_C_SAFE) if _C_SAFE is not None else None
"""libyaml's parser under PyYAML's safe constructor, about 30 times faster than the
pure-Python parser (0.15 ms against 4.4 ms for the 405B example), which made parsing two
thirds of the loader fuzz's time. Its error messages are terser (no offending character, a
stream end reported on the next line), so a document it refuses is parsed again by the
pure-Python parser, whose message and position the user sees. The two do not accept the same
language at its edges: libyaml takes tabs the pure-Python parser refuses (``a: 1<TAB>``),
reads an empty tagged scalar (``! ``) as ``''`` where the other reads None, differs on
byte-order marks and YAML 1.1's extra line breaks (U+0085, U+2028, U+2029) inside a document,
on some block scalar headers and on ``?`` in flow collections, and places the end of a stream
without a final newline on the next line (found by fuzzing both). So libyaml parses only
documents that end with a newline and hold no character :data:`_UNSURE` matches; the rest go
to the pure-Python parser alone, and whether a file loads does not depend on how PyYAML was
built. None where PyYAML was built without libyaml."""

_UNSURE = re.compile(
    "[^\n -~\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]|[!|>?%@`]"
)
"""A character outside the subset on which libyaml and the pure-Python parser were fuzzed to
agree (``tests/properties/test_loader_fuzz.py``): control characters but the newline, the
byte-order mark, U+0085, U+2028 and U+2029, surrogates, U+FFFE and U+FFFF, and the YAML
indicators of tags (!), block scalars (| >), complex keys (?), directives (%) and reserved
use (@ `)."""


def _libyaml_reads_alike(text: str) -> bool:
    """Whether libyaml may parse ``text`` (see :data:`_FAST_LOADER`)."""
    return _FAST_LOADER is not None and text.endswith("\n") and _UNSURE.search(text) is None


Positions = dict[FieldPath, Position]
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def _mark(node: yaml.Node, source: str) -> Position:
    return Position(source, node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Turns a composed node tree into plain data and a path -> Position map."""

    def __init__(self, source: str, loader: yaml.SafeLoader | yaml.CSafeLoader):
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
        if len(path) > MAX_DEPTH:  # aliases can nest deeper than the text does
            raise ScenarioError.single(_mark(node, self.source), "", _TOO_DEEP)
        self.positions.setdefault(path, _mark(node, self.source))
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
            raise ScenarioError.single(
                _mark(node, self.source), "", f"YAML tag {node.tag!r} is not allowed"
            )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # 2001-13-14, !!int x, !!int '', !!bool x: PyYAML's own errors
            kind = str(node.tag).rsplit(":", 1)[-1]
            raise ScenarioError.single(
                _mark(node, self.source),
                ".".join(map(str, path)),
                f"YAML: cannot read {node.value!r} as {kind} ({exc})",
            ) from None

    def _mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict[str, Any]:
        """A mapping; keys merged in by ``<<`` yield to keys written beside it (YAML 1.1)."""
        written = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
        self.loader.flatten_mapping(node)  # merged pairs first, then the written ones
        out: dict[str, Any] = {}
        merged: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ScenarioError.single(
                    _mark(key_node, self.source), "", "mapping keys must be plain words"
                )
            key = key_node.value
            if key in out and key not in merged:
                raise ScenarioError.single(
                    _mark(key_node, self.source),
                    ".".join(map(str, path + (key,))),
                    "duplicate key",
                )
            if key in out:  # a merged value overridden: forget where its parts were
                for known in [p for p in self.positions if p[: len(path) + 1] == path + (key,)]:
                    del self.positions[known]
            (merged.discard if id(key_node) in written else merged.add)(key)
            self.positions[path + (key,)] = _mark(key_node, self.source)
            out[key] = self.build(value_node, path + (key,))
        return out


_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep (a scenario needs about 4)"


def _prescan(text: str, source: str, loader_class: type) -> None:
    """Refuse a document with too many nodes or too deep a nesting from its parse events,
    before a node tree is composed (composing is recursive and holds every node)."""
    loader = loader_class(text)
    count = depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ScenarioError.single(_event_mark(event, source), "", _TOO_DEEP)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            if isinstance(event, yaml.NodeEvent):
                count += 1
                if count > 2 * MAX_NODES:  # keys count here too; the builder counts values
                    raise ScenarioError.single(
                        _event_mark(event, source), "", f"document has more than {MAX_NODES} nodes"
                    )
    finally:
        loader.dispose()


def _event_mark(event: yaml.Event, source: str) -> Position:
    return Position(source, event.start_mark.line + 1, event.start_mark.column + 1)


def _reader_position(exc: yaml.reader.ReaderError, text: str, source: str) -> Position:
    before = text[: exc.position]
    return Position(source, before.count("\n") + 1, exc.position - before.rfind("\n"))


def parse_yaml(text: str, source: str) -> tuple[Any, Positions]:
    """Parse one YAML document; return its data and the position of every path in it.

    libyaml parses first where PyYAML has it and the text is one it reads as the pure-Python
    parser does (:func:`_libyaml_reads_alike`); a YAML error there is reported as the
    pure-Python parser words it (the caps and checks of the builder are the same in both)."""
    if _libyaml_reads_alike(text):
        try:
            return _parse(text, source, _FAST_LOADER)
        except yaml.YAMLError:
            pass  # parsed again below for the pure-Python parser's message
    try:
        return _parse(text, source, SafeLoader12)
    except yaml.YAMLError as exc:
        raise _scenario_error(exc, text, source) from None
    except ScenarioError:  # a ValueError too
        raise
    except ValueError:  # the scanner's chr() on a "\U" escape past U+10FFFF
        where, escape = _escape_past_unicode(text, source)
        message = f"YAML: the escape {escape} is past the last Unicode character, U+10FFFF"
        raise ScenarioError.single(where, "", message) from None


def _escape_past_unicode(text: str, source: str) -> tuple[Position, str]:
    """Where the first ``\\U`` escape past U+10FFFF is written, and the escape."""
    for found in re.finditer(r"\\U([0-9A-Fa-f]{8})", text):
        if int(found.group(1), 16) > 0x10FFFF:
            at = found.start()
            line = text.count("\n", 0, at) + 1
            return Position(source, line, at - text.rfind("\n", 0, at)), found.group(0)
    return Position(source, 1, 1), "\\U"


def _parse(text: str, source: str, loader_class: type) -> tuple[Any, Positions]:
    """:func:`parse_yaml` with one parser; its YAML errors are raised as they are."""
    _prescan(text, source, loader_class)  # the reader rejects control characters here
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {(): Position(source, 1, 1)}
        builder = _Builder(source, loader)
        data = builder.build(node, ())
        return data, builder.positions
    except RecursionError:  # not expected after the prescan's depth cap; kept as a backstop
        raise ScenarioError.single(Position(source, 1, 1), "", _TOO_DEEP) from None
    finally:
        loader.dispose()


def _scenario_error(exc: yaml.YAMLError, text: str, source: str) -> ScenarioError:
    """A parser's YAML error as a ScenarioError at the place it names."""
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character
        shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        pos = _reader_position(exc, text, source)
        return ScenarioError.single(pos, "", f"YAML: {exc.reason} ({shown})")
    if isinstance(exc, yaml.MarkedYAMLError):
        return ScenarioError.single(_error_position(exc, source), "", _syntax(exc))
    return ScenarioError.single(Position(source), "", f"YAML: {exc}")


def _error_position(exc: yaml.MarkedYAMLError, source: str) -> Position:
    mark = exc.problem_mark or exc.context_mark
    return Position(source, mark.line + 1, mark.column + 1) if mark else Position(source, 1, 1)


def _syntax(exc: yaml.MarkedYAMLError) -> str:
    return f"YAML syntax: {exc.problem or exc}"


def read_yaml_file(path: Path) -> tuple[Any, Positions]:
    """Read and parse a YAML file; a missing, unreadable or oversized file is a ScenarioError."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ScenarioError.single(
                Position(str(path)),
                "",
                f"file larger than {MAX_FILE_BYTES // 2**20} MiB; a scenario is a few kB",
            )
        text = raw.decode("utf-8")
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
    pos = positions.get(path + ("include",))
    for up in range(len(path), -1, -1):  # else where its nearest ancestor was written
        if pos is not None:
            break
        pos = positions.get(path[:up])
    pos = pos or Position(str(here))
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
    link = f"included from {pos} ({'.'.join(map(str, path + ('include',)))})"
    try:
        inc_data, inc_positions = read_yaml_file(file)
        if not isinstance(inc_data, dict):
            raise ScenarioError.single(
                Position(str(file), 1, 1), "", "an included file must hold a mapping"
            )
        inc_data = expand_includes(inc_data, inc_positions, file.parent, search_dirs, (), depth + 1)
    except ScenarioError as exc:  # name the include that led here too
        raise ScenarioError([_chained(p, link) for p in exc.problems]) from None
    for sub, p in inc_positions.items():  # a key the includer wrote keeps its position
        positions.setdefault(path + sub, p.via_include(link))
    return deep_merge(inc_data, data)


def _chained(problem: Problem, link: str) -> Problem:
    return Problem(problem.position.via_include(link), problem.field, problem.message)


def _resolve(target: str, here: Path, search_dirs: list[Path]) -> Path | None:
    """The file ``target`` names: beside the including file or in one of the folders above it
    (a scenario in ``scenarios/examples/`` finds ``topologies/...`` at its project's root,
    wherever it is run from and however the package is installed), else in ``search_dirs``."""
    for folder in [here, *here.resolve().parents, *search_dirs]:
        candidate = (folder / target).expanduser()
        if candidate.is_file():
            return candidate
    return None
