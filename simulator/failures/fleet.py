"""The job over days node by node: lemons, two-stage repair, misdiagnosis, warm standbys, a
spare pool, and slow nodes found or not (``failures.fleet``, :mod:`simulator.scenario.fleet`).

:class:`FleetJob` is the job-level simulation (:mod:`simulator.failures.job`) with its node
failures drawn per node instead of for the job as a whole. Every node of the job has a
lifetime drawn when it joins (Weibull of its own rate, renewed after each repair that fixes
it); lemons fail ``lemon_multiplier`` times as often as the rest, and so does a node whose
repair reported success without fixing it, until a repair does. A failure costs detection,
then a replacement: a warm standby at once, else a node of the spare pool after
``pool_wait_s``, else a wait for the first repaired node. The failed node goes to repair -
automatic, then manual for ``escalate`` of them - and comes back to the standbys (up to
their number) or the pool; a lemon is retired after ``retire_after`` failures. With
probability ``misdiagnosis`` a healthy node is blamed and drained instead, and the faulty one
stays in the job, failing again at the lemon rate.

Nodes also turn slow (fail-slow) at ``slow_rate_s`` each; a slow node slows the step by the
step simulation's own answer for one slow GPU at its pipeline stage (``slow_costs``, drawn
uniformly over stages). The job runs degraded until the node fails, or, with ``slow_evict``
and a step at least ``slow_threshold`` times the healthy one, until the monitor has seen it
for ``slow_delay_s``: then the job saves a checkpoint and restarts without it (no work lost).
Each restart also draws the job's speed from ``speeds`` (the step-time distribution over
fleets of GPUs, :func:`simulator.api.fleet_step_times`): a new set of GPUs, a new pace.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from simulator.failures.arrivals import rng
from simulator.failures.job import SeedResult, _Job, simulate_job

FLEET_STREAM = 1_000_081
NODE_FAILURE, SLOW_NODE = "node_failure", "slow_node"  # the fleet's causes, named in counts
JOB, STANDBY, POOL, REPAIR, RETIRED = range(5)


@dataclass(frozen=True)
class FleetModel:
    """Node-level failures in SI numbers (s, 1/s); see the module doc."""

    node_rate_s: float  # mean hard-failure rate per node at the start (lemons included)
    detect_s: float
    shape: float = 1.0
    lemon_fraction: float = 0.15
    lemon_multiplier: float = 5.0
    retire_after: int | None = 3
    standbys: int = 16
    pool_wait_s: float = 1200.0
    auto_s: float = 7200.0
    manual_s: float = 172800.0
    escalate: float = 0.8
    unfixed_auto: float = 0.4
    unfixed_manual: float = 0.2
    misdiagnosis: float = 0.0
    slow_rate_s: float = 0.0
    slow_costs: tuple[float, ...] = (1.0,)
    slow_evict: bool = True
    slow_threshold: float = 1.05
    slow_delay_s: float = 600.0
    speeds: tuple[float, ...] = (1.0,)

    @property
    def good_rate_s(self) -> float:
        """A sound node's rate: lemons at ``lemon_multiplier`` times it average to the mean."""
        f = self.lemon_fraction
        return self.node_rate_s / (1.0 - f + f * self.lemon_multiplier)


