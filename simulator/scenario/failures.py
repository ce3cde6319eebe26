"""The ``failures:`` section: what breaks, how often, and what recovery costs.

A job-level model (days) of interruptions: failure causes with a rate per component and unit
of time, planned maintenance, detection, hot spares and repair, restart cost, checkpoints,
the policy after a failure, and stragglers. :mod:`simulator.failures` simulates it.

Rates are events per component per unit of time, written ``COUNT / [DIVISOR /]... TIME`` (a
bare number is refused: its unit would be a guess), so the arithmetic of a published count can
stay in the file: ``"148 / 16384 / 54 d"`` is 148
interruptions over 16,384 GPUs in 54 days. ``preset: llama3-table5`` starts from the Llama 3
paper's Table 5 (:data:`PRESETS`); keys given beside it win, as for ``model: NAME``.

>>> f = FailuresConfig(preset="llama3-table5")
>>> round(f.causes["faulty_gpu"].rate * 86400 * 16384 * 54, 6)
148.0
>>> round(FailuresConfig(node_rate="6.5 / 1000 / d").node_rate * 86400 * 1000, 9)
6.5
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from simulator.scenario.fields import Frozen
from simulator.scenario.fleet import FleetConfig
from simulator.scenario.rates import Rate, parse_rate  # noqa: F401 - re-exported
from simulator.units import Bandwidth, Bytes, Seconds

Fraction = Annotated[float, Field(gt=0, le=1)]

# What a cause's rate is counted per, and what it takes out. A node is the unit of replacement:
# a GPU, host or NIC fault removes its node until repaired; a link or software fault removes
# nothing (the job restarts on the same nodes).
Per = Literal["gpu", "node", "switch", "link", "job"]
Component = Literal["gpu", "host", "nic", "switch", "link", "software"]
NODES_OUT = {"gpu": 1, "host": 1, "nic": 1, "switch": 1, "link": 0, "software": 0}


class Cause(Frozen):
    """One failure cause.

    ``rate`` is per component (``per``) per second; the job has ``count`` such components
    (default: its GPUs, nodes, or 1 for ``job``; switches and links from the topology).
    ``law`` is the inter-arrival law of the cause's stream over the whole job (exponential, or
    Weibull with ``shape``; shape < 1 clusters failures, as fitted to HPC logs by Schroeder and
    Gibson 2006, with shapes of 0.7-0.8; at least 0.2: below it the gaps' mean rests on
    astronomically rare huge gaps, and a seed's count strays far from its rate).
    ``nodes_out`` nodes leave the job until repaired (default by ``takes_out``).
    ``detected_by`` picks the timeout that notices it: a crash or lost heartbeat, or a hang
    that only the collective watchdog sees.
    """

    rate: Rate
    per: Per = "gpu"
    count: Annotated[int, Field(ge=1)] | None = None
    takes_out: Component = "gpu"
    """What a failure of this cause takes out of the job: a GPU, host, NIC, switch, link,
    or nothing (software)."""
    nodes_out: Annotated[int, Field(ge=0, le=1024)] | None = None
    law: Literal["exponential", "weibull"] = "exponential"
    shape: Annotated[float, Field(ge=0.2, le=100)] | None = None
    detected_by: Literal["heartbeat", "watchdog"] = "heartbeat"
    category: str | None = None
    """An informational label (the presets give the Llama 3 paper's categories); not used by
    the simulation."""

    @model_validator(mode="after")
    def shape_given_for_weibull(self):
        if self.law == "weibull" and self.shape is None:
            raise ValueError("law: weibull needs a shape > 0")
        if self.law == "exponential" and self.shape not in (None, 1.0):
            raise ValueError("shape applies to law: weibull (exponential is shape 1)")
        return self

    @property
    def nodes_lost(self) -> int:
        return self.nodes_out if self.nodes_out is not None else NODES_OUT[self.takes_out]


class Maintenance(Frozen):
    """Planned interruptions (firmware, kernel, configuration): job-wide ``rate``, each taking
    a checkpoint first, then ``duration`` down, then a restart. ``periodic`` spaces them
    evenly; ``exponential`` at random."""

    rate: Rate = 0.0
    law: Literal["periodic", "exponential"] = "periodic"
    """periodic (evenly spaced) or exponential (at random)."""
    duration: Seconds = 0.0


class Detection(Frozen):
    """Time from a failure to the job knowing of it, then to find and evict the culprit.

    ``heartbeat_timeout``: torch.distributed.elastic's rendezvous keep-alive (every 5 s, 3
    missed = 15 s). ``watchdog_timeout``: PyTorch's ProcessGroupNCCL default timeout (10 min).
    ``diagnosis`` (health checks that find the culprit node): 5 min, half the "less than 10
    minutes" MegaScale reports on average for detecting a failure and running its diagnostic
    tests (Jiang et al., NSDI 2024, sec. 6.3). ``eviction``: 0 unless given.
    """

    heartbeat_timeout: Seconds = 15.0
    watchdog_timeout: Seconds = 600.0
    diagnosis: Seconds = 300.0
    eviction: Seconds = 0.0


class Repair(Frozen):
    """Time to bring a failed node back (it then joins the spare pool). No measured repair
    time of H100 training nodes is published; the default, 3 days (exponential), is the low
    end of the 3-5 days the Nonuniform Tensor Parallelism study takes for hardware faults
    (Arfeen et al. 2025, arXiv:2504.06095, fig. 4) - give your cluster's."""

    law: Literal["exponential", "lognormal", "fixed"] = "exponential"
    """Distribution of repair times: exponential, lognormal or fixed."""
    mean: Seconds = 3 * 86400.0
    """Mean time to repair a node (s)."""
    sigma: Annotated[float, Field(gt=0, le=10)] = 1.0  # lognormal: std of log(time)
    """Sigma of the log of a lognormal repair time."""

    @model_validator(mode="after")
    def positive_mean_for_a_random_law(self):
        if self.law != "fixed" and self.mean <= 0:
            raise ValueError(
                f"a {self.law} repair time needs a mean above 0 (law: fixed with mean: 0 "
                "returns nodes at once)"
            )
        return self


