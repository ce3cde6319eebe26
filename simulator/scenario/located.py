"""Findings of a section checked after loading (the failures section against the step time),
placed where their fields were written: the file's line and column, or the ``--set``."""

from __future__ import annotations

from pathlib import Path

from simulator.scenario.errors import Position, Problem, ScenarioError, dotted
from simulator.scenario.loader import PROJECT_ROOT, apply_override
from simulator.scenario.yaml_source import expand_includes, read_yaml_file

Finding = tuple[tuple[str | int, ...], str]


def located_error(source, overrides, findings: list[Finding]):
    """A :class:`ScenarioError` for ``findings``, each at the file:line:col (or ``--set``)
    where its field was written, found by re-reading ``source`` (a path) as the loader does."""
    positions: dict = {}
    if source is not None:
        path = Path(source)
        data, positions = read_yaml_file(path)
        data = expand_includes(data, positions, path.parent, [Path.cwd(), PROJECT_ROOT])
        for text in overrides or ():
            if isinstance(data, dict):
                apply_override(data, positions, text)
    problems = []
    for field, message in findings:
        key = tuple(field)
        while key not in positions and key:
            key = key[:-1]
        where = positions.get(key, Position(str(source) if source else "<scenario>"))
        problems.append(Problem(where, dotted(tuple(field)), message))
    return ScenarioError(problems)
