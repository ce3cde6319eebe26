"""A job's failure model in SI numbers, resolved from a scenario's ``failures:`` section.

:func:`resolve_job` needs what only the step layer knows (the step time, the checkpoint state
bytes, the step time of a smaller job for the elastic policy); the adapter supplies them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from simulator.failures.optimum import daly_interval
from simulator.infeasible import InfeasibleError
from simulator.scenario.failures import FailuresConfig, nodes_of

NO_FAILURE_INTERVAL_S = 1e12  # no failures: checkpoints never pay off, take none


@dataclass(frozen=True)
class JobModel:
    """Everything the job-level simulation needs; times in s, rates in 1/s.

    ``cause_rate_s`` is each cause's rate over the whole job (per-component rate x count).
    Training runs in cycles of ``interval_s`` of training then ``pause_s`` of checkpoint
    pause; an asynchronous checkpoint commits ``drain_s`` after its pause ends.
    """

    step_time_s: float
    gpus: int
    nodes: int
    dp: int
    gpus_per_node: int
    gpus_per_replica: int
    tokens_per_step: float
    cause_names: tuple[str, ...]
    cause_rate_s: np.ndarray
    cause_shape: np.ndarray
    cause_nodes_out: np.ndarray
    cause_detect_s: np.ndarray
    maintenance_rate_s: float
    maintenance_periodic: bool
    maintenance_duration_s: float
    spares: int
    repair_law: str
    repair_mean_s: float
    repair_sigma: float
    restart_fixed_s: float
    init_per_rank_s: float
    interval_s: float
    pause_s: float
    drain_s: float
    policy: str
    slowdown: float = 1.0
    step_time_for: Callable[[int], float] | None = field(default=None, compare=False)
    interval_requested_s: float | None = None  # as given (None: Daly's optimum)
    spares_auto: bool = False  # the pool was sized by :func:`auto_spares`
    write_Bps: float = 0.0  # checkpoint write and read bandwidth used (B/s)
    read_Bps: float = 0.0
    fleet: object = None  # node-level failures (simulator.failures.fleet.FleetModel), or None

    @property
    def node_loss_rate_s(self) -> float:
        """Nodes taken out for repair per second (each cause's rate x the nodes it removes;
        with a fleet, its nodes' failures at their starting rate)."""
        return float((self.cause_rate_s * self.cause_nodes_out).sum()) + self._fleet_rate_s

    @property
    def unplanned_rate_s(self) -> float:
        return float(self.cause_rate_s.sum()) + self._fleet_rate_s

    @property
    def _fleet_rate_s(self) -> float:
        return self.fleet.node_rate_s * self.nodes if self.fleet is not None else 0.0

    @property
    def mtti_s(self) -> float:
        """Mean time between unplanned interruptions (inf without failures)."""
        rate = self.unplanned_rate_s
        return 1.0 / rate if rate > 0 else math.inf

    def restart_s(self, gpus: int) -> float:
        """Scheduling, process start, communicator init for ``gpus`` ranks, checkpoint load."""
        return self.restart_fixed_s + self.init_per_rank_s * gpus

    def with_interval(self, interval_s: float) -> JobModel:
        """The same job checkpointing every ``interval_s`` of training (rounded up to whole
        steps, and no shorter than an asynchronous checkpoint's drain)."""
        return replace(
            self, interval_s=_cycle_training(interval_s, self), interval_requested_s=interval_s
        )


def _cycle_training(interval_s: float, m: JobModel) -> float:
    """Whole steps of training between checkpoints; an asynchronous drain must finish first."""
    step = m.step_time_s * m.slowdown
    steps = max(1, math.ceil(interval_s / step - 1e-9))
    return max(steps * step, m.drain_s)


def straggler_slowdown(fraction: float, factor: float, exposure: float, gpus: int) -> float:
    """Expected step-time multiplier of random stragglers: a step is slow when any of the
    ``gpus`` is (probability ``1 - (1 - fraction)^gpus``), by ``1 + (factor - 1) exposure``.

    >>> round(straggler_slowdown(1e-4, 2.0, 1.0, 16384), 4)
    1.8057
    """
    p_any = -math.expm1(gpus * math.log1p(-fraction)) if fraction < 1 else 1.0
    return 1.0 + (factor - 1.0) * exposure * p_any


def _causes(f: FailuresConfig, counts: dict[str, int]):
    """Per cause: names, job-wide rates (1/s), Weibull shapes (1: exponential), nodes each
    takes out, and the time to detect and evict (s)."""
    names, rates, shapes, nodes_out, detect = [], [], [], [], []
    det = f.detection
    for name, cause in f.all_causes().items():
        n = cause.count if cause.count is not None else counts.get(cause.per)
        if n is None:
            raise InfeasibleError(f"failures.causes.{name}: give count (how many {cause.per}s)")
        names.append(name)
        rates.append(cause.rate * n)
        shapes.append(cause.shape if cause.law == "weibull" else 1.0)
        nodes_out.append(cause.nodes_lost)
        timeout = det.watchdog_timeout if cause.detected_by == "watchdog" else det.heartbeat_timeout
        detect.append(timeout + det.diagnosis + det.eviction)
    return names, rates, shapes, nodes_out, detect


def storage_bandwidths(scenario) -> tuple[float, float]:
    """(write, read) B/s of the job's checkpoints: ``failures.checkpoint``'s when given (a
    read without its own figure reads at the write's), else the cluster's storage for the
    job's nodes (:class:`simulator.scenario.schema.StorageConfig`)."""
    ck, storage, nodes = scenario.failures.checkpoint, scenario.cluster.storage, nodes_of(scenario)
    write = ck.write_bandwidth or storage.write_Bps(nodes)
    read = ck.read_bandwidth or ck.write_bandwidth or storage.read_Bps(nodes)
    return float(write), float(read)


def _checkpoint_costs(ck, state: float, gpus: int, write: float, read: float):
    """(training pause per checkpoint, background drain, load at restart), seconds: a blocking
    save writes the state at the shared storage bandwidth ``write``; an async one pauses only
    to copy each GPU's share to host memory, then drains in the background."""
    if ck.mode == "blocking":
        pause, drain = ck.overhead + state / write, 0.0
    else:
        pause = ck.overhead + state / gpus / ck.host_copy_bandwidth
        drain = state / write
    return pause, drain, state / read


SPARES_QUANTILE = 0.99  # ByteRobust's sizing of its warm-standby pool (arXiv:2509.16293)


def auto_spares(node_loss_rate_s: float, repair_mean_s: float, quantile: float = SPARES_QUANTILE):
    """Hot spares covering the ``quantile`` of nodes away for repair at once: with node
    losses at ``node_loss_rate_s`` and repairs of mean ``repair_mean_s``, the nodes in repair
    are Poisson with mean rate x repair time (an M/G/infinity queue, whatever the repair law).

    >>> auto_spares(356 / (54 * 86400), 3 * 86400)  # Llama 3's node losses, 3-day repairs
    31
    >>> auto_spares(0.0, 3 * 86400)
    0
    """
    mean = node_loss_rate_s * repair_mean_s
    if mean <= 0:
        return 0
    k, term = 0, math.exp(-mean) if mean < 700 else 0.0
    if term == 0.0:  # a mean too large for exp(-mean): the normal approximation
        return math.ceil(mean + 2.326 * math.sqrt(mean))
    total = term
    while total < quantile:
        k += 1
        term *= mean / k
        total += term
    return k


def resolve_job(
    scenario,
    step_time_s: float,
    state_bytes: float,
    component_counts: dict[str, int] | None = None,
    step_time_for: Callable[[int], float] | None = None,
) -> JobModel:
    """The :class:`JobModel` of ``scenario`` (which must have a ``failures:`` section).

    Parameters
    ----------
    step_time_s
        Healthy step time of the full job (s).
    state_bytes
        Bytes of one checkpoint (used unless ``failures.checkpoint.state_bytes`` is given).
    component_counts
        Switches and links of the topology, for causes counted ``per: switch|link`` without a
        ``count``.
    step_time_for
        Step time (s) with a given number of data-parallel replicas (elastic policy).
    """
    f: FailuresConfig = scenario.failures
    gpus, nodes = scenario.num_gpus, nodes_of(scenario)
    counts = {"gpu": gpus, "node": nodes, "job": 1, **(component_counts or {})}
    ck = f.checkpoint
    state = ck.state_bytes if ck.state_bytes is not None else state_bytes
    write, read = storage_bandwidths(scenario)
    pause, drain, load = _checkpoint_costs(ck, state, gpus, write, read)
    r = f.restart
    p = scenario.parallelism
    rs = f.stragglers.random
    slowdown = straggler_slowdown(rs.fraction, rs.factor, rs.exposure, gpus) if rs else 1.0
    model = JobModel(
        step_time_s=step_time_s,
        gpus=gpus,
        nodes=nodes,
        dp=scenario.dp,
        gpus_per_node=max(1, gpus // nodes),
        gpus_per_replica=p.tp * p.pp * p.cp,
        tokens_per_step=float(scenario.training.global_batch * scenario.training.seq_len),
        **_failure_laws(f, counts),
        restart_fixed_s=r.scheduling + r.process_start + r.init_fixed + load,
        init_per_rank_s=r.init_per_rank,
        interval_s=0.0,
        pause_s=pause,
        drain_s=drain,
        policy=f.policy,
        slowdown=slowdown,
        step_time_for=step_time_for,
        write_Bps=write,
        read_Bps=read,
    )
    if f.spares == "auto":
        model = replace(model, spares=auto_spares(model.node_loss_rate_s, f.repair.mean))
    interval = ck.interval
    if interval is None:
        mtti = model.mtti_s
        interval = NO_FAILURE_INTERVAL_S if math.isinf(mtti) else daly_interval(pause, mtti)
    return replace(model.with_interval(interval), interval_requested_s=ck.interval)


def _failure_laws(f: FailuresConfig, counts: dict[str, int]) -> dict:
    """The :class:`JobModel` fields of what fails and how it is mended: each cause's rate,
    shape, nodes out and detection time over ``counts`` components, maintenance, spares and
    repair."""
    names, rates, shapes, nodes_out, detect = _causes(f, counts)
    return {
        "cause_names": tuple(names),
        "cause_rate_s": np.asarray(rates, dtype=float),
        "cause_shape": np.asarray(shapes, dtype=float),
        "cause_nodes_out": np.asarray(nodes_out, dtype=np.int64),
        "cause_detect_s": np.asarray(detect, dtype=float),
        "maintenance_rate_s": f.maintenance.rate,
        "maintenance_periodic": f.maintenance.law == "periodic",
        "maintenance_duration_s": f.maintenance.duration,
        "spares": 0 if f.spares == "auto" else f.spares,
        "spares_auto": f.spares == "auto",
        "repair_law": f.repair.law,
        "repair_mean_s": f.repair.mean,
        "repair_sigma": f.repair.sigma,
    }
