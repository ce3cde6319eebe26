"""ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", sec. 6): two model chunks per
stage in a V, zero bubble at 1F1B's activation memory when passes are equal.

Placement: the model is cut into 2p chunks; stage ``r`` holds chunk ``r`` (local chunk 0) and
chunk ``2p - 1 - r`` (local chunk 1), so a micro-batch runs down the stages on chunk 0, turns
on the last stage (its chunk ``p - 1`` hands straight to its own chunk ``p``), and comes back
up on chunk 1; stage 0 holds both the embedding and the output layer. With ``2p k - 2``
layers the end chunks hold one layer fewer, as the authors' ``--allow-padding-num-layers``
does for V schedules (their ``get_offset``: the first and last model chunks lose one layer
each, so a one-layer-per-chunk model leaves stage 0 the embedding and the output layer
alone).

Order: PyTorch's ``ScheduleZBVZeroBubble`` (``torch.distributed.pipelining``), the paper's
hand-drawn pattern for equal passes: on stage ``r``, ``2(p - r) - 1`` forwards of chunk 0,
``r`` pairs of chunk-1 and chunk-0 forwards, ``p - r`` rounds of a chunk-1 forward with its
input and weight gradients, then the steady state (a chunk-0 forward, B and W; a chunk-1
forward, B and W) and a cool-down of ``r`` B pairs, ``p - r`` chunk-0 B-W pairs and the
postponed W's. The authors' own runs search the order for measured durations
(``v_schedule.py``); this one is fixed, so unequal passes leave some bubble. As ZB-H2, the
optimizer's synchronisation is dropped (post-validation), so steps overlap.
"""

from __future__ import annotations

from simulator.infeasible import InfeasibleError
from simulator.pipelines.base import Hop, Item, PipelineSchedule, end_chunk_sizes


class ZBV(PipelineSchedule):
    name = "zb-v"
    description = "zero-bubble V: two chunks per stage in a V, 1F1B's memory"
    split_backward = True
    overlapping_steps = True

    def chunks_per_stage(self, v: int) -> int:
        return 2

    def model_chunks(self, p: int, v: int) -> int:
        return 2 * p

    def model_chunk(self, p: int, v: int, stage: int, chunk: int) -> int:
        return stage if chunk == 0 else 2 * p - 1 - stage

    def next_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        if chunk == 0:
            return (stage + 1, 0) if stage < p - 1 else (stage, 1)
        return (stage - 1, 1) if stage > 0 else None

    def prev_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        if chunk == 0:
            return (stage - 1, 0) if stage > 0 else None
        return (stage + 1, 1) if stage < p - 1 else (stage, 0)

    def chunk_sizes(
        self, layers: int, p: int, v: int, first: int | None, last: int | None
    ) -> list[int]:
        """Layers of the ``2p`` model chunks: even, or with ``2p k - 2`` layers the first and
        last chunk one fewer (the authors' padding); ``first``/``last``: the first and last
        model chunk's layers, the others splitting the rest evenly."""
        n = 2 * p
        if first is None and last is None:
            if layers % n == 0:
                return [layers // n] * n
            if (layers + 2) % n == 0 and layers + 2 >= n:
                k = (layers + 2) // n
                return [k - 1, *[k] * (n - 2), k - 1]
            raise InfeasibleError(
                f"{layers} layers do not split into {n} equal chunks (2 per stage), nor into "
                f"{n} chunks with the end ones a layer lighter (2 x pp x k - 2 layers)"
            )
        return end_chunk_sizes(layers, n, first, last)

    def check(self, p: int, m: int, v: int) -> str | None:
        if v > 1:
            return "zb-v holds two chunks per stage by itself: leave virtual_stages at 1"
        if p < 2:
            return "zb-v needs pp >= 2"
        return None

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        n = max(2 * p - 1, m)  # PyTorch fills the pattern to this many, then drops the extra
        count = {(k, c): 0 for k in "FBW" for c in (0, 1)}
        out: list[Item] = []

        def put(*passes: str) -> None:
            """Each pass as kind and local chunk ("F1"): the chunk's next of that kind."""
            for x in passes:
                kind, c = x[0], int(x[1])
                j = count[(kind, c)]
                count[(kind, c)] = j + 1
                if j < m:
                    out.append((kind, c, j))

        put(*["F0"] * (2 * (p - r) - 1))
        put(*["F1", "F0"] * r)
        put(*["F1", "B1", "W1"] * (p - r))
        while count[("F", 1)] < count[("F", 0)] or count[("F", 0)] < n:
            if count[("F", 0)] < n:
                put("F0")
            put("B0", "W0", "F1", "B1", "W1")
        put(*["B0", "B1"] * r)
        put(*["B0", "W0"] * (p - r))
        put(*["W1"] * (count[("B", 1)] - count[("W", 1)]))
        put(*["W0"] * (count[("B", 0)] - count[("W", 0)]))
        return out
