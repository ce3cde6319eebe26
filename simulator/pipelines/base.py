"""The interface every pipeline schedule implements, and what follows from it generically.

A schedule says, for ``p`` stages, ``m`` micro-batches per step and ``v`` (the scenario's
``virtual_stages``):

- how many model chunks each stage holds and which model chunk each one is (placement), so
  the next hop of an activation and where the embedding and the output layer sit follow;
- the order in which each stage runs its passes: forward (F), input-gradient (B) and
  weight-gradient (W) of a (local chunk, micro-batch), or an :class:`Overlapped` pair whose
  forward and backward interleave layer by layer (DualPipe);
- whether W is a pass of its own (zero-bubble schedules) and whether consecutive steps overlap
  (ZB-H2 drops the optimizer's synchronisation).

Activations held at a stage's peak are derived from its order (:func:`peak_held`), not from a
closed form per schedule; the closed forms are the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from simulator.infeasible import InfeasibleError

Pass = tuple[str, int, int]  # (kind "F" | "B" | "W", local chunk, micro-batch)


@dataclass(frozen=True)
class Overlapped:
    """A forward and a backward pass run together, their layers interleaved, so one's
    communication hides under the other's compute (DualPipe's forward-backward chunks)."""

    forward: Pass
    backward: Pass


Item = Pass | Overlapped
Hop = tuple[int, int] | None  # (stage, local chunk), None past the end of the model


def passes(order: Iterable[Item]) -> Iterator[Pass]:
    """The order's passes one by one (an overlapped pair as its forward then its backward)."""
    for item in order:
        if isinstance(item, Overlapped):
            yield item.forward
            yield item.backward
        else:
            yield item


