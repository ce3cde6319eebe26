"""The flat record of what ran where and when, and its recorder.

Every stage may import this module (DESIGN.md): the engine writes records, metrics and reports
read them. Records are buffered as tuples and become a pandas DataFrame in one call.

Columns: rank, stream, kind, phase, name, layer, microbatch, start_s, end_s, flops, bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

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
    (the engine's, one per task, cheaper to make)."""

    records: list[TraceRecord | tuple] = field(default_factory=list)

    def add(self, record: TraceRecord) -> None:
        self.records.append(record)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.records, columns=COLUMNS)

    def __len__(self) -> int:
        return len(self.records)
