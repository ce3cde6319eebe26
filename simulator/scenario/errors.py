"""The one error type of scenario loading, and where in the input a value came from.

Every problem with user input - YAML syntax, unknown keys, wrong types, bad units, inconsistent
parallel degrees - surfaces as a :class:`ScenarioError` whose message names the source
(``file:line:col``, or the ``--set`` override) and the dotted field path. The CLI turns it into
exit code 2 without a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    """Where a value was written: a file with 1-based line and column, or a ``--set`` override.

    ``via`` names the chain of ``include:`` lines that led to the file, innermost first.
    """

    source: str
    line: int = 0
    column: int = 0
    via: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}:{self.column}" if self.line else self.source
        return f"{where}, {self.via}" if self.via else where

    def via_include(self, link: str) -> Position:
        """This position, reached through one more include (``link`` names it)."""
        return replace(self, via=f"{self.via}, {link}" if self.via else link)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input."""

    position: Position
    field: str
    message: str

    def __str__(self) -> str:
        if self.field:
            return f"{self.position}: {self.field}: {self.message}"
        return f"{self.position}: {self.message}"


class ScenarioError(ValueError):
    """Bad scenario input. ``problems`` lists each problem with its position and field path."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __reduce__(self):
        """Pickled with its problems (as a process pool sends it back), not its message."""
        return (type(self), (self.problems,))

    @classmethod
    def single(cls, position: Position, field: str, message: str) -> ScenarioError:
        return cls([Problem(position, field, message)])


def dotted(path: FieldPath) -> str:
    """``("model", "moe", "experts")`` -> ``"model.moe.experts"``; list indices as ``[i]``."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + str(seg)
    return out