class FleetJob(_Job):
    """One seed of the job with node-level failures (module doc)."""

    def __init__(self, m, horizon: float, seed: int, record: bool):
        self.f: FleetModel = m.fleet
        f = self.f
        # a stream per purpose and one per node (lifetimes, slow onsets, repair outcomes):
        # the same seed draws the same failures for a node whatever the pool's size
        self.seed = seed
        self.diagnosis = rng(seed, FLEET_STREAM - 1)  # who is blamed
        self.stages = rng(seed, FLEET_STREAM - 2)  # where a slow node sits
        self.gen = rng(seed, FLEET_STREAM)  # the job's pace after each restart
        self.node_gens: dict[int, np.random.Generator] = {}
        self.whole_at = 0.0  # when the last replacement on its way joins
        spare = m.spares
        total = m.nodes + f.standbys + spare
        self.lemon = rng(seed, FLEET_STREAM + 1).random(total) < f.lemon_fraction
        self.faulty = np.zeros(total, dtype=bool)
        self.failures = np.zeros(total, dtype=np.int64)
        self.where = np.array([JOB] * m.nodes + [STANDBY] * f.standbys + [POOL] * spare)
        self.slow: dict[int, float] = {}  # slow job nodes -> the step multiplier each causes
        self.version = np.zeros(total, dtype=np.int64)  # a node's events void when it moves
        self.events: list[tuple[float, int, str, int, int]] = []
        self.returns: list[tuple[float, int]] = []  # (back from repair at, node)
        self.seq = 0
        self.k_node = m.cause_names.index(NODE_FAILURE)
        self.k_slow = m.cause_names.index(SLOW_NODE)
        self.segments_at: list[tuple[float, float]] = []  # (from s, speed) within the run
        self.waiting_nodes = 0  # replacements the job waits for from repair
        super().__init__(m, horizon, seed, record)
        for node in np.flatnonzero(self.where == JOB):
            self.join(int(node), 0.0)
        self.wake = self.env.event()
        self.env.process(self.node_source())

    # ------------------------------------------------------------------ node events

    def node_gen(self, node: int) -> np.random.Generator:
        gen = self.node_gens.get(node)
        if gen is None:
            gen = self.node_gens[node] = rng(self.seed, FLEET_STREAM + 2 + node)
        return gen

    def rate(self, node: int) -> float:
        f = self.f
        bad = self.lemon[node] or self.faulty[node]
        return f.good_rate_s * (f.lemon_multiplier if bad else 1.0)

    def join(self, node: int, now: float) -> None:
        """``node`` enters the job: its failure and slow-onset times from now."""
        self.where[node] = JOB
        self.version[node] += 1
        rate, shape, gen = self.rate(node), self.f.shape, self.node_gen(node)
        if rate > 0:
            scale = (1.0 / rate) / math.gamma(1.0 + 1.0 / shape)
            life = scale * float(gen.standard_exponential()) ** (1.0 / shape)
            self.push(now + life, "fail", node)
        if self.f.slow_rate_s > 0:
            self.push(now + float(gen.exponential(1.0 / self.f.slow_rate_s)), "slow", node)

    def leave(self, node: int, where: int) -> None:
        self.where[node] = where
        self.version[node] += 1
        self.slow.pop(node, None)

    def push(self, t: float, kind: str, node: int) -> None:
        if t >= self.horizon:
            return
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, node, int(self.version[node])))
        if hasattr(self, "wake") and not self.wake.triggered:
            self.wake.succeed()

    def node_source(self):
        env = self.env
        while True:
            while self.events and self.events[0][4] != self.version[self.events[0][3]]:
                heapq.heappop(self.events)  # the node has moved since: void
            self.wake = env.event()
            if not self.events:
                yield self.wake
                continue
            t = self.events[0][0]
            yield env.any_of([env.timeout(max(0.0, t - env.now)), self.wake])
            if not self.events or self.events[0][0] > env.now:
                continue
            _, _, kind, node, version = heapq.heappop(self.events)
            if version != self.version[node]:
                continue
            if kind == "slow":  # the job runs on, slower: no interruption
                self.turn_slow(node)
            else:
                self.proc.interrupt((kind, node))

    # ------------------------------------------------------------------ interruptions

    def interrupted(self, k) -> None:
        if not isinstance(k, tuple):
            super().interrupted(k)
            return
        kind, node = k
        now = self.env.now
        if self.running:
            self.finish_run(now, failed=kind == "fail")
        elif self.todo is not None:
            self.account_phases(now)
        if kind == "fail":
            self.counts[self.k_node] += 1
            self.todo = self.failure_phases_of(node)
        elif self.todo is not None:  # found while the job is down: swapped in the recovery
            self.counts[self.k_slow] += 1
            wait = self.replace_node(node, now, failed=False)
            self.todo = [["waiting", wait, SLOW_NODE], *self.todo]
        else:  # the monitor evicts a slow node: save, drain it, restart without it
            self.counts[self.k_slow] += 1
            self.todo = self.eviction_phases(node)

    def turn_slow(self, node: int) -> None:
        now, f = self.env.now, self.f
        cost = float(f.slow_costs[int(self.stages.integers(len(f.slow_costs)))])
        if self.running:
            self.set_speed(now, self.healthy_speed() / max([cost, 1.0, *self.slow.values()]))
        self.slow[node] = cost
        self.watch(node, cost, now)

    def watch(self, node: int, cost: float, now: float) -> None:
        """The step monitor drains ``node`` ``slow_delay_s`` after ``now`` if its cost shows."""
        f = self.f
        if f.slow_evict and cost >= f.slow_threshold:
            self.push(now + f.slow_delay_s, "evict", node)

    def failure_phases_of(self, node: int) -> list[list]:
        m, f, now = self.m, self.f, self.env.now
        blamed, faulty = node, True
        if f.misdiagnosis > 0 and self.diagnosis.random() < f.misdiagnosis:
            others = np.flatnonzero(self.where == JOB)
            others = others[others != node]
            if len(others):
                blamed, faulty = int(others[self.diagnosis.integers(len(others))]), False
                self.faulty[node] = True  # still broken, still in the job: fails again
                cost = self.slow.get(node)
                self.join(node, now + f.detect_s)  # its lifetime drawn again, as a faulty node
                if cost is not None:  # still slow: the monitor still finds it
                    self.slow[node] = cost
                    self.watch(node, cost, now)
        wait = self.replace_node(blamed, now + f.detect_s, faulty=faulty)
        restart = m.restart_s(m.gpus)
        return [
            ["detection", f.detect_s, NODE_FAILURE],
            ["waiting", wait, NODE_FAILURE],
            ["restart", restart, NODE_FAILURE],
        ]

    def eviction_phases(self, node: int) -> list[list]:
        m = self.m
        save = m.pause_s + m.drain_s
        wait = self.replace_node(node, self.env.now + save, failed=False)
        return [
            ["checkpoint", save, SLOW_NODE],
            ["waiting", wait, SLOW_NODE],
            ["restart", m.restart_s(m.gpus), SLOW_NODE],
        ]

    def replace_node(self, node: int, at: float, failed: bool = True, faulty: bool = True) -> float:
        """Send ``node`` to repair (or retire it after its failures) and bring in a
        replacement from ``at``: the wait (s) beyond ``at`` until the job has every node back,
        this replacement and any still on its way from an earlier failure. ``failed``: a
        failure counts towards retiring it (not a drained slow node); ``faulty``: it is
        broken (not a healthy node blamed by a misdiagnosis, which repair finds sound).
        With no standby, no pool node and nothing in repair, the job cannot run whole again:
        it waits to the end."""
        f = self.f
        self.collect(at)
        self.failures[node] += int(failed and faulty)
        retire = f.retire_after is not None and self.failures[node] >= f.retire_after
        self.leave(node, RETIRED if retire else REPAIR)
        if not retire:
            self.send_to_repair(node, at, faulty)
        joined = None
        for source, delay in ((STANDBY, 0.0), (POOL, f.pool_wait_s)):
            spare = np.flatnonzero(self.where == source)
            if len(spare):
                joined = at + delay
                self.join(int(spare[0]), joined)
                break
        if joined is None and self.returns:
            back, spare = heapq.heappop(self.returns)
            joined = max(at, back)
            self.join(spare, joined)
        if joined is None:  # no node left to bring in: stalled to the end
            joined = self.horizon
        self.whole_at = max(self.whole_at, joined)
        return max(0.0, self.whole_at - at)

    def send_to_repair(self, node: int, at: float, faulty: bool = True) -> None:
        """Automatic repair, then manual for ``escalate`` of them; a faulty node may come
        back unfixed (a sound one, drained by mistake, comes back sound)."""
        f, gen = self.f, self.node_gen(node)
        manual = gen.random() < f.escalate
        took = f.auto_s + (f.manual_s if manual else 0.0)
        unfixed = gen.random() < (f.unfixed_manual if manual else f.unfixed_auto)
        self.faulty[node] = faulty and unfixed
        heapq.heappush(self.returns, (at + took, node))

    def collect(self, now: float) -> None:
        """Nodes back from repair by ``now`` refill the standbys, then the pool."""
        while self.returns and self.returns[0][0] <= now:
            _, node = heapq.heappop(self.returns)
            standbys = int((self.where == STANDBY).sum())
            self.leave(node, STANDBY if standbys < self.f.standbys else POOL)

    # ------------------------------------------------------------------ speed

    def healthy_speed(self) -> float:
        return self.run_speed

    def begin_run(self) -> None:
        super().begin_run()
        f = self.f
        draw = float(f.speeds[int(self.gen.integers(len(f.speeds)))])
        self.run_speed = self.speed / draw
        self.speed = self.run_speed / max([1.0, *self.slow.values()])
        self.segments_at = [(self.t0, self.speed)]

    def set_speed(self, t: float, speed: float) -> None:
        self.speed = speed
        self.segments_at.append((t, speed))

    def mean_speed(self, t: float) -> float:
        """The speed averaged over the run's time from ``t0`` to ``t``, piece by piece."""
        span = t - self.t0
        if span <= 0 or not self.segments_at:
            return self.speed
        total = 0.0
        ends = [start for start, _ in self.segments_at[1:]] + [math.inf]
        for (start, speed), end in zip(self.segments_at, ends, strict=True):
            if start >= t:
                break
            total += speed * (min(end, t) - start)
        return total / span


