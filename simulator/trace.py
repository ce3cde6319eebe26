"""The flat record of what ran where and when, and its recorder.

Every stage may import this module (DESIGN.md): the engine writes records, metrics and reports
read them. Records are buffered as tuples and become a pandas DataFrame in one call.

The engine records less: per task that ended, ``(task index, start s, end s)`` in ``runs``;
the rest of a record is the task's, fixed before the run, in ``task_columns`` (arrays in task
order, :meth:`~simulator.schedule.taskgraph.TaskGraph.trace_columns`, made once per graph).
The frame takes them by index: the same rows, in the same order, as whole records would give,
at a fraction of the cost per task (three values to record, not eleven).

Columns: rank, stream, kind, phase, name, layer, microbatch, start_s, end_s, flops, bytes.
"""

from __future__ import annotations

from collections.abc import Callable
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


def rows_array(rows: list[tuple], width: int) -> np.ndarray:
    """Tuples of ``width`` numbers as an (n, width) float array, in one pass (integers exact
    below 2**53): the engine's runs, its memory events."""
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


@dataclass
class Trace:
    """Records in the order they ended: :class:`TraceRecord` or plain tuples of its fields
    (``records``), or the engine's ``runs`` over ``task_columns`` (module doc); not both.

    ``task_columns``: a function giving the columns other than ``start_s`` and ``end_s`` as
    arrays indexed by task (numpy, or pandas extension arrays with ``take``), and each text
    column's integer codes as ``<column>_code``; called by :meth:`to_frame`."""

    records: list[TraceRecord | tuple] = field(default_factory=list)
    runs: list[tuple[int, float, float]] = field(default_factory=list)
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
        runs = rows_array(self.runs, 3)
        return runs[:, 0].astype(np.int64), runs[:, 1], runs[:, 2]

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
