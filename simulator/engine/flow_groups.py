"""The flow network's batches in flight: a submitted batch (:class:`Batch`) and its flow
classes' bytes left and rates (:class:`FlowGroup`), advanced between re-ratings by
:class:`~simulator.engine.network.FlowNetwork`."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from simulator.engine.links import FlowClass

# Classes from which a group keeps bytes left and rates as numpy arrays, not lists: the
# 128-class data-parallel rings of the 405B step are advanced 110K times (12M class updates);
# the element-wise float operations are the same either way, so the bits are too.
VECTOR_CLASSES = 64


class Batch:
    """A submitted batch: its callback, classes still moving bytes, and when its last tail
    ends (s)."""

    __slots__ = ("on_done", "pending", "end")

    def __init__(self, on_done: Callable[[], None], pending: int, end: float):
        self.on_done = on_done
        self.pending = pending
        self.end = end


class FlowGroup:
    """The flow classes of one batch, in flight: bytes left ``rem`` as of time ``t``, rates
    (B/s; 0 once a class is through), and the group's next ``finish`` time (s).

    Plain lists, not arrays: most batches hold 1-8 classes, where numpy's per-call overhead
    costs more than the arithmetic (the same IEEE operations either way); from
    ``VECTOR_CLASSES`` classes on (``vector``), ``rem``, ``tot`` and ``rate`` are arrays.

    ``key`` (a small int) names the group's classes: the same for a phase issued again when
    every class has a pattern (then rates may be reused), fresh otherwise (see
    :meth:`~simulator.engine.network.FlowNetwork._key`).
    """

    __slots__ = (
        "batch", "classes", "key", "seq", "version", "active", "alive", "n_alive",
        "rem", "tot", "rate", "t", "finish", "tail", "vector", "lone", "later",
    )  # fmt: skip

    def __init__(
        self,
        batch: Batch,
        classes: list[FlowClass],
        sizes: list[float],
        seq: int,
        key: int,
        now: float,
        tail: float,
    ):
        self.batch = batch
        self.tail = tail
        self.classes = classes
        self.key = key
        self.seq = seq
        self.version = 0
        self.active = True
        n = len(classes)
        self.alive = [True] * n
        self.n_alive = n
        self.vector = n >= VECTOR_CLASSES
        if self.vector:
            self.rem = np.array(sizes, dtype=float)
            self.tot = self.rem.copy()
            self.rate = np.zeros(n)
        else:
            self.rem = sizes
            self.tot = sizes  # never changed in place: advance makes a new rem
            self.rate = [0.0] * n
        self.t = now
        self.finish = math.inf
        self.lone = False  # ends on its own timer, off the heap (LonePath.rate_alone)
        self.later = None  # (classes, on_done, scale) while a lone group waits to start

    def restart(
        self, on_done: Callable[[], None], classes: list[FlowClass], sizes: list[float],
        seq: int, now: float, tail: float,
    ) -> None:  # fmt: skip
        """This group, ended lone and untouched (its key, classes' links and ``alive`` as
        made), as ``FlowGroup`` would make it for a new batch of the same key: the same
        patterns, but the batch's own sizes (another scale) and tail (another protocol's
        latency floor) (LonePath.submit_later)."""
        batch = self.batch
        batch.on_done, batch.pending, batch.end = on_done, len(classes), now
        self.classes, self.tail, self.seq, self.t = classes, tail, seq, now
        self.active, self.n_alive = True, len(classes)
        if self.vector:
            self.rem = np.array(sizes, dtype=float)
            self.tot = self.rem.copy()
        else:
            self.rem = self.tot = sizes

    def live(self) -> list[int]:
        """Indices of the classes still in flight."""
        return [k for k, a in enumerate(self.alive) if a]

    def signature(self):
        """Which of its classes are still in flight, as a hashable (None: all)."""
        return None if self.n_alive == len(self.classes) else tuple(self.alive)

    def advance(self, now: float) -> None:
        """Move ``rem`` to ``now`` at the current rates."""
        dt = now - self.t
        if dt:
            if self.vector:
                self.rem = self.rem - self.rate * dt
            else:
                self.rem = [r - q * dt for r, q in zip(self.rem, self.rate)]  # noqa: B905
        self.t = now