class PipelineSchedule:
    """Base: one chunk per stage, stages in model order, W right after its B."""

    name = ""
    description = ""
    split_backward = False  # W runs as a pass of its own
    overlapping_steps = False  # consecutive steps overlap: the step time is a stage's span
    needs_times = False  # ordered by the passes' durations (:meth:`with_times`)

    def with_times(self, times) -> PipelineSchedule:
        """This schedule ordered for ``times`` (a
        :class:`~simulator.pipelines.zb_auto.PassTimes`): itself unless :attr:`needs_times`."""
        return self

    # -- placement -------------------------------------------------------------------------
    def chunks_per_stage(self, v: int) -> int:
        return 1

    def model_chunks(self, p: int, v: int) -> int:
        """Number of distinct model chunks (the layers are cut into this many pieces)."""
        return p * self.chunks_per_stage(v)

    def model_chunk(self, p: int, v: int, stage: int, chunk: int) -> int:
        """Which model chunk local ``chunk`` of ``stage`` holds (Megatron: ``chunk p + stage``)."""
        return chunk * p + stage

    def next_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        """Where local ``chunk`` of ``stage`` sends its output activation."""
        k = self.model_chunk(p, v, stage, chunk) + 1
        return None if k >= self.model_chunks(p, v) else (k % p, k // p)

    def prev_hop(self, p: int, v: int, stage: int, chunk: int) -> Hop:
        """Where local ``chunk`` of ``stage`` sends its input gradient."""
        k = self.model_chunk(p, v, stage, chunk) - 1
        return None if k < 0 else (k % p, k // p)

    def chunk_sizes(
        self, layers: int, p: int, v: int, first: int | None, last: int | None
    ) -> list[int]:
        """Layers of each model chunk, in model order. ``first``/``last`` give the first and
        last stage that many layers in all (Megatron-LM's
        ``--decoder-first/last-pipeline-num-layers``), the middle stages split the rest evenly,
        and each stage splits its layers over its chunks, the lighter chunk next to the
        embedding (first stage) or the output layer (last stage). An end stage may hold one
        layer fewer than its chunks: its chunk next to the embedding (or the output layer)
        then holds that alone, as in the Llama 3 405B run (Llama 3 paper sec. 3.3.2: "the
        first model chunk on the first stage has only the embedding, and the last model chunk
        on the last stage has only output projection and loss calculation"). Raises
        ValueError."""
        c = self.chunks_per_stage(v)
        if first is None and last is None:
            if layers % (p * c):
                raise InfeasibleError(
                    f"{layers} layers do not split into {p} stages x {c} chunks = {p * c} "
                    "equal chunks"
                )
            return [layers // (p * c)] * (p * c)
        totals = _stage_totals(layers, p, first, last)
        per_stage = []
        for r, total in enumerate(totals):
            base, extra = divmod(total, c)
            end = r == 0 or r == p - 1
            if base == 0 and not (end and total == c - 1):
                raise InfeasibleError(f"stage {r}'s {total} layers do not fill its {c} chunks")
            sizes = [base] * c
            light_first = r == 0 or r < p - 1
            for i in range(extra):
                sizes[c - 1 - i if light_first else i] += 1
            per_stage.append(sizes)
        return [per_stage[k % p][k // p] for k in range(p * c)]

    def chunk_layers(
        self, layers: int, p: int, v: int, first: int | None = None, last: int | None = None
    ) -> dict[tuple[int, int], tuple[int, ...]]:
        """(stage, local chunk) -> its layer indices, consecutive in model-chunk order."""
        sizes = self.chunk_sizes(layers, p, v, first, last)
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        out = {}
        for r in range(p):
            for c in range(self.chunks_per_stage(v)):
                k = self.model_chunk(p, v, r, c)
                out[(r, c)] = tuple(range(starts[k], starts[k] + sizes[k]))
        return out

    # -- order -----------------------------------------------------------------------------
    def steady_period(self, p: int, v: int) -> int | None:
        """Micro-batches per period of the order's steady state: between warm-up and
        cool-down, each stage's order repeats with every micro-batch index raised by this
        much (1F1B: 1), so the simulator may run a few periods and shift them in time
        (:func:`steady_state`). None: no such repetition (the base, GPipe, DualPipe)."""
        return None

    def steady_period_for(self, p: int, m: int, v: int) -> int | None:
        """:meth:`steady_period` with ``m`` micro-batches (a schedule whose order depends on
        ``m`` may repeat for some ``m`` only)."""
        return self.steady_period(p, v)

    def check(self, p: int, m: int, v: int) -> str | None:
        """Why ``p`` stages, ``m`` micro-batches and ``v`` do not suit this schedule, or None."""
        if v > 1:
            return f"virtual_stages = {v} needs schedule: interleaved or flexible-interleaved"
        return None

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        """Stage ``r``'s passes in the order it runs them."""
        raise NotImplementedError

    def orders(self, p: int, m: int, v: int) -> list[list[Item]]:
        return [self.order(p, r, m, v) for r in range(p)]


@dataclass(frozen=True)
class SteadyState:
    """Where an order repeats: micro-batches ``0 .. head - 1`` take part in some stage's
    warm-up, the last ``tail`` in some stage's cool-down, and between them the order repeats
    every ``period`` micro-batches. ``reduced`` micro-batches keep the head, two periods
    and the tail: the fewest that show a period repeating."""

    head: int
    period: int
    tail: int

    @property
    def reduced(self) -> int:
        return self.head + 2 * self.period + self.tail

    def longer_warm_up(self) -> SteadyState:
        """The same period with a warm-up four times as long (whole periods)."""
        q = self.period
        return SteadyState(-(-4 * self.head // q) * q, q, self.tail)

    def doubled_period(self, m: int) -> SteadyState | None:
        """Twice the period and a warm-up up to twice as long (whole new periods), running at
        most half of ``m`` micro-batches and leaving out whole new periods (the tail grown by
        less than one to make it so); None when the warm-up would not grow."""
        q2 = 2 * self.period
        tail = self.tail + (m - self.tail) % q2
        head = min(-(-2 * self.head // q2) * q2, (m // 2 - 2 * q2 - tail) // q2 * q2)
        return SteadyState(head, q2, tail) if head > self.head else None


def steady_state(schedule: PipelineSchedule, p: int, m: int, v: int) -> SteadyState | None:
    """The steady state of ``schedule`` with ``m`` micro-batches, when running the
    :attr:`SteadyState.reduced` count leaves out at least half of them; else None.

    Read off the orders: on each stage, a pass is steady when the pass one period (``q``
    micro-batches' worth of passes) after it, or before it, is the same pass of the micro-batch
    ``q`` on or back, and it comes from the stage's first backward to its last forward
    (before, the stage waits on the pipeline filling; after, on it draining). The head is
    every micro-batch with a pass before a stage's first steady one, and at least the first
    micro-batch; the tail every one with a pass after a stage's last steady one, and at least
    the last; each rounded up to whole periods. That the simulated periods do repeat in time
    is for the simulator to verify."""
    q = schedule.steady_period_for(p, m, v)
    if q is None:
        return None
    head = tail = 0
    for r in range(p):
        seq = list(passes(schedule.order(p, r, m, v)))
        per, rem = divmod(len(seq) * q, m)  # passes in a period
        if rem or per == 0:
            return None
        repeats = [
            i
            for i in range(len(seq) - per)
            if seq[i + per] == (seq[i][0], seq[i][1], seq[i][2] + q)
        ]
        if not repeats or repeats[-1] - repeats[0] != len(repeats) - 1:
            return None  # no steady run, or more than one
        # a stage's passes before its first backward wait on the pipeline filling, and those
        # after its last forward on it draining, whatever their order
        first_b = next(i for i, x in enumerate(seq) if x[0] != "F")
        last_f = max(i for i, x in enumerate(seq) if x[0] == "F")
        first, last = max(repeats[0], first_b), min(repeats[-1] + per, last_f)
        head = max(head, 1 + max((x[2] for x in seq[:first]), default=-1))
        tail = max(tail, m - min((x[2] for x in seq[last + 1 :]), default=m))
    # the first micro-batch starts the gradients (no accumulation) and the last one's
    # backward synchronises them: whatever the order, neither is steady
    head, tail = max(head, 1), max(tail, 1)
    s = SteadyState(-(-head // q) * q, q, -(-tail // q) * q)
    # checking the repetition and writing out the trace cost about what a few micro-batches
    # do: worth it from half the micro-batches left out
    if 2 * s.reduced > m or schedule.check(p, s.reduced, v) is not None:
        return None
    return s


def _stage_totals(layers: int, p: int, first: int | None, last: int | None) -> list[int]:
    if first is None or last is None:
        raise InfeasibleError("give both first_stage_layers and last_stage_layers")
    if p < 2:
        raise InfeasibleError("uneven first/last stages need pp >= 2")
    middle = layers - first - last
    if middle < 0 or (p == 2 and middle) or (p > 2 and (middle <= 0 or middle % (p - 2))):
        raise InfeasibleError(
            f"{layers} layers minus {first} first and {last} last do not split evenly over "
            f"the {p - 2} middle stages"
        )
    mid = [middle // (p - 2)] * (p - 2) if p > 2 else []
    return [first, *mid, last]


def end_chunk_sizes(layers: int, n: int, first: int | None, last: int | None) -> list[int]:
    """Layers of ``n`` model chunks whose first and last hold ``first`` and ``last`` and the
    others split the rest evenly (schedules whose stages hold two chunks: DualPipe, ZB-V);
    with 2 chunks, the two ends are the whole model. Raises InfeasibleError.

    >>> end_chunk_sizes(8, 2, 3, 5), end_chunk_sizes(10, 4, 2, 2)
    ([3, 5], [2, 3, 3, 2])
    """
    if first is None or last is None:
        raise InfeasibleError("give both first_stage_layers and last_stage_layers")
    middle = layers - first - last
    if n == 2:  # no middle chunk: the two ends hold every layer
        if middle:
            raise InfeasibleError(
                f"{layers} layers are not {first} first + {last} last: with 2 chunks the "
                "first and last stage layers must add up to the model's layers"
            )
        return [first, last]
    if n < 3 or middle <= 0 or middle % (n - 2):
        raise InfeasibleError(
            f"{layers} layers minus {first} first and {last} last do not split evenly "
            f"over the {n - 2} middle chunks"
        )
    return [first, *[middle // (n - 2)] * (n - 2), last]


def peak_held(
    order: Iterable[Item],
    weight: Callable[[int], float],
    released_by: str = "W",
) -> float:
    """Peak over the order of the weight held: a chunk's F takes ``weight(chunk)``, its
    ``released_by`` pass gives it back. With weight 1 per chunk this counts in-flight chunks."""
    held = peak = 0.0
    for kind, chunk, _ in passes(order):
        if kind == "F":
            held += weight(chunk)
            peak = max(peak, held)
        elif kind == released_by:
            held -= weight(chunk)
    return peak


def with_deferred_w(fb: list[Pass], m: int, delay: int) -> list[Item]:
    """Insert W_j right after B_{j + delay}; the last ``delay`` W's close the order."""
    out: list[Item] = []
    next_w = 0
    for x in fb:
        out.append(x)
        if x[0] == "B" and x[2] - delay >= 0:
            out.append(("W", x[1], x[2] - delay))
            next_w = x[2] - delay + 1
    return out + [("W", 0, j) for j in range(next_w, m)]


def f_b_order(warm: int, m: int) -> list[Pass]:
    """``warm`` forwards, then one forward one input-gradient, then the remaining B's."""
    warm = min(warm, m)
    out: list[Pass] = [("F", 0, j) for j in range(warm)]
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("B", 0, i)]
    return out + [("B", 0, i) for i in range(m - warm, m)]
