"""Many steps from one simulated step: the step-time distribution under variability.

The simulated step is re-timed (:mod:`simulator.engine.retime`) with drawn factors: each
GPU's persistent speed, each compute task's run-to-run jitter, each collective's
(:mod:`simulator.scenario.variability`). Columns are steps x data-parallel replicas in
symmetric mode (a simulated rank stands for its replica's copies and its
tensor/context-parallel peers), steps alone in full mode.

A sample's step time is the engine's step time times the re-timed step over the same graph
re-timed with every factor 1: with no variability every sample is the engine's step exactly,
and a step whose periods were repeated (the steady state) scales by its simulated part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.engine.retime import (
    COMM,
    COMPUTE,
    Retimable,
    Waits,
    replica_block,
    retimable,
    retime,
)
from simulator.model.variability import slowest_of
from simulator.scenario.variability import VariabilityConfig
from simulator.schedule.step import StepGraph

QUANTILES = (0.5, 0.9, 0.99)
CHUNK = 256  # compute tasks' jitter drawn at once (one numpy call, not one per task)
TOP_PEERS = 3  # a rank's slowest peers by persistent speed, drawn one by one (Draws)


@dataclass(frozen=True)
class StepSamples:
    """Per step drawn: ``frame`` (step, step_time_s, slowdown against the variability-free
    step, pacing_rank: the GPU the others waited on longest, its pipeline stage and that
    wait in s) and the variability-free step time (s).

    >>> from simulator.api import load, run
    >>> drawn = run(load("scenarios/examples/pipeline-1f1b.yaml"), samples=5).samples
    >>> len(drawn.frame), bool((drawn.frame["step_time_s"] >= drawn.base_step_time_s).all())
    (5, True)
    """

    frame: pd.DataFrame
    base_step_time_s: float

    def summary(self) -> dict:
        t = self.frame["step_time_s"].to_numpy()
        out = {"samples": len(t), "variability_free_step_time_s": self.base_step_time_s}
        for q in QUANTILES:
            out[f"step_time_p{round(q * 100)}_s"] = float(np.quantile(t, q))
        out["step_time_mean_s"] = float(t.mean())
        out["step_time_max_s"] = float(t.max())
        out["variability_cost"] = float(t.mean() / self.base_step_time_s - 1)
        out["pacing_ranks"] = sorted(set(self.frame["pacing_rank"].tolist()))
        return out


class Draws:
    """The factor of each node of a :class:`Retimable` per column, drawn as asked.

    ``peers``: how many GPUs a simulated rank's compute stands for within its replica. They
    meet at its tensor-parallel collectives, so a compute task ends with the slowest of them:
    the largest over peers of (persistent speed x jitter), per column. The three slowest
    peers by persistent speed are drawn one by one (``top[rank]``: their log factors); the
    rest are taken at the third's speed with the slowest of their jitters (an upper bound
    on them; exact up to three peers). ``slowest[rank]`` (fleets x replicas) says which
    peer is the slowest. ``fleets`` sets of GPUs are drawn, each for ``steps / fleets``
    steps in a row."""

    def __init__(self, r: Retimable, v: VariabilityConfig, steps, replicas, peers, ranks, seed,
                 fleets: int = 1):  # fmt: skip
        self.r, self.v, self.steps, self.replicas, self.peers = r, v, steps, replicas, peers
        self.rng = np.random.default_rng(seed)
        self._buffer: list[tuple[np.ndarray, np.ndarray | None]] = []
        z = {rank: self.rng.standard_normal((fleets, replicas, peers)) for rank in ranks}
        self.slowest = {rank: z[rank].argmax(axis=2) for rank in ranks}
        each = steps // fleets
        self.explicit = min(peers, TOP_PEERS)
        self.top = {}
        for rank in ranks:
            logs = -np.sort(-v.gpu_spread * z[rank], axis=2)[..., : self.explicit]
            self.top[rank] = np.repeat(logs, each, axis=0).reshape(-1, self.explicit).T
        self.persistent = {rank: np.exp(self.top[rank][0]) for rank in ranks}

    def factor(self, node: int, kind: int) -> np.ndarray | float:
        v, width = self.v, self.steps * self.replicas
        if kind == COMPUTE:
            rank = int(self.r.rank[node])
            if not v.kernel_jitter:
                return self.persistent[rank]
            z, rest = self._jitter()
            top, sigma = self.top[rank], v.kernel_jitter
            x = top[0] + sigma * z[0]
            for j in range(1, self.explicit):
                x = np.maximum(x, top[j] + sigma * z[j])
            if rest is not None:
                x = np.maximum(x, top[-1] + sigma * rest)
            return np.exp(x)
        if kind == COMM and v.comm_jitter:
            block = replica_block(int(self.r.block[node]), self.replicas)
            z = self.rng.standard_normal((self.steps, self.replicas // block))
            return np.repeat(np.exp(v.comm_jitter * z), block, axis=1).reshape(width)
        return 1.0

    def _jitter(self) -> tuple[np.ndarray, np.ndarray | None]:
        """A compute task's standard normal jitter per column for the explicit peers, and the
        slowest of the rest's (None: no rest), drawn ``CHUNK`` tasks at a time."""
        if not self._buffer:
            width, rest = self.steps * self.replicas, self.peers - self.explicit
            z = self.rng.standard_normal((CHUNK, self.explicit, width))
            tail = slowest_of(self.rng, rest, (CHUNK, width)) if rest else [None] * CHUNK
            self._buffer = list(zip(z, tail, strict=True))
        return self._buffer.pop()


