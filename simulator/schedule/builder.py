"""A small task-graph builder: tasks, collectives with their process groups, late-bound deps.

The step's tasks are emitted rank by rank, so a task may depend on one that another rank
emits later (a pipeline receive): such a dependency is named by a key and bound when the
graph is finished. Collectives get their group from the plan's rank grid, the symmetric
copies of that group (other data-parallel replicas in symmetric mode) and an algorithm
(:mod:`simulator.plan.collective_choice`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from simulator.model.compute import ComputeModel
from simulator.plan.collective_choice import algorithm_for
from simulator.plan.grid import RankGroups
from simulator.plan.plan import Plan
from simulator.schedule.taskgraph import CommSpec, Task, TaskGraph

Dep = int | tuple | None  # a task index, a key bound later, or nothing
_STAGE_DIMS = ("tp", "cp", "dp")  # the dimensions within a pipeline stage
_GRID_DIMS = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp", "cp")}  # a grid kind's dimensions
STREAM_KIND = {"pp_fwd": "pp", "pp_bwd": "pp"}  # scenario's collectives key of a stream
_PHASE, _LAYER, _MB, _FLOPS, _ALLOC, _FREE = (Task._field_defaults[f] for f in Task._fields[7:])
_FORWARD = frozenset({"forward", "recompute"})  # phases whose ops are called from Python
_UNSET = object()  # a cache miss (None is a cached algorithm: the default)
_new_tuple = tuple.__new__  # a named tuple from its fields in order, without its __new__
# GraphBuilder.task and .comm build Task and CommSpec from their fields in this order: a field
# added or moved there must be added or moved here too (then this check passes again).
_TASK_FIELDS = (
    "rank", "stream", "kind", "name", "duration_s", "deps", "comm",
    "phase", "layer", "microbatch", "flops", "mem_alloc", "mem_free",
)  # fmt: skip
_COMM_FIELDS = ("collective", "group", "size_bytes", "instance", "algorithm", "copies")
if Task._fields != _TASK_FIELDS or CommSpec._fields != _COMM_FIELDS:
    raise ImportError("Task or CommSpec fields changed: update GraphBuilder.task and .comm")


@dataclass
class GraphBuilder:
    """Accumulates a TaskGraph for ``plan`` with compute durations from ``cm``."""

    plan: Plan
    cm: ComputeModel
    graph: TaskGraph = field(default_factory=TaskGraph)
    keys: dict[tuple, int] = field(default_factory=dict)
    pending: list[tuple[int, tuple]] = field(default_factory=list)
    instances: dict[tuple, int] = field(default_factory=dict)
    copy_index: dict[tuple, int] = field(default_factory=dict)
    group_cache: dict[tuple[int, str], tuple[tuple[int, ...], int]] = field(default_factory=dict)
    algorithms: dict[tuple, str | None] = field(default_factory=dict)
    w_task: dict[tuple, int] = field(default_factory=dict)  # (rank, key, micro-batch) -> W
    weight_blocks: dict = field(default_factory=dict)  # (layer, part) -> weight-gradient Block
    layer_costs: dict = field(default_factory=dict)  # layer -> its LayerCost
    end_blocks: tuple | None = None  # (embedding, head) Blocks, once computed
    accumulating: set = field(default_factory=set)  # (rank, layer) with a gradient already
    kernel_tasks: bool = field(init=False)  # simulation.kernel_tasks, read once per task
    host: bool = field(init=False)  # each rank's host stream is modelled
    carry: dict = field(default_factory=dict)  # rank -> collectives' launches not yet issued
    issued: dict = field(default_factory=dict)  # (rank, stream) -> deque of (task, launches)
    queued: dict = field(default_factory=dict)  # (rank, stream) -> launches in its deque

    def __post_init__(self) -> None:
        self.kernel_tasks = self.plan.policy.kernel_tasks
        self.host = self.plan.policy.host

    def _issue(
        self, rank: int, stream: str, name: str, seconds: float, launches: int, phase, layer,
        microbatch,
    ) -> int:  # fmt: skip
        """The host task ("launch <name>") that issues ``rank``'s next GPU task ``name``
        (``launches`` kernels or graphs, ``seconds`` of CPU): on the rank's ``host`` stream,
        in program order (the order the builder emits GPU tasks). A collective's launch is
        issued with the next compute launch (its CPU time added there, no task of its own):
        it waits for its input's compute anyway, so its issue only matters where the CPU
        runs behind, and there its time delays the next compute launch all the same; this
        halves the host stream's tasks. CUDA holds at most
        ``launch_queue`` launches pending per CUDA stream: when ``stream``'s queue is full, the
        launch waits for the oldest pending GPU tasks of that stream to end (a GPU far behind
        its CPU blocks the CPU, so the host stays within a bounded lead and the step's steady
        state repeats)."""
        key = (rank, stream)
        pending = self.issued.setdefault(key, deque())
        queued = self.queued.get(key, 0) + launches
        deps = []
        gate = None
        while pending and queued > self.plan.policy.launch_queue:
            gate, n = pending.popleft()
            queued -= n
        if gate is not None:
            deps.append(gate)
        self.queued[key] = queued
        tasks = self.graph.tasks
        tasks.append(
            _new_tuple(
                Task,
                (
                    rank, "host", "host", "launch " + name, seconds, tuple(deps), None,
                    phase, layer, microbatch, _FLOPS, _ALLOC, _FREE,
                ),
            )
        )  # fmt: skip
        return len(tasks) - 1

    def _launch(self, resolved, rank, stream, name, comm, host, where) -> int:
        """The launch of a GPU task about to be added: a collective's CPU time carried to the
        next compute launch; a compute task's host task appended to ``resolved`` (its deps).
        ``where``: the task's (phase, layer, micro-batch). The launches counted for the queue
        (0 for a collective)."""
        host_s = self.plan.policy.launch_s if host is None else host
        if comm is not None:  # issued in the next launch's host task (see _issue)
            self.carry[rank] = self.carry.get(rank, 0.0) + host_s
            return 0
        if host_s <= 0:
            return 0
        launches = self._launches(host_s, where[0])
        host_s += self.carry.pop(rank, 0.0)
        resolved.append(self._issue(rank, stream, name, host_s, launches, *where))
        return launches

    def _launches(self, host_s: float, phase: str) -> int:
        """Launches a host task of ``host_s`` CPU seconds in ``phase`` stands for (its kernels,
        or one graph or collective), for the launch queue."""
        policy = self.plan.policy
        per = policy.kernel_forward_s if phase in _FORWARD else policy.kernel_backward_s
        if policy.cuda_graphs or per <= 0:
            return 1
        return max(1, round(host_s / per))

    def task(
        self,
        rank: int,
        stream: str,
        name: str,
        seconds: float = 0.0,
        deps: Iterable[Dep] = (),
        comm: CommSpec | None = None,
        *,
        phase: str = _PHASE,
        layer: int = _LAYER,
        microbatch: int = _MB,
        flops: float = _FLOPS,
        mem_alloc: float = _ALLOC,
        mem_free: float = _FREE,
        host: float | None = None,
    ) -> int:
        """Add a task; the keyword arguments are :class:`Task`'s optional fields, and
        ``host`` the CPU seconds to issue it (default: one launch, for a collective or a GPU
        task with work; with the host stream modelled, the task waits for its issue).

        Keyword parameters rather than ``**fields``, and the Task built from its fields in
        order without its ``__new__``: this runs once per task (160K in a GPT-3 step)."""
        resolved = []
        launches = 0
        if self.host and (seconds > 0 or comm is not None):
            launches = self._launch(
                resolved, rank, stream, name, comm, host, (phase, layer, microbatch)
            )
        for d in deps:
            if d.__class__ is int:  # the common case first
                resolved.append(d)
            elif d is None:
                continue
            elif isinstance(d, tuple):
                if d in self.keys:
                    resolved.append(self.keys[d])
                else:
                    self.pending.append((len(self.graph.tasks), d))
            else:
                resolved.append(d)
        tasks = self.graph.tasks
        tasks.append(
            _new_tuple(
                Task,
                (
                    rank, stream, "compute" if comm is None else "comm", name, seconds,
                    tuple(resolved), comm, phase, layer, microbatch, flops, mem_alloc, mem_free,
                ),
            )
        )  # fmt: skip
        index = len(tasks) - 1
        if launches:  # pending on the GPU until it ends
            self.issued[(rank, stream)].append((index, launches))
        return index

    def comm(
        self,
        *,
        rank: int,
        stream: str,
        name: str,
        collective: str,
        group: tuple[tuple[int, ...], int],
        size: float,
        tag: tuple,
        deps: Iterable[Dep] = (),
        phase: str = _PHASE,
        layer: int = _LAYER,
        microbatch: int = _MB,
        flops: float = _FLOPS,
        mem_alloc: float = _ALLOC,
        mem_free: float = _FREE,
        algorithm: str | None = None,
    ) -> int | None:
        """One rank's part of a ``collective`` of ``size`` bytes over ``group`` (members and
        copies index, from :meth:`group`); None when there is nothing to communicate.
        Members' tasks with the same (name, group, tag) form one call; ``algorithm`` forces
        one (else the plan's choice); the other keyword arguments are :class:`Task`'s
        optional fields."""
        members, copies = group
        if len(members) < 2 or size <= 0:
            return None
        inst = self.instances.setdefault((name, members, tag), len(self.instances))
        if algorithm is None:
            key = (stream, collective, members, size)
            algorithm = self.algorithms.get(key, _UNSET)
            if algorithm is _UNSET:
                algorithm = self._algorithm(stream, collective, members, size)
        spec = _new_tuple(CommSpec, (collective, members, size, inst, algorithm, copies))
        return self.task(
            rank, stream, name, 0.0, deps, spec, phase=phase, layer=layer,
            microbatch=microbatch, flops=flops, mem_alloc=mem_alloc, mem_free=mem_free,
        )  # fmt: skip

    def _algorithm(self, stream: str, collective: str, members, size: float) -> str | None:
        key = (stream, collective, members, size)
        if key not in self.algorithms:
            stream_kind = STREAM_KIND.get(stream, stream)
            forced = self.plan.collectives.get(stream_kind, "auto")
            self.algorithms[key] = algorithm_for(
                stream_kind, collective, members, size, self.plan.network, forced
            )
        return self.algorithms[key]

    def bind(self, key: tuple, task: int | None) -> None:
        """Name ``task`` so that dependencies on ``key`` resolve to it."""
        if task is not None:
            self.keys[key] = task

    # -- groups ------------------------------------------------------------------------
    def group(self, rank: int, kind: str | tuple) -> tuple[tuple[int, ...], int]:
        """``rank``'s group of ``kind`` (tp, cp, dp, ep, edp, etp, pp_next, pp_prev, or
        ``("pp_to", stage)``: a pipeline pair to any stage) and the index of its symmetric
        copies (-1 in full mode), memoised."""
        key = (rank, kind)
        hit = self.group_cache.get(key)
        if hit is None:
            grp = self._members(rank, kind)
            hit = self.group_cache[key] = (grp, self._copies(rank, kind, grp))
        return hit

    def pipeline_pair(self, rank: int, to_stage: int) -> tuple[tuple[int, ...], int]:
        """(sender, receiver) for a pipeline send from ``rank`` to its replica's ``to_stage``,
        carrying the same send of every other rank of the stage as copies (its TP, CP and
        data-parallel peers send at the same time): to a neighbour stage, or any other (an
        interleaved schedule's last stage sends its next chunk's input to the first)."""
        r = self.plan.stage_of(rank)
        if to_stage == r + 1:
            return self.group(rank, "pp_next")
        if to_stage == r - 1:
            return self.group(rank, "pp_prev")
        return self.group(rank, ("pp_to", to_stage))

    def stage_rank(self, rank: int, stage: int) -> int:
        """The rank of ``rank``'s pipeline replica that holds ``stage``."""
        g = self.plan.grid
        return rank + (stage - g.coord(rank, "pp")) * g.stride("pp")

    def _members(self, rank: int, kind: str | tuple) -> tuple[int, ...]:
        g = self.plan.grid
        if kind in ("tp", "cp"):
            return g.group(rank, kind)
        if kind == "dp":
            return g.group(rank, "dp", "cp")
        if kind == "ep":
            return g.ep_group(rank)
        if kind == "edp":
            return g.expert_dp_group(rank)
        if kind == "etp":
            return g.expert_tp_group(rank)
        r = self.plan.stage_of(rank)
        if kind == "pp_next":
            return (rank, self.stage_rank(rank, r + 1))
        if kind == "pp_prev":
            return (rank, self.stage_rank(rank, r - 1))
        if isinstance(kind, tuple) and kind[0] == "pp_to":
            return (rank, self.stage_rank(rank, kind[1]))
        raise ValueError(f"unknown group kind {kind!r}")

    def _copies(self, rank: int, kind: str, group: tuple[int, ...]) -> int:
        """Index of the symmetric copies of ``rank``'s ``kind`` group at its stage: every other
        group of that kind among the stage's ranks, in the order of their first rank at the
        stage. Grid kinds come from the grid's strides (:meth:`RankGrid.other_groups_array`; a
        pipeline pair from each of the stage's ranks); expert groups are found one by one (a
        rank already in a found group is skipped, so the cost is linear in the stage's ranks)."""
        if not self.plan.symmetric:
            return -1
        key = (self.plan.stage_of(rank), kind)
        if key not in self.copy_index:
            self.copy_index[key] = self.graph.add_copies(self._other_groups(rank, kind, group))
        return self.copy_index[key]

    def _other_groups(self, rank: int, kind: str, group: tuple[int, ...]) -> RankGroups:
        """The copies of ``rank``'s ``kind`` group (:meth:`_copies`), as one array."""
        grid = self.plan.grid
        dims = _GRID_DIMS.get(kind)
        if dims is not None:
            return grid.other_groups_array(rank, dims, _STAGE_DIMS)
        if kind in ("pp_next", "pp_prev") or isinstance(kind, tuple):  # a pipeline pair
            stage = grid.group_array(rank, *_STAGE_DIMS)
            delta = group[1] - group[0]  # the same stride for every rank of the stage
            others = stage[stage != rank]
            return RankGroups(np.stack([others, others + delta], axis=1))
        covered: set[int] = set()
        found: list[tuple[int, ...]] = []
        for x in grid.group(rank, *_STAGE_DIMS):
            if x in covered:
                continue
            g = self._members(x, kind)
            covered.update(g)
            if g != group:
                found.append(g)
        if any(len(g) != len(group) for g in found):
            raise ValueError(f"the {kind} groups of a stage differ in size: {len(group)} and more")
        return RankGroups(np.array(found, np.int64).reshape(len(found), len(group)))

    # -- finishing -----------------------------------------------------------------------
    def finish(self) -> TaskGraph:
        """Bind the late dependencies; ValueError naming any that never appeared."""
        for task_index, key in self.pending:
            if key not in self.keys:
                raise ValueError(f"internal: unresolved dependency {key}")
            t = self.graph.tasks[task_index]
            self.graph.tasks[task_index] = t._replace(deps=t.deps + (self.keys[key],))
        self.pending.clear()
        return self.graph
