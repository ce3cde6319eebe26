"""The flat record of what ran where and when, and its recorder.

Every stage may import this module (docs/design.md): the engine writes records, metrics and reports
read them. Records are buffered as tuples and become a pandas DataFrame in one call.

The engine records less: per task that ended, ``(task index, start s, end s)`` in ``runs``
(:class:`Runs`, three typed arrays);
the rest of a record is the task's, fixed before the run, in ``task_columns`` (arrays in task
order, :meth:`~simulator.schedule.taskgraph.TaskGraph.trace_columns`, made once per graph).
The frame takes them by index: the same rows, in the same order, as whole records would give,
at a fraction of the cost per task (three values to record, not eleven).

Columns: rank, stream, kind, phase, name, layer, microbatch, start_s, end_s, flops, bytes.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

import numpy as np
import pandas as pd

COLUMNS = [
    "rank",
    "stream",
    "kind",
    "phase",
    "name",
    "layer",
    "microbatch",
    "start_s",
    "end_s",
    "flops",
    "bytes",
]

TEXT_COLUMNS = ("stream", "kind", "phase", "name")


def gpu_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s GPU tasks: without the host stream's launches (kind "host"), which run
    ahead of the GPU and belong to no span, bubble or layer time of its."""
    return frame[frame["kind"] != "host"]


def rows_array(rows: list[tuple] | np.ndarray, width: int) -> np.ndarray:
    """Tuples of ``width`` numbers as an (n, width) float array, in one pass (integers exact
    below 2**53): the engine's memory events; an array is taken as it is."""
    if isinstance(rows, np.ndarray):
        return rows.reshape(-1, width)
    n = len(rows)
    return np.fromiter(chain.from_iterable(rows), float, width * n).reshape(n, width)


class TraceRecord(NamedTuple):
    """One task's execution on one rank's stream; times in seconds, bytes in B."""

    rank: int
    stream: str
    kind: str
    phase: str
    name: str
    layer: int
    microbatch: int
    start_s: float
    end_s: float
    flops: float
    bytes: float


class Runs:
    """The engine's runs, ``(task index, start s, end s)`` per task that ended, in order, as
    three typed arrays (:mod:`array`): appended one value at a time at the cost of a list of
    tuples, read as numpy arrays without a pass over every value (a 158K-task step: 20 ms
    less than ``np.fromiter`` over the tuples)."""

    __slots__ = ("task", "start", "end")

    def __init__(self):
        self.task = array("q")
        self.start = array("d")
        self.end = array("d")

    def append(self, run: tuple[int, float, float]) -> None:
        i, start, end = run
        self.task.append(i)
        self.start.append(start)
        self.end.append(end)

    def __len__(self) -> int:
        return len(self.task)

    def __iter__(self) -> Iterator[tuple[int, float, float]]:
        return zip(self.task, self.start, self.end, strict=True)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(task, start s, end s) as numpy arrays of their own (copies: the runs may grow)."""
        return (
            np.frombuffer(self.task, dtype=np.int64).copy(),
            np.frombuffer(self.start, dtype=float).copy(),
            np.frombuffer(self.end, dtype=float).copy(),
        )


@dataclass
class Trace:
    """Records in the order they ended: :class:`TraceRecord` or plain tuples of its fields
    (``records``), or the engine's ``runs`` over ``task_columns`` (module doc); not both.

    ``task_columns``: a function giving the columns other than ``start_s`` and ``end_s`` as
    arrays indexed by task (numpy, or pandas extension arrays with ``take``), and each text
    column's integer codes as ``<column>_code``; called by :meth:`to_frame`."""

    records: list[TraceRecord | tuple] = field(default_factory=list)
    runs: Runs = field(default_factory=Runs)
    task_columns: Callable[[], dict] | None = field(default=None, repr=False)

    def add(self, record: TraceRecord) -> None:
        self.records.append(record)

    def to_frame(self) -> pd.DataFrame:
        if not self.runs:
            return pd.DataFrame.from_records(self.records, columns=COLUMNS)
        task, start, end = self._run_arrays()
        return self.frame_of(task, start, end)

    def _run_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.records or self.task_columns is None:
            raise ValueError("a trace holds records or runs over task columns, not both")
        return self.runs.arrays()

    def frame_of(
        self,
        task: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        microbatch: np.ndarray | None = None,
        coded: bool = False,
    ) -> pd.DataFrame:
        """The frame of rows ``task`` (indices into the task columns) run from ``start`` to
        ``end`` (s), with ``microbatch`` in place of the tasks' own when given (a repeated
        steady state renumbers them); ``coded``: each text column as its integer codes."""
        columns = self.task_columns()
        data = {}
        for col in COLUMNS:
            if col == "start_s":
                data[col] = start
            elif col == "end_s":
                data[col] = end
            elif col == "microbatch" and microbatch is not None:
                data[col] = microbatch
            else:
                data[col] = columns[f"{col}_code" if coded and col in TEXT_COLUMNS else col].take(
                    task
                )
        return pd.DataFrame(data)

    def coded_frame(self) -> pd.DataFrame:
        """The engine's runs as numbers only: ``task`` (its index), then :data:`COLUMNS` with
        each text column as integer codes (equal codes where the text is equal): for
        analyses that only compare them (the steady state's repetition), cheaper to sort
        and take than text. :meth:`frame_of` turns its ``task`` back into whole rows."""
        task, start, end = self._run_arrays()
        frame = self.frame_of(task, start, end, coded=True)
        frame.insert(0, "task", task)
        return frame

    def __len__(self) -> int:
        return len(self.records) + len(self.runs)
