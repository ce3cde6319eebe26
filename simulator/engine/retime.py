"""Re-timing a simulated step with drawn durations: many steps' variability from one run.

The engine runs a step's :class:`~simulator.schedule.taskgraph.TaskGraph` once; its runs fix
every task's duration (a compute task's as the engine stretched it under overlapped
communication, a collective's under the network's contention). :func:`retime` takes that
record as a dependency graph - each task after its dependencies and its stream predecessor,
a collective's members together once all are ready - and computes the step again with each
duration multiplied by a drawn factor, for many columns at once (numpy vectors: steps x
replicas). A factor of 1 everywhere gives back the engine's times: a task's wait that its
predecessors do not explain (none in a graph the engine runs exactly) is kept as a lag.

What re-timing keeps fixed: each collective's duration (drawn factors aside) and so the
network's contention as the one run met it; a collective that a slow rank delays into
another's way does not slow both here. The engine's answer for one perturbed step (a
straggler in :func:`simulator.api.run`) has that; the distribution of many steps is this.

Columns and copies. In symmetric mode a simulated rank stands for its data-parallel
replicas and its tensor/context-parallel peers (:func:`simulator.plan.plan.simulated_ranks`).
The columns are ``steps x replicas``: replica ``k``'s copy of the simulated ranks in its
own column, and a collective whose group spans replicas (data-parallel gradient
reduction, an expert-parallel all-to-all across replicas) starts in each of its blocks of
columns at the latest of them. The peers a simulated rank stands for within its replica meet
at its tensor-parallel collectives, so each compute task takes the slowest of their draws
(:class:`Draws`); in full mode every rank is simulated and stands for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.schedule.taskgraph import TaskGraph

COMPUTE, COMM, HOST = 0, 1, 2


@dataclass(frozen=True)
class Retimable:
    """A simulated step as a dependency graph of nodes in an order that respects it.

    A node is one task, or one collective's simulated members (they start and end
    together). Per node: ``tasks`` (graph indices), ``preds`` (node indices), ``lag`` (s: the
    recorded start minus the latest predecessor's recorded end), ``duration`` (s, recorded),
    ``kind`` (COMPUTE, COMM, HOST), ``rank`` (a member's simulated rank) and ``block`` (a
    collective's number of replicas: 1 within a replica). ``member_preds``: per node with
    several members, each member's rank and predecessors (who arrived last); None for one.
    ``gpu_end``: the nodes whose end may end the step (GPU tasks, not the host's launches);
    ``recorded_end`` (s): their latest recorded end."""

    tasks: list[tuple[int, ...]]
    preds: list[tuple[int, ...]]
    member_preds: list[tuple[tuple[int, tuple[int, ...]], ...] | None]
    lag: np.ndarray
    duration: np.ndarray
    kind: np.ndarray
    rank: np.ndarray
    block: np.ndarray
    gpu_end: np.ndarray
    recorded_end: float


def retimable(
    graph: TaskGraph, times: np.ndarray, block_of: Callable[[tuple[int, ...]], int]
) -> Retimable:
    """``graph`` with the engine's ``times`` ((n, 2) start and end s per task) as a
    :class:`Retimable`; ``block_of(group)``: how many replicas a collective's group spans."""
    tasks = graph.tasks
    if np.isnan(times).any():
        raise ValueError("a task of the graph did not run: nothing to re-time")
    node_of = np.empty(len(tasks), dtype=np.int64)
    members: list[list[int]] = []
    by_instance: dict[int, int] = {}
    for i, t in enumerate(tasks):
        if t.comm is not None:
            n = by_instance.setdefault(t.comm.instance, len(members))
            if n == len(members):
                members.append([])
        else:
            n = len(members)
            members.append([])
        members[n].append(i)
        node_of[i] = n
    preds, own_preds = _node_preds(graph, node_of, len(members))
    order = _topological(preds)
    renumber = np.empty(len(order), dtype=np.int64)
    renumber[order] = np.arange(len(order))
    start, end = times[:, 0], times[:, 1]
    out_tasks, out_preds, out_members = [], [], []
    lag, duration = np.zeros(len(order)), np.zeros(len(order))
    kind, rank, block = (np.zeros(len(order), dtype=np.int64) for _ in range(3))
    for new, old in enumerate(order):
        own = tuple(members[old])
        first = tasks[own[0]]
        out_tasks.append(own)
        ps = tuple(sorted(int(renumber[p]) for p in preds[old]))
        out_preds.append(ps)
        out_members.append(
            tuple(
                (tasks[i].rank, tuple(sorted(int(renumber[p]) for p in own_preds[i]))) for i in own
            )
            if len(own) > 1
            else None
        )
        ready = max((end[members[order[p]][0]] for p in ps), default=0.0)
        lag[new] = max(0.0, float(start[own[0]]) - ready)
        duration[new] = float(end[own[0]] - start[own[0]])
        kind[new] = {"compute": COMPUTE, "comm": COMM, "host": HOST}[first.kind]
        rank[new] = first.rank
        block[new] = block_of(first.comm.group) if first.comm is not None else 1
    gpu = np.flatnonzero(kind != HOST)
    recorded = float(max(end[i] for n in gpu for i in out_tasks[n])) if len(gpu) else 0.0
    return Retimable(
        out_tasks, out_preds, out_members, lag, duration, kind, rank, block, gpu, recorded
    )


def _node_preds(
    graph: TaskGraph, node_of: np.ndarray, count: int
) -> tuple[list[set[int]], list[set[int]]]:
    """Per node the nodes it waits for (its tasks' dependencies and stream predecessors),
    and the same per task."""
    preds: list[set[int]] = [set() for _ in range(count)]
    per_task: list[set[int]] = []
    last_on: dict[tuple[int, str], int] = {}
    for i, t in enumerate(graph.tasks):
        n = int(node_of[i])
        own = {int(node_of[d]) for d in t.deps}
        prev = last_on.get((t.rank, t.stream))
        if prev is not None:
            own.add(int(node_of[prev]))
        last_on[(t.rank, t.stream)] = i
        own.discard(n)
        per_task.append(own)
        preds[n] |= own
    return preds, per_task


def _topological(preds: list[set[int]]) -> list[int]:
    """The nodes in an order where each follows its predecessors (Kahn); ValueError on a
    cycle (the engine would have deadlocked on it)."""
    waiting = [len(p) for p in preds]
    after: list[list[int]] = [[] for _ in preds]
    for n, ps in enumerate(preds):
        for p in ps:
            after[p].append(n)
    ready = [n for n, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for m in after[n]:
            waiting[m] -= 1
            if waiting[m] == 0:
                ready.append(m)
    if len(order) != len(preds):
        raise ValueError("the step's tasks wait on each other in a cycle")
    return order


class Waits:
    """Per step, the wait (s) each (simulated rank, replica) imposed on the others at the
    collectives it arrived at last: ``total[step, rank index, replica]`` (``ranks``: the
    simulated ranks in index order). Its lead over the mean arrival of the others is what
    they waited on it."""

    def __init__(self, steps: int, replicas: int, ranks: list[int]):
        self.steps, self.replicas, self.ranks = steps, replicas, ranks
        self._index = {r: i for i, r in enumerate(ranks)}
        self.total = np.zeros((steps, len(ranks), replicas))

    def meet(self, arrivals: np.ndarray, ranks: list[int], block: int) -> np.ndarray:
        """The start of a collective whose members (``ranks``) arrive at ``arrivals``
        (members x columns), meeting across blocks of ``block`` replicas: the latest
        arrival of each block, for every column of it; the last one's lead is recorded."""
        m, steps, reps, b = len(ranks), self.steps, self.replicas, block
        a = arrivals.reshape(m, steps, reps // b, b).transpose(1, 2, 0, 3)
        a = a.reshape(steps, reps // b, m * b)
        last = a.argmax(axis=2)
        top = a.max(axis=2)
        if m * b > 1:
            lead = top - (a.sum(axis=2) - top) / (m * b - 1)
            member = np.array([self._index[r] for r in ranks])[last // b]
            replica = last % b + np.arange(reps // b)[None, :] * b
            step = np.broadcast_to(np.arange(steps)[:, None], last.shape)
            np.add.at(self.total, (step, member, replica), lead)
        return np.repeat(top, b, axis=1).reshape(steps * reps)


def retime(
    r: Retimable,
    steps: int,
    replicas: int,
    factor: Callable[[int, int], np.ndarray | float],
    waits: Waits | None = None,
) -> np.ndarray:
    """The step's end (s) per column (``steps`` x ``replicas``, replica fastest) with each
    node's duration times ``factor(node, kind)`` (a vector of a factor per column, or one
    number for all); ``waits`` records who the others waited on at each collective.

    A node's end vector is dropped once its last successor has read it: the live set is
    the step's frontier, not its every task."""
    width = steps * replicas
    left = np.zeros(len(r.tasks), dtype=np.int64)
    for ps in r.preds:
        for p in ps:
            left[p] += 1
    ends: dict[int, np.ndarray] = {}
    step_end = np.zeros(width)
    zero = np.zeros(width)
    gpu = np.zeros(len(r.tasks), dtype=bool)
    gpu[r.gpu_end] = True
    for n, ps in enumerate(r.preds):
        b = replica_block(int(r.block[n]), replicas)
        if waits is not None and (r.member_preds[n] is not None or (b > 1 and replicas > 1)):
            members = r.member_preds[n] or ((int(r.rank[n]), ps),)
            arrivals = np.stack([_latest(ends, own, zero) for _, own in members])
            ready = waits.meet(arrivals, [m for m, _ in members], b)
        else:
            ready = _latest(ends, ps, zero)
            if b > 1 and replicas > 1:
                blocks = ready.reshape(steps, replicas // b, b).max(axis=2)
                ready = np.repeat(blocks, b, axis=1).reshape(width)
        end = ready + (r.lag[n] + r.duration[n] * factor(n, int(r.kind[n])))
        for p in ps:
            left[p] -= 1
            if left[p] == 0:
                del ends[p]
        if left[n] > 0:
            ends[n] = end
        if gpu[n]:
            step_end = np.maximum(step_end, end)
    return step_end


def replica_block(block: int, replicas: int) -> int:
    """A collective's block of replicas as the columns hold them: 1 with one replica, all
    of them where ``block`` does not divide them (a group of scattered replicas)."""
    if replicas == 1:
        return 1
    return block if replicas % block == 0 else replicas


def _latest(ends: dict[int, np.ndarray], preds: tuple[int, ...], zero: np.ndarray):
    """The latest end of ``preds`` per column (``zero`` for none)."""
    if not preds:
        return zero
    ready = ends[preds[0]]
    for p in preds[1:]:
        ready = np.maximum(ready, ends[p])
    return ready


def recorded_step(r: Retimable) -> float:
    """The step's end re-timed with every factor 1, by the same arithmetic as :func:`retime`
    (the reference its samples are measured against: equal to the engine's within
    rounding, and bit-equal to a column whose factors are all 1)."""
    return float(retime(r, 1, 1, lambda n, k: 1.0)[0])