def step_samples(
    step: StepGraph,
    task_times: np.ndarray | Retimable,
    step_time_s: float,
    variability: VariabilityConfig,
    steps: int,
    seed: int,
    fleets: int = 1,
) -> StepSamples:
    """``steps`` steps of ``step`` (simulated once: ``task_times`` per task, ``step_time_s``
    its step time) with ``variability``'s draws from ``seed``; ``task_times`` may be the
    step's :class:`Retimable` already made. ``fleets`` > 1 draws that many sets of GPUs,
    ``steps`` steps each (the frame's ``fleet`` column)."""
    plan = step.plan
    grid = plan.grid
    ranks = sorted(step.stage_of)
    full = len(ranks) == grid.size
    replicas = 1 if full else grid.dp
    peers = 1 if full else grid.tp * grid.cp
    r = retimable_step(step, task_times)
    base = float(retime(r, 1, 1, lambda n, k: 1.0)[0])
    each, steps = steps, steps * fleets
    draws = Draws(r, variability, steps, replicas, peers, ranks, seed, fleets)
    waits = Waits(steps, replicas, ranks)
    ends = retime(r, steps, replicas, draws.factor, waits).reshape(steps, replicas).max(axis=1)
    times = step_time_s * (ends / base) if base > 0 else np.full(steps, step_time_s)
    rows = []
    for n in range(steps):
        total = waits.total[n]
        i, k = np.unravel_index(total.argmax(), total.shape)
        rank = ranks[int(i)]
        member = int(draws.slowest[rank][n // each, k])
        gpu = rank if full else _peer(grid, rank, int(k), member)
        stage = step.stage_of[rank]
        rows.append((n // each, n, times[n], times[n] / step_time_s, gpu, stage, total[i, k]))
    columns = ["fleet", "step", "step_time_s", "slowdown", "pacing_rank", "pacing_stage"]
    frame = pd.DataFrame(rows, columns=[*columns, "wait_s"])
    if fleets == 1:
        frame = frame.drop(columns="fleet")
    return StepSamples(frame, step_time_s)


def _peer(grid, rank: int, replica: int, member: int) -> int:
    """The GPU of replica ``replica`` that is peer ``member`` (tp fastest, then cp) of the
    simulated ``rank``."""
    pp = grid.coords(rank)["pp"]
    return grid.rank(tp=member % grid.tp, cp=member // grid.tp, dp=replica, pp=pp)


def fleet_speeds(
    step: StepGraph,
    task_times: np.ndarray | Retimable,
    step_time_s: float,
    variability: VariabilityConfig,
    fleets: int,
    steps: int,
    seed: int,
) -> np.ndarray:
    """Per draw of a fleet of GPUs (new persistent speeds each), the mean of ``steps`` drawn
    steps over the variability-free step."""
    drawn = step_samples(step, task_times, step_time_s, variability, steps, seed, fleets)
    frame = drawn.frame if fleets > 1 else drawn.frame.assign(fleet=0)
    return frame.groupby("fleet")["step_time_s"].mean().to_numpy() / step_time_s


def slow_gpu_costs(
    step: StepGraph, task_times: np.ndarray | Retimable, factor: float, replica: int = 0
) -> np.ndarray:
    """Per pipeline stage, the step's multiplier when one GPU of that stage in one replica
    (``replica``) runs ``factor`` times slower: every stage at once, a column each, by
    re-timing the simulated step. In symmetric mode the slow GPU is one replica's copy of
    the stage's simulated rank (its peers wait on it at their tensor-parallel collectives,
    the other replicas at the gradient reduction); in full mode the stage's first rank."""
    plan = step.plan
    grid = plan.grid
    ranks = sorted(step.stage_of)
    full = len(ranks) == grid.size
    replicas = 1 if full else grid.dp
    stages = grid.pp
    r = retimable_step(step, task_times)
    first = {}
    for rank in ranks:
        first.setdefault(step.stage_of[rank], rank)
    column = {first[s]: s * replicas + (0 if full else replica) for s in range(stages)}
    width = stages * replicas

    def slowed(node: int, kind: int):
        col = column.get(int(r.rank[node]))
        if kind != COMPUTE or col is None:
            return 1.0
        out = np.ones(width)
        out[col] = factor
        return out

    base = float(retime(r, 1, 1, lambda n, k: 1.0)[0])
    ends = retime(r, stages, replicas, slowed).reshape(stages, replicas).max(axis=1)
    return ends / base


def retimable_step(step: StepGraph, task_times: np.ndarray | Retimable) -> Retimable:
    """The step's :class:`Retimable` (``task_times`` as it is when already one). A
    collective's block is the number of replicas its group spans where they are a
    contiguous, aligned run of data-parallel indices (the columns' blocks), else every
    replica (a group of scattered or overlapping replicas: all of them meet, the
    conservative reading)."""
    if isinstance(task_times, Retimable):
        return task_times
    grid = step.plan.grid
    dp_of: dict[tuple, int] = {}

    def block_of(group: tuple[int, ...]) -> int:
        if group not in dp_of:
            dps = sorted({grid.coords(g)["dp"] for g in group})
            b = len(dps)
            aligned = dps[0] % b == 0 and dps == list(range(dps[0], dps[0] + b))
            dp_of[group] = b if aligned else grid.dp
        return dp_of[group]

    return retimable(step.graph, task_times, block_of)
