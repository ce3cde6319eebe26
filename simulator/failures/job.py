"""One seed of a job over its wall clock: a SimPy process interrupted by failures.

Steps are not events. Between interruptions the job trains in cycles (``interval`` of
training, then a checkpoint pause); where it stands when interrupted - progress, committed
checkpoints, work lost since the last one - follows in closed form from the time since the
run began. Events are the interruptions (failures by cause, planned maintenance), the end of
a recovery (detection, waiting for a spare or a repair, restart with checkpoint load), and,
under the elastic policy, a repaired node coming back (scale up).

Wall-clock time falls in one of: productive (training kept, at healthy speed), ``degraded``
(training slowed by stragglers or by running with fewer replicas), ``lost_work`` (training
rolled back to the last completed checkpoint), ``checkpoint`` (pauses for checkpoints),
``detection`` (timeouts, diagnosis, eviction), ``waiting`` (for spares or repair),
``restart`` (scheduling, process start, communicator init, checkpoint load; scaling up),
``maintenance`` (planned stops: save, downtime, restart).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import simpy

from simulator.failures.arrivals import RepairTimes, failure_arrivals, maintenance_times
from simulator.failures.model import JobModel

CATEGORIES = (
    "lost_work",
    "detection",
    "waiting",
    "restart",
    "checkpoint",
    "maintenance",
    "degraded",
)
MAINTENANCE = -1


@dataclass
class SeedResult:
    """Totals of one seed (s) and, if recorded, its timeline segments."""

    seed: int
    wall_s: float
    productive_s: float
    lost_s: dict[str, float]
    counts: np.ndarray  # per cause, then planned maintenance last
    segments: list[tuple[float, float, str, str]] | None

    @property
    def ettr(self) -> float:
        return self.productive_s / self.wall_s


class _Job:
    """State of one simulated job; :meth:`process` is the SimPy process."""

    def __init__(self, m: JobModel, horizon: float, seed: int, record: bool):
        self.m, self.horizon = m, horizon
        self.env = simpy.Environment()
        times, kinds = failure_arrivals(seed, m.cause_rate_s, m.cause_shape, horizon)
        maint = maintenance_times(seed, m.maintenance_rate_s, m.maintenance_periodic, horizon)
        if len(maint):
            times = np.concatenate([times, maint])
            kinds = np.concatenate([kinds, np.full(len(maint), MAINTENANCE, dtype=np.int64)])
            order = np.argsort(times, kind="stable")
            times, kinds = times[order], kinds[order]
        self.arrivals = (times.tolist(), kinds.tolist())
        self.repairs = RepairTimes(seed, m.repair_law, m.repair_mean_s, m.repair_sigma)
        self.acc = dict.fromkeys(CATEGORIES, 0.0)
        self.productive = 0.0
        self.counts = np.zeros(len(m.cause_names) + 1, dtype=np.int64)
        self.segments: list | None = [] if record else None
        self.pool, self.returns, self.deficit, self.missing = m.spares, [], 0, 0
        self.todo: list[list] | None = None  # recovery phases [category, seconds, cause]
        self.running = False
        self.t0 = self.phase_t0 = 0.0
        self.speed = 1.0
        self.cycle = m.interval_s + m.pause_s
        self.proc = self.env.process(self.process())
        self.env.process(self.source())

    # ------------------------------------------------------------------ processes

    def source(self):
        env, proc = self.env, self.proc
        for t, k in zip(*self.arrivals, strict=True):
            yield env.timeout(t - env.now)
            proc.interrupt(k)

    def process(self):
        env = self.env
        while True:
            try:
                if self.todo is None:
                    self.begin_run()
                    yield env.timeout(self.run_end() - env.now)
                    self.finish_run(env.now, failed=False)
                    self.todo = self.scale_up_phases()
                else:
                    self.phase_t0 = env.now
                    yield env.timeout(sum(p[1] for p in self.todo))
                    self.account_phases(env.now)
                    self.todo = None
                    self.absorb_pool()
            except simpy.Interrupt as intr:
                self.interrupted(intr.cause)

    def run(self) -> None:
        self.env.run(until=self.horizon)
        if self.running:
            self.finish_run(self.horizon, failed=False)
        elif self.todo is not None:
            self.account_phases(self.horizon)

    # ------------------------------------------------------------------ training

    def begin_run(self) -> None:
        m = self.m
        self.running, self.t0 = True, self.env.now
        dp = m.dp - self.replicas_missing()
        step = m.step_time_s
        if dp < m.dp and m.step_time_for is not None:
            step = m.step_time_for(dp)
        self.speed = m.step_time_s / (step * m.slowdown)

    def run_end(self) -> float:
        """A running job stops by itself only to scale up when a repaired node is back."""
        if self.m.policy == "elastic" and self.missing and self.returns:
            return max(self.env.now, self.returns[0])
        return self.horizon + 1.0

    def finish_run(self, t: float, failed: bool) -> None:
        """Settle the run from ``t0`` to ``t``: training kept or lost, checkpoint pauses."""
        m, x = self.m, t - self.t0
        T, L = m.interval_s, self.cycle
        n = math.floor(x / L)
        r = x - n * L
        train = n * T + min(r, T)
        pause = n * m.pause_s + max(0.0, r - T)
        kept_cycles = n if not failed else min(n, max(0, math.floor((x - m.drain_s) / L)))
        kept = train if not failed else kept_cycles * T
        speed = self.mean_speed(t if not failed else self.t0 + kept_cycles * L)  # of kept work
        self.productive += kept * speed
        self.acc["degraded"] += kept * (1.0 - speed)
        self.acc["lost_work"] += train - kept
        self.acc["checkpoint"] += pause
        self.running = False
        if self.segments is not None:
            self.record_cycles(n, r, kept_cycles if failed else n + 1)

    def mean_speed(self, t: float) -> float:
        """The run's speed (healthy steps per step taken) averaged from ``t0`` to ``t`` (the
        end of the work it keeps): one speed a run here; a fleet's slow nodes change it
        within a run."""
        return self.speed

    def record_cycles(self, n: int, r: float, kept_cycles: int) -> None:
        m, seg = self.m, self.segments
        for j in range(n + 1):
            start = self.t0 + j * self.cycle
            train = m.interval_s if j < n else min(r, m.interval_s)
            if train > 0:
                seg.append((start, start + train, "training" if j < kept_cycles else "lost", ""))
            pause = m.pause_s if j < n else max(0.0, r - m.interval_s)
            if pause > 0:
                seg.append((start + train, start + train + pause, "checkpoint", ""))

    # ------------------------------------------------------------------ recovery

    def interrupted(self, k: int) -> None:
        now = self.env.now
        if self.running:
            self.finish_run(now, failed=k != MAINTENANCE)
        elif self.todo is not None:
            self.account_phases(now)
            if k == MAINTENANCE:
                return  # the job is down anyway: the work is done during the outage
        self.counts[k] += 1
        self.todo = self.maintenance_phases() if k == MAINTENANCE else self.failure_phases(k)

    def failure_phases(self, k: int) -> list[list]:
        m, now = self.m, self.env.now
        self.collect(now)
        # a failure takes out nodes the job and its pool still have: nodes in repair do not
        # fail again (this bounds the repair queue by nodes + spares)
        lost_nodes = min(int(m.cause_nodes_out[k]), m.nodes + m.spares - len(self.returns))
        take = min(self.pool, lost_nodes)
        self.pool -= take
        self.deficit += lost_nodes - take
        for _ in range(lost_nodes):
            heapq.heappush(self.returns, now + self.repairs.draw())
        if m.policy == "elastic" and self.deficit:
            limit = self.max_missing_nodes()
            shrink = min(self.deficit, max(0, limit - self.missing))
            self.missing += shrink
            self.deficit -= shrink
        detect = float(m.cause_detect_s[k])
        cause = m.cause_names[k]
        wait = max(0.0, self.deficit_ready() - now - detect) if self.deficit else 0.0
        return [
            ["detection", detect, cause],
            ["waiting", wait, cause],
            ["restart", m.restart_s(self.world_gpus()), cause],
        ]

    def maintenance_phases(self) -> list[list]:
        m = self.m
        return [
            ["maintenance", m.pause_s + m.drain_s, "maintenance"],
            ["maintenance", m.maintenance_duration_s, "maintenance"],
            ["maintenance", m.restart_s(self.world_gpus()), "maintenance"],
        ]

    def scale_up_phases(self) -> list[list]:
        m = self.m
        self.collect(self.env.now)
        take = min(self.pool, self.missing)
        self.pool -= take
        self.missing -= take
        return [
            ["restart", m.pause_s + m.drain_s, "scale_up"],
            ["restart", m.restart_s(self.world_gpus()), "scale_up"],
        ]

    def account_phases(self, t: float) -> None:
        """Charge the time since the recovery began to its phases; keep what remains."""
        elapsed = t - self.phase_t0
        remaining = []
        for phase in self.todo:
            category, seconds, cause = phase
            used = min(seconds, elapsed)
            if used > 0:
                self.acc[category] += used
                if self.segments is not None:
                    start = t - elapsed
                    self.segments.append((start, start + used, category, cause))
                elapsed -= used
            if seconds - used > 0:
                remaining.append([category, seconds - used, cause])
        self.phase_t0 = t
        self.todo = remaining or None
        self.collect(t)

    # ------------------------------------------------------------------ nodes

    def absorb_pool(self) -> None:
        """Elastic: spares back in the pool by the end of a recovery rejoin the job."""
        take = min(self.pool, self.missing)
        self.pool -= take
        self.missing -= take

    def collect(self, now: float) -> None:
        """Repaired nodes back by ``now`` first fill the job's deficit, then the spare pool."""
        while self.returns and self.returns[0] <= now:
            heapq.heappop(self.returns)
            if self.deficit:
                self.deficit -= 1
            else:
                self.pool += 1

    def deficit_ready(self) -> float:
        """When enough nodes are back from repair to cover the deficit."""
        return heapq.nsmallest(self.deficit, self.returns)[-1]

    def replicas_missing(self) -> int:
        per_node = max(1, self.m.gpus_per_node // self.m.gpus_per_replica)
        return self.missing * per_node

    def max_missing_nodes(self) -> int:
        per_node = max(1, self.m.gpus_per_node // self.m.gpus_per_replica)
        return (self.m.dp - 1) // per_node

    def world_gpus(self) -> int:
        return self.m.gpus - self.replicas_missing() * self.m.gpus_per_replica


def simulate_job(m: JobModel, horizon_s: float, seed: int, record: bool = False) -> SeedResult:
    """Simulate ``horizon_s`` of wall clock of job ``m`` with random streams of ``seed``
    (a job-wide failure model; :func:`simulator.failures.fleet.simulate_fleet_job` draws
    them node by node)."""
    job = _Job(m, horizon_s, seed, record)
    job.run()
    return SeedResult(seed, horizon_s, job.productive, job.acc, job.counts, job.segments)
