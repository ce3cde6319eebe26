"""TaskGraph: per-rank ordered tasks on named streams, with dependencies. Plain data.

A stream runs its tasks in list order, one at a time (a CUDA stream). A task starts when it is
the next on its stream, the stream is free, and every task it depends on has ended. A
communication task is one rank's part of a collective: the members' tasks that share
``CommSpec.instance`` start together once all are ready (a rendezvous) and end together when
the engine has moved the bytes. Compute durations are fixed here; communication durations are
the engine's to decide.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

from simulator.trace import COLUMNS, TEXT_COLUMNS


class CommSpec(NamedTuple):
    """One rank's part of a collective.

    ``group``: member ranks in collective order; ``size_bytes``: the buffer S (docs/design.md);
    ``instance``: tasks with equal instance form one call; ``copies``: index into
    ``TaskGraph.copy_sets`` of the groups of ranks that run the same collective at the same
    time without being simulated (symmetry), -1 for none. An immutable named tuple, as
    :class:`Task` is: a step has one per communication task (130K in a GPT-3 175B step), and
    a frozen dataclass is several times slower to build.
    """

    collective: str
    group: tuple[int, ...]
    size_bytes: float
    instance: int
    algorithm: str | None = None
    copies: int = -1


class Task(NamedTuple):
    """A unit of work on ``rank``'s ``stream``; ``deps`` index tasks of the same graph.

    ``mem_alloc`` bytes are allocated when the task starts and ``mem_free`` bytes released when
    it ends (activations, gathered parameters), giving the memory timeline. An immutable
    named tuple rather than a frozen dataclass: a step has up to millions of tasks, and a
    tuple is built about three times as fast.
    """

    rank: int
    stream: str
    kind: Literal["compute", "comm", "host"]  # host: a CPU launch on the "host" stream
    name: str
    duration_s: float = 0.0
    deps: tuple[int, ...] = ()
    comm: CommSpec | None = None
    phase: str = ""
    layer: int = -1
    microbatch: int = -1
    flops: float = 0.0
    mem_alloc: float = 0.0
    mem_free: float = 0.0


class Compiled(NamedTuple):
    """What an engine run reads of a graph and never changes, made once per graph
    (:meth:`TaskGraph.compiled`): runs of one graph (a sweep's points) share it.

    ``stream_of``: each task's stream number (streams numbered by first appearance);
    ``queue``: per stream its tasks in order; ``waiting``: each task's dependency count (a
    run counts down a copy); ``dependents``: per task the tasks that depend on it;
    ``members``: simulated member tasks per collective instance; ``shape_of``: per comm
    task the number of its collective's shape (the same call, group, size, algorithm and
    copies: routed alike), -1 for a compute task; ``shapes``: how many there are.
    """

    stream_of: list[int]
    queue: list[list[int]]
    waiting: list[int]
    dependents: list[list[int]]
    members: dict[int, int]
    shape_of: list[int]
    shapes: int


_comm, _instance = attrgetter("comm"), attrgetter("instance")
# the trace's columns a task fixes (the engine adds start_s and end_s); text ones as pandas str
_TASK_COLUMNS = [c for c in COLUMNS if c not in ("start_s", "end_s")]


@dataclass
class TaskGraph:
    """Tasks of the simulated ranks. Stream order is the order of ``tasks``.

    A graph is built, then run: what a run derives from it (:meth:`compiled`,
    :meth:`trace_columns`) is kept for the next run, so tasks must not change once it has
    run (:meth:`add` and :meth:`add_copies` start afresh; a changed copy is a new graph, as
    ``dataclasses.replace`` makes it)."""

    tasks: list[Task] = field(default_factory=list)
    # each a sequence of groups (tuples of ranks): a builder's RankGroups (rows of an array)
    copy_sets: list[Sequence[tuple[int, ...]]] = field(default_factory=list)
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def add(self, task: Task) -> int:
        self.tasks.append(task)
        self._derived.clear()
        return len(self.tasks) - 1

    def add_copies(self, groups: Sequence[tuple[int, ...]]) -> int:
        """Register a set of symmetric groups (a sequence of rank tuples, or
        :class:`~simulator.plan.grid.RankGroups`); returns its index for ``CommSpec.copies``."""
        self.copy_sets.append(groups)
        self._derived.clear()
        return len(self.copy_sets) - 1

    def _kept(self, name: str, make):
        """``make()``, kept while the task list is the same list of the same length."""
        kept = self._derived.get(name)
        if kept is None or kept[0] is not self.tasks or kept[1] != len(self.tasks):
            kept = self._derived[name] = (self.tasks, len(self.tasks), make())
        return kept[2]

    def compiled(self) -> Compiled:
        """The graph validated (:meth:`validate`) and indexed for the engine (:class:`Compiled`)."""
        return self._kept("compiled", self._compile)

    def _compile(self) -> Compiled:
        self.validate()
        tasks = self.tasks
        streams: dict[tuple[int, str], int] = {}
        stream_of = [streams.setdefault((t.rank, t.stream), len(streams)) for t in tasks]
        queue: list[list[int]] = [[] for _ in streams]
        for i, s in enumerate(stream_of):
            queue[s].append(i)
        dependents: list[list[int]] = [[] for _ in tasks]
        for i, t in enumerate(tasks):
            for d in t.deps:
                dependents[d].append(i)
        # comm tasks per instance (C-speed count; a CommSpec is truthy)
        members = Counter(map(_instance, filter(None, map(_comm, tasks))))
        numbers: dict[tuple, int] = {}
        shape_of = [
            -1
            if c is None
            else numbers.setdefault(
                (c.collective, c.group, c.size_bytes, c.algorithm, c.copies), len(numbers)
            )
            for c in map(_comm, tasks)
        ]
        waiting = [len(t.deps) for t in tasks]
        return Compiled(stream_of, queue, waiting, dependents, members, shape_of, len(numbers))

    def trace_columns(self) -> dict[str, object]:
        """Per task, the trace's columns it fixes (all but ``start_s`` and ``end_s``), as
        arrays in task order, and the text ones' integer codes (``<column>_code``): a run's
        trace takes them by task index (:class:`~simulator.trace.Trace`)."""
        return self._kept("columns", self._columns)

    def _columns(self) -> dict[str, object]:
        tasks = self.tasks
        out: dict[str, object] = {}
        for col in _TASK_COLUMNS:
            if col == "bytes":
                values = [c.size_bytes if c else 0.0 for c in map(_comm, tasks)]
            else:
                values = list(map(attrgetter(col), tasks))
            if col in TEXT_COLUMNS:
                out[col] = pd.array(values, dtype="str")
                out[f"{col}_code"] = pd.factorize(out[col])[0]
            elif col in ("flops", "bytes"):
                out[col] = np.array(values, dtype=float)
            else:
                out[col] = np.array(values, dtype=np.int64)
        return out

    def validate(self) -> None:
        """Raise ValueError on dangling or forward dependencies, a comm task without spec, or
        a compute task whose duration is not finite and non-negative."""
        n = len(self.tasks)
        for i, t in enumerate(self.tasks):
            if t.kind != "comm" and not 0.0 <= t.duration_s < math.inf:
                raise ValueError(
                    f"task {t.name!r} on rank {t.rank} has duration {t.duration_s!r} s; "
                    "a duration must be finite and non-negative"
                )
            for d in t.deps:
                if not 0 <= d < n or d == i:
                    raise ValueError(f"task {i} ({t.name}) depends on missing task {d}")
            if t.kind == "comm" and t.comm is None:
                raise ValueError(f"comm task {i} ({t.name}) has no CommSpec")