class Restart(Frozen):
    """Restart cost: scheduling, process start (imports, model build), then communicator
    initialisation ``init_fixed + init_per_rank x world size``, then the checkpoint load.

    Init defaults from ByteDance's MegaScale (Jiang et al., NSDI 2024, sec. 3.5): under 30 s
    for more than 10,000 GPUs after their fixes; 5 s fixed plus (30 - 5) s over 12,288 GPUs
    ~ 2 ms per rank. Scheduling (1 min, the re-queue time of Kokolis et al.'s example) and
    process start (3 min: imports, model build, data loader) make a 16K-GPU restart about
    5 min, the restart overhead u0 Kokolis et al. take in their ETTR model (arXiv:2410.21680;
    they give 5-20 min).
    """

    scheduling: Seconds = 60.0
    """Time for the scheduler to restart the job (s)."""
    process_start: Seconds = 180.0
    """Process start: imports, model build, data loader (s)."""
    init_fixed: Seconds = 5.0
    """Fixed part of communicator initialisation (s)."""
    init_per_rank: Seconds = 2e-3
    """Communicator initialisation per rank of the world (s)."""


class Checkpoint(Frozen):
    """Checkpoints every ``interval`` of training (None: Daly's optimum).

    ``blocking`` pauses training while the state (``state_bytes``, default from the memory
    ledger: parameters and optimizer state) goes to storage at ``write_bandwidth`` shared by
    all writers, plus ``overhead``. ``async`` pauses only to copy each GPU's share to host memory
    at ``host_copy_bandwidth`` (PCIe Gen5 x16, 64 GB/s a direction), then drains in the
    background; a failure before the drain ends loses that checkpoint. Loading reads the state
    at ``read_bandwidth``. Both default to the cluster's storage (``cluster.storage``: its
    aggregate bandwidth, or its per-node bandwidth times the job's nodes if that is less).
    """

    interval: Seconds | None = None
    mode: Literal["blocking", "async"] = "blocking"
    """blocking (training pauses for the write) or async (only for the copy to host memory)."""
    write_bandwidth: Bandwidth | None = None
    read_bandwidth: Bandwidth | None = None
    host_copy_bandwidth: Bandwidth = 64e9
    overhead: Seconds = 0.0
    state_bytes: Bytes | None = None


class SlowGPU(Frozen):
    """A GPU computing ``factor`` times slower, or capped at ``power_cap`` of peak."""

    rank: Annotated[int, Field(ge=0)]
    """The slowed GPU's rank."""
    factor: Annotated[float, Field(ge=1, le=1000)] | None = None
    power_cap: Fraction | None = None

    @model_validator(mode="after")
    def one_of(self):
        if (self.factor is None) == (self.power_cap is None):
            raise ValueError("give factor or power_cap (one of them)")
        return self

    @property
    def slowdown(self) -> float:
        """Compute-time multiplier; a power cap at fraction f of peak runs 1/f slower."""
        return self.factor if self.factor is not None else 1.0 / self.power_cap


class SlowLink(Frozen):
    """A link between two topology nodes at ``fraction`` of its bandwidth, or ``down`` (its
    traffic routed around it)."""

    src: str | int
    """The link's source node in the topology (a name, or a GPU index)."""
    dst: str | int
    """The link's destination node."""
    fraction: Fraction | None = None
    down: bool = False

    @model_validator(mode="after")
    def one_of(self):
        if (self.fraction is None) == (not self.down):
            raise ValueError("give fraction, or down: true (one of them)")
        return self


