"""Progress of a long command on stderr, stage by stage: ``[2/3] simulating the step on
16,384 GPUs ... 3.1 s``. On when stderr is a terminal (or when asked), silent otherwise, so
that a log file or a pipe gets the log lines alone.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path


class Stages:
    """``total`` numbered stages; ``enabled`` None means: when stderr is a terminal."""

    def __init__(self, total: int, enabled: bool | None = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.total = total
        self.done = 0

    @contextmanager
    def stage(self, what: str):
        """One stage: its line while it runs, its time when it ends (or "failed")."""
        self.done += 1
        line = _Line(self, f"[{self.done}/{self.total}] {what}")
        line.show("...")
        start = time.perf_counter()
        try:
            yield line
        except BaseException:
            line.end("failed")
            raise
        line.end(f"{time.perf_counter() - start:.1f} s")


class _Line:
    def __init__(self, stages: Stages, head: str) -> None:
        self.stages = stages
        self.head = head
        self.items = 0

    def show(self, tail: str) -> None:
        if self.stages.enabled:
            self.stages.stream.write(f"\r{self.head} {tail}\x1b[K")
            self.stages.stream.flush()

    def item(self, path: Path) -> None:
        """A file of this stage is written."""
        self.items += 1
        self.show(f"... {self.items} written ({Path(path).name})")

    def end(self, tail: str) -> None:
        if self.stages.enabled:
            done = f", {self.items} files" if self.items else ""
            self.stages.stream.write(f"\r{self.head}{done}: {tail}\x1b[K\n")
            self.stages.stream.flush()
