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
    arrays indexed by task (numpy, or pandas extension arrays with ``take``), called once by
    :meth:`to_frame`."""

    records: list[TraceRecord | tuple] = field(default_factory=list)
    runs: list[tuple[int, float, float]] = field(default_factory=list)
    task_columns: Callable[[], dict] | None = field(default=None, repr=False)

    def add(self, record: TraceRecord) -> None:
        self.records.append(record)

    def to_frame(self) -> pd.DataFrame:
        if not self.runs:
            return pd.DataFrame.from_records(self.records, columns=COLUMNS)
        if self.records or self.task_columns is None:
            raise ValueError("a trace holds records or runs over task columns, not both")
        n = len(self.runs)
        runs = np.fromiter(chain.from_iterable(self.runs), float, 3 * n).reshape(n, 3)
        task = runs[:, 0].astype(np.int64)
        columns = self.task_columns()
        data = {}
        for col in COLUMNS:
            if col == "start_s":
                data[col] = runs[:, 1]
            elif col == "end_s":
                data[col] = runs[:, 2]
            else:
                data[col] = columns[col].take(task)
        return pd.DataFrame(data)

    def __len__(self) -> int:
        return len(self.records) + len(self.runs)
