"""DualPipe (DeepSeek-V3 technical report, sec. 3.2.1, Fig. 5 and Table 2).

A bidirectional pipeline: micro-batches are fed from both ends at once. Rank ``r`` of ``p``
(even) holds two model chunks, ``r`` for the forward direction (local chunk 0) and
``p - 1 - r`` for the reverse direction (local chunk 1), so each rank keeps two copies' worth of
parameters, and rank 0 as rank ``p - 1`` holds both the embedding and the output layer. Half
of the ``m`` micro-batches (``m`` even, ``m >= 2p``) go each way: direction 0 numbers them
``0 .. m/2 - 1``, direction 1 ``m/2 .. m - 1``.

The order is the reference implementation's eight phases (github.com/deepseek-ai/DualPipe,
``DualPipe.step``): nF0, nF0F1, nB1W1F1 (zero bubble), the main nF0B1F1B0 phase whose
forward-backward pairs overlap (one chunk's compute hides the other's all-to-all), nB1F1B0,
nB1B0 (the second half with W deferred), nWB0 and nW. Deferred W's run first in, first out.
The report gives a bubble of (p/2 - 1)(T_F&B + T_B - 3 T_W) and p + 1 chunks of activations.
"""

from __future__ import annotations

from collections import deque

from simulator.infeasible import InfeasibleError
from simulator.pipelines.base import (
    Hop,
    Item,
    Overlapped,
    Pass,
    PipelineSchedule,
    end_chunk_sizes,
)


class DualPipe(PipelineSchedule):
    name = "dualpipe"
    description = "DeepSeek-V3 bidirectional pipeline with overlapped forward-backward chunks"
    split_backward = True

    def chunks_per_stage(self, v: int) -> int:
        return 2

    def model_chunks(self, p: int, v: int) -> int:
        return p

    def model_chunk(self, p: int, v: int, stage: int, chunk: int) -> int:
        return stage if chunk == 0 else p - 1 - stage

    def next_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        nxt = stage + 1 if chunk == 0 else stage - 1
        return (nxt, chunk) if 0 <= nxt < p else None

    def prev_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        prv = stage - 1 if chunk == 0 else stage + 1
        return (prv, chunk) if 0 <= prv < p else None

    def chunk_sizes(
        self, layers: int, p: int, v: int, first: int | None, last: int | None
    ) -> list[int]:
        """Layers of each of the ``p`` model chunks; ``first``/``last`` set the first and last
        chunk's and the others split the rest evenly."""
        if first is None and last is None:
            if layers % p:
                raise InfeasibleError(f"{layers} layers do not split into {p} equal chunks")
            return [layers // p] * p
        return end_chunk_sizes(layers, p, first, last)

    def check(self, p: int, m: int, v: int) -> str | None:
        if v > 1:
            return "dualpipe holds two chunks per stage by itself: leave virtual_stages at 1"
        if p < 2 or p % 2:
            return f"dualpipe needs an even number of pipeline stages (pp = {p})"
        if m % 2 or m < 2 * p:
            return f"dualpipe needs an even number of micro-batches >= 2 pp = {2 * p} (got {m})"
        return None

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return _DualPipeOrder(p, r, m).build()


class _DualPipeOrder:
    """One rank's order, following the reference implementation's phases."""

    def __init__(self, p: int, r: int, m: int):
        self.p, self.half, self.hm = p, p // 2, m // 2
        self.hr = min(r, p - 1 - r)  # distance from the nearer end
        self.second = int(r >= p // 2)  # the second half swaps the phases' directions
        self.next = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0}
        self.deferred: deque[Pass] = deque()
        self.out: list[Item] = []

    def _take(self, kind: str, phase: int) -> Pass:
        d = phase ^ self.second
        j = self.next[(kind, d)]
        self.next[(kind, d)] = j + 1
        return (kind, d, j + d * self.hm)

    def forward(self, phase: int) -> None:
        self.out.append(self._take("F", phase))

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        b = self._take("B", phase)
        self.out.append(b)
        w = ("W", b[1], b[2])
        self.deferred.append(w) if zero_bubble else self.out.append(w)

    def weight(self) -> None:
        self.out.append(self.deferred.popleft())

    def forward_backward(self, phase0: int, phase1: int) -> None:
        f, b = self._take("F", phase0), self._take("B", phase1)
        self.out += [Overlapped(f, b), ("W", b[1], b[2])]

    def build(self) -> list[Item]:
        half, hr = self.half, self.hr
        middle = hr == half - 1
        for _ in range((half - hr - 1) * 2):  # 1: nF0
            self.forward(0)
        for _ in range(hr + 1):  # 2: nF0F1
            self.forward(0)
            self.forward(1)
        for _ in range(half - hr - 1):  # 3: nB1W1F1
            self.backward(1, zero_bubble=True)
            self.weight()
            self.forward(1)
        for i in range(self.hm - self.p + hr + 1):  # 4: nF0B1F1B0
            if i == 0 and middle:  # the reference does not overlap this pair
                self.forward(0)
                self.backward(1)
            else:
                self.forward_backward(0, 1)
            self.forward_backward(1, 0)
        for _ in range(half - hr - 1):  # 5: nB1F1B0
            self.backward(1)
            self.forward_backward(1, 0)
        zb = False
        for i in range(hr + 1):  # 6: nB1B0, the second half with W deferred
            if i == (hr + 1) // 2 and hr % 2 == 1:
                zb = True
            self.backward(1, zb)
            if i == (hr + 1) // 2 and hr % 2 == 0:
                zb = True
            self.backward(0, zb)
        for _ in range(half - hr - 1):  # 7: nWB0
            self.weight()
            self.backward(0, zero_bubble=True)
        for _ in range(hr + 1):  # 8: nW
            self.weight()
        return self.out
