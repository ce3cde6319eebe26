"""ZB-1p and ZB-2p: zero-bubble orders found by a greedy search over the passes' durations
(Qi et al. 2024, "Zero Bubble Pipeline Parallelism", sec. 3.2 "Automatic scheduling").

ZB-H1 and ZB-H2 are drawn for forward, input-gradient and weight-gradient passes of equal
length and free communication. Real passes differ (W is shorter than B; the last stage
carries the output layer), and the paper's schedules ZB-1p and ZB-2p are searched for the
measured durations instead, under a cap on the micro-batches a stage may hold: ``p`` (1F1B's
peak) or ``2p``. The search is the paper's heuristic as its authors ship it
(``auto_schedule.py`` of sail-sg/zero-bubble-pipeline-parallelism, which leaves its ILP
refinement off), re-derived here:

1. *Warm-up*: every stage runs micro-batch 0's forward; walking back from the last stage,
   each stage adds the forwards that fit before micro-batch 0's input gradient can reach it
   (memory permitting), at least one fewer than the stage before it.
2. *Steady state*, micro-batch ``i`` = 1 .. m - 1: each stage runs its next forward, then,
   from the last stage back, the input gradient of micro-batch ``i``; before either, a stage
   runs postponed weight-gradient passes while it would otherwise wait for the pass's input
   (and when the memory cap leaves no room).
3. *Cool-down*: the weight-gradient passes left.

Three yes/no choices steer it (allow idling before the first B; let a stage ahead by two
forwards wait for its next B; fill a wait that a W overruns); all eight are tried and the
order whose longest stage span is shortest is kept. The optimizer step does not
synchronise the stages (the paper's post-validation), so consecutive steps overlap and the
step time is the longest stage span, as with ZB-H2.

Where this differs from the authors' code:

- *Memory* counts a micro-batch's activations from its forward to its weight gradient, as the
  memory ledger does (:func:`~simulator.pipelines.base.peak_held`). The authors' code credits
  what B frees: with their analytic split (mem_f 34h + 5as, mem_w -32h) a micro-batch whose
  B is done weighs 43% of one in flight for the 6.2B model, so up to about 2.3 times as many
  W's may wait under the same cap. Ours is the stricter cap.
- *Warm-up clamp*: a stage never plans more warm-up forwards than the stage before it. The
  authors' loop stops trimming once a stage's forwards reach m and can then run a forward
  before the stage before it has (an order that fails their own checks or deadlocks: 1,548 of
  24,000 random cases in review); elsewhere the orders are identical (22,452 of 22,452).
- *A setting that gets stuck under the cap* is skipped, the other seven kept; theirs raises.
- *Durations per stage*: one version of their integration collapses the profiled durations
  to their medians ("uniform f/b/w timing for now"); we give each stage its own.

Durations come from :meth:`ZBAuto.with_times` (the plan estimates them from the compute
model); without them every pass takes one unit and communication none. Tests pin the
search to the authors' heuristic on uneven stages (orders and spans transcribed from it).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from simulator.infeasible import InfeasibleError
from simulator.pipelines.base import Item, PipelineSchedule


@dataclass(frozen=True)
class PassTimes:
    """Durations (s) of one micro-batch's forward ``f``, input-gradient ``b`` and weight-gradient
    ``w`` pass on each stage, and ``comm``: an activation's (or gradient's) trip to the next
    stage (s). Each finite and non-negative (ValueError otherwise): the search's arithmetic
    (a stage's waiting only grows) assumes it."""

    f: tuple[float, ...]
    b: tuple[float, ...]
    w: tuple[float, ...]
    comm: float = 0.0

    def __post_init__(self) -> None:
        for name in ("f", "b", "w", "comm"):
            value = getattr(self, name)
            for x in value if isinstance(value, tuple) else (value,):
                if not 0.0 <= x < math.inf:
                    raise ValueError(
                        f"pass time {name} = {x!r} s: each must be finite and non-negative"
                    )

    @staticmethod
    def uniform(p: int) -> PassTimes:
        """Every pass one unit long, communication free (the hand-drawn schedules' case)."""
        return PassTimes((1.0,) * p, (1.0,) * p, (1.0,) * p)


# Stages x micro-batches up to which the order is searched: the eight runs take about 25 us
# per pass slot on a quiet machine (43 us in a loaded hour; state in lists per kind), about
# 3.3 s at this bound. The zero-bubble paper's largest run is 32 x 512 = 16,384.
MAX_SEARCHED = 2**17


_F, _B, _W = 0, 1, 2  # a pass kind's index into _Search's per-kind lists
_KIND = ("F", "B", "W")


class _Search:
    """One run of the greedy heuristic (module doc) with one setting of its three choices.

    Its state is kept per kind (F, B, W: 0, 1, 2) in lists indexed by stage, each pass's end
    in a list per (kind, stage) indexed by micro-batch (a pass is placed after its
    predecessors of that kind, so its micro-batch is that list's length): each run places
    3 x p x m passes (the eight runs 393,216 for 32 stages and 512 micro-batches), and
    lists are about 1.65x as fast as the tuple-keyed dicts they replace, with the same
    arithmetic in the same order (the same orders and spans to the bit)."""

    def __init__(self, p: int, m: int, t: PassTimes, cap: int, choices: tuple[bool, ...]):
        self.p, self.m, self.cap = p, m, cap
        self.idle_before_first_b, self.favour_b, self.fill_overrun = choices
        self.cost = (t.f, t.b, t.w)
        self.comm = t.comm
        self.count = ([0] * p, [0] * p, [0] * p)
        # end[kind][stage][micro-batch]: when that pass ends (s)
        self.end: tuple[list[list[float]], ...] = tuple([[] for _ in range(p)] for _ in range(3))
        self.free = [0.0] * p  # when each stage's last placed pass ends
        self.held = [0] * p  # micro-batches between their F and their W
        self.idle = [0.0] * p  # each stage's waiting after its first forward
        self.max_idle = 0.0  # max(idle): entries only grow (finite times: PassTimes)
        self.orders: list[list[Item]] = [[] for _ in range(p)]

    def put(self, j: int, kind: int) -> None:
        """Place stage ``j``'s next pass of ``kind`` (_F, _B or _W) as early as its inputs
        allow: a forward after the stage before it has sent that micro-batch's activation,
        an input gradient after the stage after it has sent its gradient, a weight gradient
        when the stage is free."""
        count = self.count[kind]
        i = count[j]
        cost = self.cost[kind][j]
        free = self.free
        earliest = free[j] + cost  # its end if nothing holds it back
        end = earliest
        if kind == _F:
            if j > 0:
                end = max(end, self.end[_F][j - 1][i] + self.comm + cost)
            self.held[j] += 1
        elif kind == _B:
            if j < self.p - 1:
                end = max(end, self.end[_B][j + 1][i] + self.comm + cost)
        else:
            self.held[j] -= 1
        if self.count[_F][j]:  # waiting counts from the stage's first forward on
            idle = self.idle
            stage_idle = idle[j] = idle[j] + (end - earliest)
            if stage_idle > self.max_idle:
                self.max_idle = stage_idle
        free[j] = end
        self.end[kind][j].append(end)
        count[j] = i + 1
        self.orders[j].append((_KIND[kind], 0, i))

    def pending_w(self, j: int) -> bool:
        return self.count[_W][j] < self.count[_B][j]

    def fill_until(self, j: int, arrival: float) -> None:
        """Run postponed W's on stage ``j`` while it would wait for an input due at
        ``arrival``; one that overruns it too when the wait would be the longest of any
        stage's, or when ``fill_overrun`` says so."""
        w = self.cost[_W][j]
        while self.pending_w(j) and self.free[j] + w <= arrival:
            self.put(j, _W)
        if self.pending_w(j) and self.free[j] < arrival:
            affordable = arrival - self.free[j] <= self.max_idle - self.idle[j]
            if self.fill_overrun or not affordable:
                self.put(j, _W)

    def make_room(self, j: int) -> None:
        """W's until stage ``j`` may take one more micro-batch under the cap."""
        while self.held[j] + 1 > self.cap:
            if not self.pending_w(j):
                raise InfeasibleError(f"a cap of {self.cap} micro-batches leaves stage {j} stuck")
            self.put(j, _W)

    def warm_up(self) -> None:
        p, m, f = self.p, self.m, self.cost[_F]
        for j in range(p):
            self.put(j, _F)
        extra = [0] * p
        b_done = self.end[_F][p - 1][0] + self.cost[_B][p - 1]
        for j in range(p - 2, -1, -1):
            busy, held = self.free[j], self.held[j]
            while self.count[_F][j] + extra[j] < m and held + 1 <= self.cap:
                due = b_done + self.comm
                if busy + f[j] > due if self.idle_before_first_b else busy >= due:
                    break
                busy, held, extra[j] = busy + f[j], held + 1, extra[j] + 1
            b_done = max(busy, b_done + self.comm) + self.cost[_B][j]
        for j in range(1, p):  # a stage can only forward what the stage before it has
            while extra[j] > 0 and extra[j] >= extra[j - 1] and 1 + extra[j] < m:
                extra[j] -= 1
            extra[j] = min(extra[j], extra[j - 1])
        for j in range(p):
            for _ in range(extra[j]):
                self.put(j, _F)
        for j in range(p - 1, -1, -1):
            self.put(j, _B)

    def wants_forward(self, j: int) -> bool:
        """Whether stage ``j`` runs a forward this round (step 2 of the module doc)."""
        p, count, cost = self.p, self.count, self.cost
        if count[_F][j] >= self.m:
            return False
        if not (self.favour_b and j + 1 < p and count[_F][j] >= count[_F][j + 1] + 2):
            return True
        b_due = self.free[j + 1] + cost[_F][j + 1] + cost[_B][j + 1] + self.comm
        if self.free[j] >= b_due:
            return False
        room, held = 0.0, self.held[j] + 1
        w = count[_W][j]
        while held > self.cap and w < count[_B][j]:
            room, held, w = room + cost[_W][j], held - 1, w + 1
        if self.free[j] + cost[_F][j] + room <= b_due:
            return True
        return b_due - self.free[j] > self.max_idle - self.idle[j]

    def steady(self) -> None:
        p = self.p
        end_f, end_b, count_f = self.end[_F], self.end[_B], self.count[_F]
        for i in range(1, self.m):
            want = [self.wants_forward(j) for j in range(p)]
            for j in range(p - 2, -1, -1):
                want[j] = want[j] and want[j + 1]
            for j in range(p):
                if want[j]:
                    self.make_room(j)
                    if j > 0:
                        self.fill_until(j, end_f[j - 1][count_f[j]] + self.comm)
                    self.put(j, _F)
            for j in range(p - 1, -1, -1):
                if j + 1 < p:
                    self.fill_until(j, end_b[j + 1][i] + self.comm)
                if j == 0 and count_f[0] == self.m:
                    while self.pending_w(0):
                        self.put(0, _W)
                self.put(j, _B)

    def run(self) -> tuple[list[list[Item]], float]:
        """(each stage's order, the longest stage span in the durations' unit)."""
        self.warm_up()
        self.steady()
        for j in range(self.p):
            while self.count[_W][j] < self.m:
                self.put(j, _W)
        last = self.m - 1
        span = max(
            self.end[_W][j][last] - self.end[_F][j][0] + self.cost[_F][j] for j in range(self.p)
        )
        return self.orders, span


Orders = tuple[tuple[Item, ...], ...]


@lru_cache(maxsize=64)
def search(p: int, m: int, times: PassTimes, cap: int) -> tuple[Orders, float]:
    """The best of the heuristic's eight runs: (each stage's order, its longest span)."""
    if len(times.f) != p or len(times.b) != p or len(times.w) != p:
        raise ValueError(f"pass times for {len(times.f)} stages given to a {p}-stage pipeline")
    best = None
    for choices in itertools.product((True, False), repeat=3):
        try:
            orders, span = _Search(p, m, times, cap, choices).run()
        except ValueError:
            continue  # this setting got stuck under the cap; another may not
        if best is None or span < best[1]:
            best = (tuple(tuple(o) for o in orders), span)
    if best is None:
        raise InfeasibleError(f"no order of {m} micro-batches on {p} stages keeps {cap} in flight")
    return best


class ZBAuto(PipelineSchedule):
    """ZB-1p (``pending`` = 1) or ZB-2p (2): at most ``pending`` x p micro-batches in flight
    per stage, the order searched for ``times`` (:class:`PassTimes`; None: unit passes)."""

    split_backward = True
    overlapping_steps = True
    needs_times = True  # the plan gives the passes' durations (:meth:`with_times`)

    def __init__(self, name: str, pending: int, times: PassTimes | None = None):
        self.name = name
        self.pending = pending
        self.times = times
        self.description = (
            f"zero-bubble {pending}p: searched for the passes' durations, "
            f"up to {pending} x pp micro-batches in flight"
        )

    def with_times(self, times: PassTimes) -> ZBAuto:
        """This schedule searched for ``times``."""
        return ZBAuto(self.name, self.pending, times)

    def _key(self) -> tuple:
        return (self.name, self.pending, self.times)

    def __eq__(self, other) -> bool:
        return isinstance(other, ZBAuto) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def check(self, p: int, m: int, v: int) -> str | None:
        if v > 1:
            return f"{self.name} runs one chunk per stage: set virtual_stages: 1"
        if p * m > MAX_SEARCHED:
            return (
                f"{self.name} searches its order over pp x micro-batches = {p * m:,} passes per "
                f"kind, more than {MAX_SEARCHED:,} (several seconds of search each time the plan "
                "is made): use fewer micro-batches, or zb-h1 / zb-h2"
            )
        return None

    def orders(self, p: int, m: int, v: int) -> list[list[Item]]:
        return [list(o) for o in self._searched(p, m)]

    def order(self, p: int, r: int, m: int, v: int) -> list[Item]:
        return list(self._searched(p, m)[r])

    def _searched(self, p: int, m: int) -> Orders:
        return search(p, m, self.times or PassTimes.uniform(p), self.pending * p)[0]