def simulate_fleet_job(m, horizon_s: float, seed: int, record: bool = False) -> SeedResult:
    """One seed of job ``m``: node by node where ``m.fleet`` is given (:class:`FleetJob`),
    else the job-wide model (:func:`simulator.failures.job.simulate_job`)."""
    if m.fleet is None:
        return simulate_job(m, horizon_s, seed, record)
    job = FleetJob(m, horizon_s, seed, record)
    job.run()
    return SeedResult(seed, horizon_s, job.productive, job.acc, job.counts, job.segments)


def with_fleet(model, fleet, slow_costs=(1.0,), speeds=(1.0,)):
    """``model`` (a :class:`~simulator.failures.model.JobModel`) with node-level failures
    from ``fleet`` (:class:`~simulator.scenario.fleet.FleetConfig`): its node-removing causes
    become each node's rate (their sum over the job's nodes, detected as they were), the
    others stay job-wide; ``slow_costs`` (step multiplier of one slow GPU at each pipeline
    stage) and ``speeds`` (step-time multipliers of fleets of GPUs) from the step layer."""
    from dataclasses import replace

    node = model.cause_nodes_out > 0
    node_rate = float((model.cause_rate_s * model.cause_nodes_out)[node].sum())
    weights = model.cause_rate_s[node]
    detect = (
        float((model.cause_detect_s[node] * weights).sum() / weights.sum()) if node.any() else 0.0
    )
    keep = ~node
    repair, slow, lemons = fleet.repair, fleet.slow, fleet.lemons
    fm = FleetModel(
        node_rate_s=node_rate / model.nodes,
        detect_s=detect,
        shape=fleet.shape,
        lemon_fraction=lemons.fraction,
        lemon_multiplier=lemons.rate_multiplier,
        retire_after=lemons.retire_after,
        standbys=fleet.standbys,
        pool_wait_s=fleet.pool_wait,
        auto_s=repair.automatic,
        manual_s=repair.manual,
        escalate=repair.escalate,
        unfixed_auto=repair.unfixed_after_automatic,
        unfixed_manual=repair.unfixed_after_manual,
        misdiagnosis=fleet.misdiagnosis,
        slow_rate_s=slow.rate,
        slow_costs=tuple(float(c) for c in slow_costs),
        slow_evict=slow.evict,
        slow_threshold=slow.threshold,
        slow_delay_s=slow.delay,
        speeds=tuple(float(v) for v in speeds),
    )
    zeros = np.zeros(2)
    return replace(
        model,
        cause_names=(
            *(n for n, k in zip(model.cause_names, keep, strict=True) if k),
            NODE_FAILURE,
            SLOW_NODE,
        ),
        cause_rate_s=np.concatenate([model.cause_rate_s[keep], zeros]),
        cause_shape=np.concatenate([model.cause_shape[keep], np.ones(2)]),
        cause_nodes_out=np.concatenate([model.cause_nodes_out[keep], np.zeros(2, dtype=np.int64)]),
        cause_detect_s=np.concatenate([model.cause_detect_s[keep], [detect, slow.delay]]),
        fleet=fm,
    )
