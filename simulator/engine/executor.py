"""Run a TaskGraph: per-rank streams as cursors, dependencies as countdowns, collectives as
rendezvous on the flow network. Callbacks only: no SimPy process per task or stream.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import simpy

from simulator.collectives import Locality, plan_collective
from simulator.engine.collective import CollectiveRunner
from simulator.schedule.taskgraph import TaskGraph
from simulator.trace import Trace, TraceRecord

_RUNS = itertools.count()


class DeadlockError(RuntimeError):
    """The graph cannot finish: a cycle, or a collective some member never reaches."""


class Executor:
    """Simulates ``graph`` on ``runner``'s network; ``device_of`` places ranks on devices."""

    def __init__(
        self,
        env: simpy.Environment,
        graph: TaskGraph,
        runner: CollectiveRunner,
        device_of: dict[int, int],
        locality: Locality,
    ):
        graph.validate()
        self.env = env
        self.graph = graph
        self.runner = runner
        self.device_of = device_of
        self.locality = locality
        self.trace = Trace()
        tasks = graph.tasks
        # Streams numbered in order of first appearance; per stream its tasks in order, the
        # position of the next one to run, and whether one is running.
        streams: dict[tuple[int, str], int] = {}
        self.stream_of = [streams.setdefault((t.rank, t.stream), len(streams)) for t in tasks]
        self.queue: list[list[int]] = [[] for _ in streams]
        for i, s in enumerate(self.stream_of):
            self.queue[s].append(i)
        self.head = [0] * len(streams)
        self.busy = [False] * len(streams)
        self.waiting = [len(t.deps) for t in tasks]
        self.dependents: list[list[int]] = [[] for _ in tasks]
        for i, t in enumerate(tasks):
            for d in t.deps:
                self.dependents[d].append(i)
        self.members: dict[int, int] = defaultdict(int)
        for t in tasks:
            if t.comm is not None:
                self.members[t.comm.instance] += 1
        self.arrived: dict[int, list[tuple[int, float]]] = defaultdict(list)
        self.done = [False] * len(tasks)
        self._plans: dict[tuple, object] = {}
        self._copy_devices: dict[int, list[list[int]]] = {}
        self._token = next(_RUNS)
        self._bar = None
        self._finished = 0  # names this graph's copy sets in shared geometry caches
        self.memory: list[tuple[int, float, float]] = []  # (rank, time s, bytes delta)

    def run(self, progress: bool = False) -> Trace:
        """Run to the end. ``progress`` shows a bar of finished tasks on stderr (when it is a
        terminal)."""
        if progress and len(self.graph.tasks) > 20_000:
            from tqdm import tqdm

            self._bar = tqdm(
                total=len(self.graph.tasks),
                unit="task",
                desc="simulating",
                disable=None,
                leave=False,
            )
        for s in range(len(self.queue)):
            self._try_start(s)
        self.env.run()
        if self._bar is not None:
            self._bar.close()
        if not all(self.done):
            stuck = [self.graph.tasks[i].name for i, d in enumerate(self.done) if not d][:5]
            raise DeadlockError(f"tasks never ran (first: {stuck})")
        return self.trace

    def _try_start(self, s: int) -> None:
        """Start stream ``s``'s next task if the stream is idle and the task's inputs are in."""
        queue = self.queue[s]
        if self.busy[s] or self.head[s] >= len(queue):
            return
        i = queue[self.head[s]]
        if self.waiting[i]:
            return
        self.busy[s] = True
        task = self.graph.tasks[i]
        now = self.env.now
        if task.mem_alloc:
            self.memory.append((task.rank, now, task.mem_alloc))
        if task.kind == "compute":
            if not 0.0 <= task.duration_s < math.inf:
                raise ValueError(
                    f"task {task.name!r} on rank {task.rank} has duration {task.duration_s!r} s; "
                    "a duration must be finite and non-negative"
                )
            self.env.timeout(task.duration_s).callbacks.append(lambda _ev: self._finish(i, now))
            return
        spec = task.comm
        self.arrived[spec.instance].append((i, now))
        if len(self.arrived[spec.instance]) == self.members[spec.instance]:
            self._launch(spec)

    def _launch(self, spec) -> None:
        start = self.env.now
        members = [i for i, _ in self.arrived.pop(spec.instance)]
        key = (spec.collective, spec.group, spec.size_bytes, spec.algorithm)
        plan = self._plans.get(key)
        if plan is None:
            devices = [self.device_of[r] for r in spec.group]
            plan = plan_collective(
                spec.collective, devices, spec.size_bytes, spec.algorithm, self.locality
            )
            self._plans[key] = plan
        copies = self._copies(spec.copies)

        def finished() -> None:
            for i in members:
                self._finish(i, start)

        key = None if spec.copies < 0 else (self._token, spec.copies)
        self.runner.run(plan, finished, copies, copies_key=key)

    def _copies(self, index: int) -> list[list[int]]:
        if index < 0:
            return []
        cached = self._copy_devices.get(index)
        if cached is None:
            cached = [[self.device_of[r] for r in g] for g in self.graph.copy_sets[index]]
            self._copy_devices[index] = cached
        return cached

    def _finish(self, i: int, start: float) -> None:
        t = self.graph.tasks[i]
        self.done[i] = True
        if self._bar is not None:
            self._finished += 1
            if self._finished % 2000 == 0:
                self._bar.update(2000)
        if t.mem_free:
            self.memory.append((t.rank, self.env.now, -t.mem_free))
        self.trace.add(
            TraceRecord(
                t.rank,
                t.stream,
                t.kind,
                t.phase,
                t.name,
                t.layer,
                t.microbatch,
                start,
                self.env.now,
                t.flops,
                t.comm.size_bytes if t.comm else 0.0,
            )
        )
        s = self.stream_of[i]
        self.busy[s] = False
        self.head[s] += 1
        waiting = self.waiting
        for d in self.dependents[i]:
            waiting[d] -= 1
            if waiting[d] == 0:
                self._try_start(self.stream_of[d])
        self._try_start(s)
