"""Run a TaskGraph: per-rank streams as cursors, dependencies as countdowns, collectives as
rendezvous on the flow network. Callbacks only: no SimPy process per task or stream.

Interference: NCCL's kernels occupy SMs (and HBM bandwidth) while they run, so compute that
overlaps a collective on the same GPU slows down. While a rank has collectives in flight (from
launch to end, as the trace shows them), its compute tasks progress at rate 1 / (1 + s_c), s_c
the largest of their slowdowns; a running compute task is re-timed whenever that rate changes,
and a superseded finish is ignored through a per-task token.

The scenario's default ``s`` = 0.189 (``simulation.comm_interference``) is the average compute
slowdown under overlapped communication that Lee et al. measured, "Characterizing Compute-
Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power
Implications" (arXiv:2507.03114, 2025): GPT and LLaMA layers on 4-GPU A100, H100, MI250 and
MI210 machines, average slowdown 18.9%, maximum 40.0%. Those collectives ran over the machines'
scale-up links (NVLink, Infinity Fabric). A collective takes from a GEMM through the SMs its
channels occupy and the HBM bandwidth it moves, and NCCL gives a slower path fewer channels, so
a collective whose slowest hop is slower than a scale-up hop slows compute in proportion: ``s x
hop bandwidth / scale-up hop bandwidth`` (a 400 Gb/s NIC against 450 GB/s NVLink: s/9). With
several collectives in flight the largest slowdown applies. Pipeline send/receive pairs do not
count (NCCL runs them on two channels per peer, a few SMs). ``Executor`` itself defaults to 0
(no interference); the scenario passes the value it wants.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import simpy

from simulator.collectives import Locality, plan_collective
from simulator.collectives.nccl_tuning import channels_per_host
from simulator.engine.clock import caller
from simulator.engine.collective import CollectiveRunner, delayed_phase
from simulator.engine.links import LinkTable
from simulator.engine.placement import RanksOnDevices
from simulator.schedule.taskgraph import TaskGraph
from simulator.trace import Trace


def _speed(active: dict[float, int] | None) -> float:
    """A rank's compute rate with collectives of slowdowns ``active`` in flight (module doc)."""
    return 1.0 / (1.0 + max(active)) if active else 1.0


class DeadlockError(RuntimeError):
    """The graph cannot finish: a cycle, or a collective some member never reaches."""


def hop_bandwidth(links: LinkTable, router, devices: tuple[int, ...]) -> float:
    """The capacity (B/s) of the slowest link on the paths between neighbours of ``devices``
    taken as a ring: the bandwidth NCCL's tuning model calls Simple's bus bandwidth (inf for
    fewer than two devices). ``router.path(src, dst, key)`` gives a path's links; a router
    with ``path_ids`` routes the whole ring at once (a 1,024-GPU ring: 1,024 paths)."""
    best = math.inf
    path_ids = getattr(router, "path_ids", None)
    if path_ids is not None and len(devices) > 1 and all(type(d) is int for d in devices):
        src = np.array(devices, dtype=np.int64)
        dst = np.roll(src, -1)
        apart = src != dst
        src, dst = src[apart], dst[apart]
        found = path_ids(src, dst, np.zeros(src.size, np.int64), links)
        if found is not None:
            ids = found[0]
            return float(links.capacity[ids].min()) if ids.size else best
    for a, b in zip(devices, devices[1:] + devices[:1], strict=True):
        if a != b:
            ids = links.ids(router.path(a, b, 0))
            if ids.size:
                best = min(best, float(links.capacity[ids].min()))
    return best


def channels_Bps(hop_Bps: float, host_of: dict[int, int], devices: tuple[int, ...]) -> float:
    """NCCL's bus bandwidth for its protocol model (Simple's ``B``: its channels' total): the
    slowest hop's bandwidth ``hop_Bps`` times the group's channels across hosts
    (:func:`~simulator.collectives.nccl_tuning.channels_per_host`)."""
    hosts = Counter(map(host_of.get, devices, devices))
    return hop_Bps * channels_per_host(list(hosts.values()))