class RandomStragglers(Frozen):
    """Each step, each GPU is independently slow with probability ``fraction``, computing
    ``factor`` times slower; ``exposure`` is the share of the step that waits for it (1 for a
    straggler in a TP group or pipeline stage, which gates every layer)."""

    fraction: Annotated[float, Field(ge=0, le=1)]
    factor: Annotated[float, Field(ge=1, le=1000)]
    exposure: Fraction = 1.0


class Stragglers(Frozen):
    """Slow parts inside the step (``gpus``, ``links``: through the step layer's perturb
    seam) and the random straggler model that inflates the job-level step time."""

    gpus: list[SlowGPU] = []
    links: list[SlowLink] = []
    random: RandomStragglers | None = None
    """Random stragglers that inflate the job-level step time."""

    def in_step(self) -> list[tuple]:
        """The fixed stragglers as plain tuples for the step layer:
        ``("slow_compute", rank, factor)`` and ``("slow_link", src, dst, fraction)``
        (fraction 0 for a link that is down).

        >>> Stragglers(gpus=[{"rank": 3, "power_cap": 0.5}]).in_step()
        [('slow_compute', 3, 2.0)]
        """
        out: list[tuple] = [("slow_compute", g.rank, g.slowdown) for g in self.gpus]
        for link in self.links:
            out.append(("slow_link", link.src, link.dst, 0.0 if link.down else link.fraction))
        return out


