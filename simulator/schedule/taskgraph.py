"""TaskGraph: per-rank ordered tasks on named streams, with dependencies. Plain data.

A stream runs its tasks in list order, one at a time (a CUDA stream). A task starts when it is
the next on its stream, the stream is free, and every task it depends on has ended. A
communication task is one rank's part of a collective: the members' tasks that share
``CommSpec.instance`` start together once all are ready (a rendezvous) and end together when
the engine has moved the bytes. Compute durations are fixed here; communication durations are
the engine's to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple


class CommSpec(NamedTuple):
    """One rank's part of a collective.

    ``group``: member ranks in collective order; ``size_bytes``: the buffer S (DESIGN.md);
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
    kind: Literal["compute", "comm"]
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


@dataclass
class TaskGraph:
    """Tasks of the simulated ranks. Stream order is the order of ``tasks``."""

    tasks: list[Task] = field(default_factory=list)
    copy_sets: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)

    def add(self, task: Task) -> int:
        self.tasks.append(task)
        return len(self.tasks) - 1

    def add_copies(self, groups: tuple[tuple[int, ...], ...]) -> int:
        """Register a set of symmetric groups; returns its index for ``CommSpec.copies``."""
        self.copy_sets.append(groups)
        return len(self.copy_sets) - 1

    def validate(self) -> None:
        """Raise ValueError on dangling or forward dependencies, or a comm task without spec."""
        n = len(self.tasks)
        for i, t in enumerate(self.tasks):
            for d in t.deps:
                if not 0 <= d < n or d == i:
                    raise ValueError(f"task {i} ({t.name}) depends on missing task {d}")
            if t.kind == "comm" and t.comm is None:
                raise ValueError(f"comm task {i} ({t.name}) has no CommSpec")