class Executor:
    """Simulates ``graph`` on ``runner``'s network; ``device_of`` places ranks on devices.

    ``interference`` (s, a fraction >= 0) slows a rank's compute to rate 1 / (1 + s) while
    that rank runs a collective over scale-up links, less over slower ones (module doc); 0
    runs compute at full speed.
    """

    def __init__(
        self,
        env: simpy.Environment,
        graph: TaskGraph,
        runner: CollectiveRunner,
        device_of: Mapping[int, int],
        locality: Locality,
        interference: float = 0.0,
    ):
        if not 0.0 <= interference < math.inf:
            raise ValueError(f"interference must be a finite fraction >= 0, not {interference!r}")
        compiled = graph.compiled()  # validated and indexed once per graph
        self.env = env
        self._call_in = caller(env)
        self.graph = graph
        self._tasks = graph.tasks
        self.runner = runner
        self.device_of = device_of
        self.locality = locality
        self.trace = Trace(task_columns=graph.trace_columns)
        # the lone path's submit_later with its network bound (a C-level call per phase, not
        # the network's Python wrapper)
        net = runner.network
        self._submit_later = partial(net.lone.submit_later, net)
        runs = self.trace.runs  # (task, start, end) per task that ended, as typed arrays
        self._run_task, self._run_start, self._run_end = (
            runs.task.append, runs.start.append, runs.end.append
        )  # fmt: skip
        self._read_graph(compiled, device_of)
        self._bar = None
        self._finished = 0  # tasks finished, for the progress bar
        self.memory: list[tuple[int, float, float]] = []  # (rank, time s, bytes delta)
        self.memory_task: list[int] = []  # the task of each memory event
        # Per group of devices, ("bus", devices): (its slowest hop's bandwidth, its channels'
        # bandwidth), B/s; per (collective, devices, size, algorithm, torus): its plan. The
        # runner's (its model's, shared by later runs) where this locality is the runner's,
        # else this run's own.
        shared = locality.host_of is runner.host_of and (
            locality.nvls_switch is runner.switch_of_host
        )
        self._known: dict = runner.plans if shared else {}
        # Interference: comm tasks in flight per rank; running compute tasks per rank as
        # task -> [work left (s at full speed), as of time (s), rate, token, start time (s)].
        self.interference = interference
        self.comm_active: dict[int, dict[float, int]] = defaultdict(dict)  # rank -> {s: count}
        self.computing: dict[int, dict[int, list]] = defaultdict(dict)
        self._ref_Bps: float | None = None  # a scale-up (NVLink) hop's bandwidth, found once

    def _read_graph(self, compiled, device_of: Mapping[int, int]) -> None:
        """This run's view of the compiled graph: streams, queues, countdowns, collective
        members and shapes, and whether ranks sit on the devices of their own numbers."""
        # Streams numbered in order of first appearance; per stream its tasks in order, the
        # position of the next one to run, and whether one is running. The graph's lists are
        # shared by its runs and only read; ``waiting`` is this run's countdown.
        self.stream_of = compiled.stream_of
        self.queue = compiled.queue
        self.head = [0] * len(self.queue)
        self.busy = [False] * len(self.queue)
        self.waiting = list(compiled.waiting)
        self.dependents = compiled.dependents
        self.members = compiled.members  # simulated member tasks per collective instance
        self.arrived: dict[int, list[int]] = defaultdict(list)  # members' tasks, in order
        self._plans: dict[tuple, object] = {}
        self._shape_of = compiled.shape_of
        self._launches: list[tuple | None] = [None] * compiled.shapes  # per shape: _routed
        self._copy_devices: dict[int, Sequence[Sequence[int]]] = {}
        # ranks 0 .. n-1 on devices 0 .. n-1 (api places ranks on the devices in order):
        # groups and copies need no mapping, 8K pipeline pairs at a stage of a 16K-GPU job;
        # a rank outside it is checked where the mapping is skipped (_placed)
        self._ranks_are_devices = isinstance(device_of, RanksOnDevices) or (
            list(device_of) == list(device_of.values()) == list(range(len(device_of)))
        )

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
            if self._bar.disable:  # not a terminal (TQDM_DISABLE, a pool worker): no counting
                self._bar = None
        for s in range(len(self.queue)):
            self._try_start(s)
        self.env.run()
        if self._bar is not None:
            self._bar.close()
        if len(self.trace.runs) < len(self.graph.tasks):
            ran = {run[0] for run in self.trace.runs}
            stuck = [t.name for i, t in enumerate(self.graph.tasks) if i not in ran][:5]
            raise DeadlockError(f"tasks never ran (first: {stuck})")
        return self.trace

    def _try_start(self, s: int) -> None:
        """Start stream ``s``'s next task if the stream is idle and the task's inputs are in."""
        if self.busy[s]:
            return
        queue = self.queue[s]
        h = self.head[s]
        if h < len(queue) and not self.waiting[queue[h]]:
            self._start(queue[h], s)

    def _start(self, i: int, s: int) -> None:
        """Start task ``i``, the next on idle stream ``s``, whose inputs are in."""
        self.busy[s] = True
        task = self._tasks[i]
        now = self.env.now
        if task.mem_alloc:
            self.memory.append((task.rank, now, task.mem_alloc))
            self.memory_task.append(i)
        if task.kind != "comm":  # its duration checked finite and >= 0 (compiled())
            duration = task.duration_s
            if not self.interference or task.kind == "host":  # the CPU: no HBM or SMs shared
                self._call_in(duration, self._finish, i, now)
                return
            rank = task.rank
            rate = _speed(self.comm_active.get(rank))
            state = [duration, now, rate, 0, now]
            self.computing[rank][i] = state
            self._call_in(duration / rate, self._due, i, rank, state, 0)
            return
        spec = task.comm
        if self.members[spec.instance] == 1:  # a collective of one simulated member
            self._launch(spec, (i,))
            return
        arrived = self.arrived[spec.instance]
        arrived.append(i)
        if len(arrived) == self.members[spec.instance]:
            self._launch(spec, self.arrived.pop(spec.instance))

    def _due(self, i: int, rank: int, state: list, token: int) -> None:
        """Compute task ``i`` is due to finish, unless it was re-timed since (``token``)."""
        if state[3] == token:  # else superseded by a re-timing
            del self.computing[rank][i]
            self._finish(i, state[4])

    def _slowdown(self, bus_Bps: float) -> float:
        """A collective's slowdown of the compute it overlaps: the measured ``interference``
        for one as fast as a scale-up (NVLink) hop, in proportion to its hop bandwidth below
        that: NCCL gives a slower collective fewer channels (one SM each) and it moves fewer
        bytes through HBM per second, the two ways it takes from a GEMM."""
        if self._ref_Bps is None:
            self._ref_Bps = self._scale_up_Bps()
        if not (math.isfinite(bus_Bps) and math.isfinite(self._ref_Bps)):
            return self.interference
        return self.interference * min(1.0, bus_Bps / self._ref_Bps)

    def _scale_up_Bps(self) -> float:
        """The hop bandwidth between two devices of one host (inf: no host has two): the
        first host in device order with two devices, its lowest two. Devices in order, each
        host's first remembered; the walk stops when the first device's host repeats (devices
        0 and 1 on host 0: nothing earlier can win), else it ends having seen every pair."""
        if self._ranks_are_devices:
            devices: Sequence[int] = range(len(self.device_of))
        else:
            devices = sorted(set(self.device_of.values()))
        host_of = self.runner.host_of.get
        first: dict = {}  # host -> its first device, in device order
        pair: dict = {}  # host -> its first two devices
        for d in devices:
            h = host_of(d, d)
            f = first.setdefault(h, d)
            if f != d and h not in pair:
                pair[h] = (f, d)
                if f == devices[0]:
                    break
        host = next((h for h in first if h in pair), None)
        if host is None:
            return math.inf
        return hop_bandwidth(self.runner.links, self.runner.router, pair[host])

    def _comm_count(self, rank: int, s: float, delta: int) -> None:
        """Add (``delta`` 1) or remove (-1) a collective of slowdown ``s`` in flight on
        ``rank``; when that changes the rank's compute speed (1 / (1 + the largest slowdown
        in flight), read afresh by each compute task as it starts), re-time its running
        compute."""
        active = self.comm_active[rank]
        left = active.get(s, 0) + delta
        if left:
            active[s] = left
            if left != 1 or delta < 0:
                return  # the same slowdowns in flight: the same speed
        else:
            del active[s]
        running = self.computing.get(rank)
        if not running:
            return  # nothing running to re-time (mostly: compute waits on the collective)
        rate = _speed(active)
        now = self.env.now
        call_in, due = self._call_in, self._due
        for i, state in running.items():
            if state[2] == rate:
                continue  # started at this speed (all of a rank's running share one)
            state[0] = max(state[0] - (now - state[1]) * state[2], 0.0)
            token = state[3] + 1
            state[1], state[2], state[3] = now, rate, token
            call_in(state[0] / rate, due, i, rank, state, token)

    def _plan(self, spec) -> tuple[object, float]:
        """(the collective's plan, the slowdown it puts on overlapping compute), once per
        (collective, group, size, algorithm)."""
        devices = self._placed(tuple(spec.group))
        known = self._known
        found = known.get(("bus", devices))
        if found is None:  # the slowest hop and the channels' bandwidth, once per group
            bus = hop_bandwidth(self.runner.links, self.runner.router, devices)
            found = known[("bus", devices)] = (bus, channels_Bps(bus, self.runner.host_of, devices))
        bus, channels = found
        key = (spec.collective, devices, spec.size_bytes, spec.algorithm, self.locality.torus_shape)
        plan = known.get(key)
        if plan is None:
            plan = known[key] = plan_collective(
                spec.collective,
                devices,
                spec.size_bytes,
                spec.algorithm,
                self.locality,
                bus_Bps=channels if math.isfinite(channels) else None,
            )
        # point-to-point sends run on NCCL's p2p channels (2 per peer by default, so about 2
        # SMs against a collective's up to 32): they are not what Lee et al. measured, and
        # are taken not to slow compute
        s = 0.0
        if self.interference and spec.collective != "send_recv":
            s = self._slowdown(bus)
        return plan, s

    def _launch(self, spec, members: Sequence[int]) -> None:
        """Start the collective ``spec`` of tasks ``members`` (all arrived)."""
        start = self.env.now
        shape = self._shape_of[members[-1]]  # the task whose spec this is
        launch = self._launches[shape]
        if launch is None:
            launch = self._launches[shape] = self._routed(spec)
        s, geometry, scale, base_latency_s, classes = launch
        if s:
            tasks = self._tasks
            for i in members:
                self._comm_count(tasks[i].rank, s, 1)
        on_done = partial(self._ended, members, s, start)
        if classes is not None:  # run_routed's one delayed submit, made here
            self._submit_later(base_latency_s, classes, on_done, scale)
        else:
            self.runner.run_routed(geometry, scale, base_latency_s, on_done)

    def _routed(self, spec) -> tuple[float, list, float, float, list | None]:
        """(slowdown, routed geometry, bytes scale, base latency s, the classes of its one
        phase when it has one after a base latency, else None) of a collective like
        ``spec``'s (the same call, group, size, algorithm and copies), found once."""
        plan_key = (spec.collective, spec.group, spec.size_bytes, spec.algorithm)
        planned = self._plans.get(plan_key)
        if planned is None:
            planned = self._plans[plan_key] = self._plan(spec)
        plan, s = planned
        copies = self._copies(spec.copies)
        copies_key = None if spec.copies < 0 else spec.copies
        geometry = self.runner.geometry(plan, copies, copies_key)
        base = plan.base_latency_s
        scale = plan.size_bytes / plan.efficiency
        return s, geometry, scale, base, delayed_phase(geometry, base)

    def _ended(self, members: Sequence[int], s: float, start: float) -> None:
        """The collective of tasks ``members``, launched at ``start`` (s), has ended."""
        if s:
            tasks = self._tasks
            for i in members:
                self._comm_count(tasks[i].rank, s, -1)
        for i in members:
            self._finish(i, start)

    def _placed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The devices of ``ranks`` (KeyError for a rank not placed, as ``device_of`` says)."""
        if not self._ranks_are_devices:
            return tuple(map(self.device_of.__getitem__, ranks))
        n = len(self.device_of)
        if ranks and (min(ranks) < 0 or max(ranks) >= n):
            missing = sorted({r for r in ranks if not 0 <= r < n})
            raise KeyError(f"rank(s) not placed on a device: {missing[:8]}")
        return ranks  # rank r is on device r

    def _copies(self, index: int) -> Sequence[Sequence[int]]:
        if index < 0:
            return []
        cached = self._copy_devices.get(index)
        if cached is None:
            groups = self.graph.copy_sets[index]
            array = getattr(groups, "array", None)  # RankGroups: checked as an array
            if self._ranks_are_devices and array is not None:
                if array.size and (array.min() < 0 or array.max() >= len(self.device_of)):
                    self._placed(tuple(array.ravel().tolist()))  # raises, naming the ranks
                cached = groups
            elif self._ranks_are_devices:  # the usual placement: the groups as they are
                cached = list(groups)
                self._placed(tuple(itertools.chain.from_iterable(groups)))
            else:
                cached = [[self.device_of[r] for r in g] for g in groups]
            self._copy_devices[index] = cached
        return cached

    def _finish(self, i: int, start: float) -> None:
        t = self._tasks[i]
        now = self.env.now
        if self._bar is not None:
            self._finished += 1
            if self._finished % 2000 == 0:
                self._bar.update(2000)
        if t.mem_free:
            self.memory.append((t.rank, now, -t.mem_free))
            self.memory_task.append(i)
        self._run_task(i)  # the rest of the record is the task's (Trace)
        self._run_start(start)
        self._run_end(now)
        s = self.stream_of[i]
        busy, head, queue, waiting, stream_of = (
            self.busy, self.head, self.queue, self.waiting, self.stream_of
        )  # fmt: skip
        busy[s] = False
        head[s] += 1
        for d in self.dependents[i]:
            w = waiting[d] - 1
            waiting[d] = w
            if not w:  # ready: it starts if it is its idle stream's next (_try_start)
                sd = stream_of[d]
                if not busy[sd] and queue[sd][head[sd]] == d:
                    self._start(d, sd)
        if not busy[s]:
            q = queue[s]
            h = head[s]
            if h < len(q) and not waiting[q[h]]:
                self._start(q[h], s)