PRESETS: dict[str, dict[str, Any]] = {
    # Llama 3 paper (arXiv:2407.21783) sec. 3.3.4 and Table 5: 419 unexpected interruptions in
    # a 54-day snapshot of 405B pre-training on 16,384 H100 (2,048 nodes of 8), plus 47 planned.
    # Counts, not the printed percentages (they sum to 94.9%). GPU causes are counted per GPU
    # (count / 16,384 / 54 d), all others per node (count / 2,048 / 54 d): the paper gives no
    # switch or link inventory for the job, so network faults scale with nodes. Sum: 268 GPU
    # + 54 + 35 + 32 + 7 + 7 + 3 + 3 + 2 + 2 + 2 + 2 + 2 = 419.
    "llama3-table5": {
        "causes": {
            "faulty_gpu": {"rate": "148 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "gpu_hbm3": {"rate": "72 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "software_bug": {
                "rate": "54 / 2048 / 54 d",
                "per": "node",
                "takes_out": "software",
                "category": "Dependency",
            },
            "network_switch_cable": {
                "rate": "35 / 2048 / 54 d",
                "per": "node",
                "takes_out": "switch",
                "category": "Network",
            },
            "host_maintenance": {
                "rate": "32 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Unplanned Maintenance",
            },
            "gpu_sram": {"rate": "19 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "gpu_system_processor": {"rate": "17 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "nic": {
                "rate": "7 / 2048 / 54 d",
                "per": "node",
                "takes_out": "nic",
                "category": "Host",
            },
            "nccl_watchdog": {
                "rate": "7 / 2048 / 54 d",
                "per": "node",
                "takes_out": "software",
                "detected_by": "watchdog",
                "category": "Unknown",
            },
            "silent_data_corruption": {"rate": "6 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "gpu_thermal": {"rate": "6 / 16384 / 54 d", "per": "gpu", "category": "GPU"},
            "ssd": {
                "rate": "3 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
            "power_supply": {
                "rate": "3 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
            "server_chassis": {
                "rate": "2 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
            "io_expansion_board": {
                "rate": "2 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
            "dependency": {
                "rate": "2 / 2048 / 54 d",
                "per": "node",
                "takes_out": "software",
                "category": "Dependency",
            },
            "cpu": {
                "rate": "2 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
            "system_memory": {
                "rate": "2 / 2048 / 54 d",
                "per": "node",
                "takes_out": "host",
                "category": "Host",
            },
        },
        # 47 planned interruptions in 54 days ("at least one a day"), at random times.
        "maintenance": {"rate": "47 / 54 d", "law": "exponential"},
    },
}


def _merge(base: Any, over: Any) -> Any:
    """``over`` on ``base``, mapping by mapping; a key set to None in ``over`` is removed
    (how a preset's causes, or one of them, are cleared)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = {}
        for k, v in {**base, **over}.items():
            if k in over and over[k] is None:
                continue
            out[k] = _merge(base[k], v) if k in base and k in over else v
        return out
    return over


def _resolve_preset(data: Any) -> Any:
    if isinstance(data, dict) and "preset" in data:
        name = data["preset"]
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown failures preset {name!r}; known: {', '.join(PRESETS)}")
        rest = {k: v for k, v in data.items() if k != "preset"}
        return _merge(PRESETS[name], rest)
    return data


def _spares(value: Any) -> int | str:
    """``auto``, or a whole number of nodes from 0 to 1,000,000."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a whole number of nodes, or auto (got {value!r})")
    if not 0 <= value <= 10**6:
        raise ValueError(f"must be greater than or equal to 0 and at most 1,000,000 (got {value})")
    return value


class FailuresConfig(Frozen):
    """The ``failures:`` section (see the module docstring).

    ``causes`` (name -> :class:`Cause`) or ``node_rate``, one total rate per node (per
    node-day in cluster studies: ``"6.5 / 1000 / d"``), which acts as one cause taking out a
    host. ``spares``: hot-spare nodes; ``auto`` (the default) sizes the pool as ByteRobust
    does (arXiv:2509.16293), to the 99th percentile of nodes away for repair at once: a
    Poisson count whose mean is the rate of node-removing failures times the mean repair time
    (Little's law). A key set to ``null`` removes what a preset gives (``causes: null``, or
    ``causes: {software_bug: null}``). ``policy``: ``restart_on_spares`` waits for a spare or a
    repair; ``elastic`` continues with fewer data-parallel replicas until repair.
    """

    causes: dict[str, Cause] = {}
    node_rate: Rate | None = None
    maintenance: Maintenance = Maintenance()
    """Planned interruptions: their rate, law and duration."""
    detection: Detection = Detection()
    """How long a failure takes to notice and diagnose."""
    spares: Annotated[int | str, BeforeValidator(_spares)] = "auto"
    repair: Repair = Repair()
    """Time to bring a failed node back."""
    restart: Restart = Restart()
    """What a restart costs before training resumes."""
    checkpoint: Checkpoint = Checkpoint()
    """How often and how checkpoints are taken, and at what bandwidth."""
    policy: Literal["restart_on_spares", "elastic"] = "restart_on_spares"
    stragglers: Stragglers = Stragglers()
    """Slow GPUs and links inside the step, and random stragglers."""
    fleet: FleetConfig | None = None  # node-level failures (simulator.scenario.fleet)
    """Failures node by node: lemons, two-stage repair, standbys, slow nodes (none: job-
    wide)."""

    @model_validator(mode="before")
    @classmethod
    def resolve_preset(cls, data: Any) -> Any:
        return _resolve_preset(data)

    @model_validator(mode="after")
    def one_rate_model(self):
        if self.causes and self.node_rate is not None:
            raise ValueError("give causes or node_rate, not both")
        return self

    def all_causes(self) -> dict[str, Cause]:
        """The causes, with ``node_rate`` as one cause ``node`` taking out a host."""
        if self.node_rate is not None:
            rate = f"{self.node_rate!r} / s"  # already per second
            return {"node": Cause(rate=rate, per="node", takes_out="host")}
        return dict(self.causes)


# ----------------------------------------------------------------------------- checks

Finding = tuple[tuple[str | int, ...], str]


def check_failures(scenario, step_time_s: float | None = None) -> list[Finding]:
    """Problems of the failures section that need the rest of the scenario (and, for the
    checkpoint interval, the step time), as (field path, message) like
    :func:`simulator.scenario.checks.check_scenario`."""
    f = scenario.failures
    if f is None:
        return []
    out: list[Finding] = []
    nodes = nodes_of(scenario)
    if f.spares != "auto" and f.spares > nodes:
        out.append(
            (("failures", "spares"), f"{f.spares} hot spares exceed the job's {nodes} nodes")
        )
    seen_ranks: set[int] = set()
    for i, gpu in enumerate(f.stragglers.gpus):
        if gpu.rank in seen_ranks:
            out.append(
                (
                    ("failures", "stragglers", "gpus", i, "rank"),
                    f"rank {gpu.rank} is listed twice: give one entry per slow GPU",
                )
            )
        seen_ranks.add(gpu.rank)
        if gpu.rank >= scenario.num_gpus:
            out.append(
                (
                    ("failures", "stragglers", "gpus", i, "rank"),
                    f"rank {gpu.rank} is not one of the {scenario.num_gpus} GPUs",
                )
            )
    interval = f.checkpoint.interval
    if step_time_s is not None and interval is not None and interval < step_time_s:
        out.append(
            (
                ("failures", "checkpoint", "interval"),
                f"checkpoint interval {interval:g} s is shorter than one step "
                f"({step_time_s:.3g} s)",
            )
        )
    return out


def _gpus_per_node(scenario) -> int:
    """GPUs per node (the unit of replacement): the topology's node; a TPU host has 4 chips;
    8 (a DGX or HGX server) when no topology is given."""
    topo = scenario.cluster.topology
    node = getattr(topo, "node", None)
    if node is not None:
        return node.gpus
    return 4 if getattr(topo, "kind", None) == "torus" else 8


def nodes_of(scenario) -> int:
    """Nodes of the job (at least 1)."""
    return max(1, scenario.num_gpus // _gpus_per_node(scenario))
