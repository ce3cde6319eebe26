"""The scenario schema: pydantic v2 models, frozen, unknown keys forbidden.

A scenario describes one training run (``model``, ``cluster``, ``parallelism``, ``training``,
``precision``, ``simulation``, ``framework``, ``failures``, ``variability``); quantities take
unit strings ("400 Gb/s", "80 GiB", "1.5 us") or SI numbers (:mod:`simulator.units`).
Consistency between sections (degrees multiplying to the GPU count, divisibility) is checked
in :mod:`simulator.scenario.checks`, which knows the field paths to blame.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from simulator.collectives.algorithms import ALGORITHMS
from simulator.hardware import CATALOG as ACCELERATORS
from simulator.hardware import Accelerator, get_accelerator
from simulator.pipelines import get_schedule
from simulator.scenario.failures import FailuresConfig
from simulator.scenario.fields import (
    MAX_DEVICES,
    MIN_BUCKET_BYTES,
    Efficiency,
    Frozen,
    PosInt,
    Real,
    fields_equal,
)
from simulator.scenario.framework import FrameworkConfig
from simulator.scenario.model_config import MLAConfig, ModelConfig, MoEConfig  # noqa: F401 - the schema's names
from simulator.scenario.recompute import recompute_policy
from simulator.scenario.storage import StorageConfig
from simulator.scenario.topology_config import (
    FatTreeTopology,
    NodeSpec,
    NVSwitchTopology,
    TopologyConfig,
    TorusTopology,
    topology_devices,
)
from simulator.scenario.variability import VariabilityConfig
from simulator.units import Bandwidth, Bytes, Seconds, Unit, parse_quantity

# ----------------------------------------------------------------------------- cluster


def _gpu_count_supported(gpus: int) -> int:
    if gpus > MAX_DEVICES:
        raise ValueError(
            f"{gpus:,} GPUs exceed the {MAX_DEVICES:,} supported: the topology graph is built "
            f"in full (131,072 GPUs take about 1.2 GB)"
        )
    return gpus


def _resolve_accelerator(data: Any) -> Any:
    """A catalog name, or a mapping that may start from a catalog ``name`` and override."""
    if isinstance(data, str):
        try:
            return get_accelerator(data)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        try:
            base = get_accelerator(data["name"])
        except KeyError:
            return data  # a user-defined accelerator: every field must be given
        merged = base.model_dump()
        merged.update(data)
        return merged
    return data


class ClusterConfig(Frozen):
    """The machine: accelerator, GPU count (omitted when the topology determines it), network
    topology, checkpoint storage, and the facility's power usage effectiveness ``pue`` (Meta
    1.08 in 2023, Google 1.10 in 2021, the industry 1.56: Uptime Institute 2024)."""

    accelerator: Annotated[Accelerator, BeforeValidator(_resolve_accelerator)]
    """A catalog name (``trainsim accelerators``), or ``{name: ..., field: value}`` to override
    its figures."""
    gpus: Annotated[int, Field(ge=1), AfterValidator(_gpu_count_supported)] | None = None
    """GPUs in the job; omitted, the topology's device count."""
    topology: TopologyConfig | None = None
    """The network: an ``include:`` of a file in topologies/, or inline (kind nvswitch, fat_tree
    or torus)."""
    storage: StorageConfig = StorageConfig()
    """Where checkpoints go: aggregate and per-node bandwidth (B/s)."""
    pue: Annotated[float, Field(ge=1.0, le=3.0)] = 1.10

    @model_validator(mode="after")
    def gpu_count_known(self):
        if self.topology is None and self.gpus is None:
            raise ValueError("give gpus, or a topology that determines it")
        return self

    @property
    def num_gpus(self) -> int:
        return self.gpus if self.gpus is not None else topology_devices(self.topology)

    @property
    def topology_devices(self) -> int | None:
        return None if self.topology is None else topology_devices(self.topology)


# ----------------------------------------------------------------------------- parallelism


def _known_schedule(name: str) -> str:
    get_schedule(name)  # ValueError listing the known schedules
    return name


class PipelineConfig(Frozen):
    """Pipeline schedule, one of :func:`simulator.pipelines.schedule_names` (gpipe, 1f1b,
    interleaved, flexible-interleaved, zb-h1, zb-h2, zb-1p, zb-2p, zb-v, dualpipe).
    ``first_stage_layers``/``last_stage_layers`` give the first and last stages fewer layers to
    make room for the embedding and output layer, as Llama 3 405B does (126 layers on 16 stages:
    7 + 14 x 8 + 7); the middle stages split the rest evenly. Under dualpipe and zb-v, whose
    stage 0 holds both ends, they give the first and last model chunks' layers. With
    interleaving each stage splits its layers over its chunks, the lighter chunk next to the
    embedding or the output layer; an end stage with one layer fewer than chunks leaves that
    chunk to the embedding (or output layer) alone.
    """

    schedule: Annotated[str, AfterValidator(_known_schedule)] = "1f1b"
    """The pipeline schedule, by name (see above)."""
    virtual_stages: PosInt = 1
    """Model chunks per stage for the interleaved schedules (1: none)."""
    first_stage_layers: PosInt | None = None
    last_stage_layers: PosInt | None = None


def _known_algorithm(name: str) -> str:
    """``auto`` or an algorithm of the registry (:data:`simulator.collectives.ALGORITHMS`)."""
    if name != "auto" and name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: auto, {', '.join(ALGORITHMS)}")
    return name


CollectiveAlgorithm = Annotated[str, AfterValidator(_known_algorithm)]


def _zero_stage(value: Any) -> Any:
    if isinstance(value, bool):  # `zero: true` is not "ZeRO-1"
        raise ValueError("zero takes a stage 0, 1, 2, 3 or fsdp, not a boolean")
    return 3 if isinstance(value, str) and value.strip().lower() == "fsdp" else value


def _bucket_bytes(value: Any) -> float:
    value = parse_quantity(value, "bytes")
    if value < MIN_BUCKET_BYTES:
        raise ValueError(
            f"{value:g} B is below the 1 MB minimum (bare numbers are bytes: write a unit, "
            f"e.g. 25 MB). PyTorch DDP's smallest bucket is 1 MiB, its default 25 MB; tinier "
            f"buckets make an all-reduce per few parameters"
        )
    return value


class ParallelismConfig(Frozen):
    """Degrees of each parallelism (``dp`` None: from the GPU count). ``recompute``: none,
    selective, full or ``{modules: [...]}`` (:mod:`simulator.scenario.recompute`). EP is
    carved out of DP x CP for MoE layers (as Megatron does), so ep need not enter the
    product ``dp x tp x pp x cp = gpus``. ``expert_tp`` (default ``tp``) is the tensor-parallel
    degree inside experts; other than ``tp``, the MoE layers fold expert TP x EP x expert DP
    over each stage's ``tp x cp x dp`` ranks (Megatron-core's MoE parallel folding; it needs
    sequence parallelism when tp > 1). ``zero`` 0-3, or ``fsdp`` for 3. ``bucket_size`` (B) is
    the gradient bucket of DDP / ZeRO-2; ZeRO-3 gathers ``fsdp_unit_layers`` layers at a time
    and prefetches ``fsdp_prefetch`` units ahead; ``fsdp_backward_prefetch`` is PyTorch FSDP's
    policy for the backward's gathers (``pre``, its default, issues the next gather before the
    current unit's gradient; ``post`` after it; ``none`` only when the unit is reached).
    ``order`` lays the rank grid out innermost first (Llama 3: tp, cp, pp, dp): consecutive
    ranks, hence GPUs of one node, share the innermost groups. ``moe_dispatcher``: NCCL's
    all-to-all (a copy per expert) or DeepEP's (:mod:`simulator.collectives.deepep`)."""

    dp: PosInt | None = None
    """Data-parallel replicas; omitted, gpus / (tp x pp x cp)."""
    tp: PosInt = 1
    """Tensor-parallel degree: each layer's matrices split over tp GPUs (Megatron)."""
    pp: PosInt = 1
    """Pipeline stages."""
    cp: PosInt = 1
    """Context-parallel degree: each sequence split over cp ranks (ring attention)."""
    ep: PosInt = 1
    """Expert-parallel degree of MoE layers: carved out of dp x cp, or with another
    expert_tp folded over each stage's tp x cp x dp ranks."""
    expert_tp: PosInt | None = None
    """Tensor-parallel degree inside the experts (default: tp); another value folds expert
    TP x EP x expert DP over each stage."""
    moe_dispatcher: Literal["alltoall", "deepep"] = "alltoall"
    zero: Annotated[Literal[0, 1, 2, 3], BeforeValidator(_zero_stage)] = 0
    sequence_parallel: bool = False
    """Megatron's sequence parallelism: norms and dropout split over the TP group, its all-
    reduces as reduce-scatter and all-gather."""
    pipeline: PipelineConfig = PipelineConfig()
    """The pipeline schedule and its chunks."""
    recompute: Annotated[str, BeforeValidator(recompute_policy)] = "none"
    bucket_size: Annotated[float, BeforeValidator(_bucket_bytes), Unit("B")] = 25e6
    fsdp_unit_layers: PosInt = 1
    fsdp_prefetch: Annotated[int, Field(ge=0, le=64)] = 1
    fsdp_backward_prefetch: Literal["pre", "post", "none"] = "pre"
    order: list[Literal["tp", "cp", "pp", "dp"]] = ["tp", "cp", "pp", "dp"]
    collectives: dict[Literal["tp", "cp", "ep", "dp", "pp"], CollectiveAlgorithm] = {}
    """An algorithm forced per stream (``{tp: nvls, dp: ring}``); unnamed streams: NCCL's
    choice."""

    @model_validator(mode="after")
    def order_is_a_permutation(self):
        if sorted(self.order) != ["cp", "dp", "pp", "tp"]:
            raise ValueError("order must list tp, cp, pp and dp once each")
        return self

    @property
    def etp(self) -> int:
        return self.expert_tp or self.tp


# ----------------------------------------------------------------------------- training


class TrainingConfig(Frozen):
    """Batch in sequences: ``global_batch`` per step, ``micro_batch`` per forward pass.

    ``grad_clip``: gradient-norm clipping before the optimizer step (Megatron-LM's and
    torchtitan's default, max norm 1.0), which reads every local gradient once."""

    global_batch: PosInt
    micro_batch: PosInt = 1
    seq_len: PosInt
    """Tokens per sequence."""
    optimizer: Literal["adam", "sgd", "sgd_momentum"] = "adam"
    """adam (two moments), sgd_momentum (one) or sgd (none): the optimizer state per
    parameter."""
    flash_attention: bool = True
    """Fused attention that keeps no s x s score matrix (FlashAttention); off: the scores are
    stored for backward."""
    grad_clip: bool = True


# ----------------------------------------------------------------------------- precision

# Bytes per parameter of each recipe. ``master``: fp32 master weights kept by the optimizer;
# ``state``: bytes of each optimizer moment (Adam has 2, SGD with momentum 1).
RECIPES: dict[str, dict[str, float]] = {
    # ZeRO paper (Rajbhandari et al. 2020, sec. 3.1): fp16 params and grads, fp32 master + m + v
    "zero-mixed": {"params": 2, "grads": 2, "master": 4, "state": 4},
    # Megatron-LM bf16 with fp32 main grads (--accumulate-allreduce-grads-in-fp32): 18 B/param
    "megatron-bf16": {"params": 2, "grads": 4, "master": 4, "state": 4},
    # PyTorch AMP: fp32 params, grads and moments, plus the bf16 copy autocast keeps for GEMMs
    "torch-amp": {"params": 6, "grads": 4, "master": 0, "state": 4},
    # Pure bf16 weights and grads with fp32 moments and no master copy: 2+2+8 = 12 (slide 28)
    "pure-bf16": {"params": 2, "grads": 2, "master": 0, "state": 4},
    "fp32": {"params": 4, "grads": 4, "master": 0, "state": 4},
}
# moment tensors an optimizer keeps per parameter (Adam: m and v)
OPTIMIZER_MOMENTS = {"adam": 2, "sgd_momentum": 1, "sgd": 0}


def _resolve_recipe(data: Any) -> Any:
    if isinstance(data, str):
        data = {"recipe": data}
    if isinstance(data, dict) and isinstance(data.get("recipe"), str):
        if data["recipe"] not in RECIPES:
            raise ValueError(
                f"unknown precision recipe {data['recipe']!r}; known: {', '.join(sorted(RECIPES))}"
            )
    return data


class PrecisionConfig(Frozen):
    """Bytes per parameter by a named ``recipe``, or explicit ``params``/``grads``/``optimizer``.

    Explicit numbers override the recipe's. ``optimizer`` counts all optimizer state per
    parameter (master copy and moments); when absent it follows from the recipe and the
    optimizer in ``training``. ``activation_bytes`` is the size of one stored activation value.
    """

    recipe: str | None = "megatron-bf16"
    params: Annotated[Real, Field(gt=0, le=64), Unit("B")] | None = None
    grads: Annotated[Real, Field(gt=0, le=64), Unit("B")] | None = None
    optimizer: Annotated[Real, Field(ge=0, le=256), Unit("B")] | None = None
    compute_dtype: Literal["bf16", "fp16", "fp8", "fp32", "tf32"] = "bf16"
    """The matmuls' dtype, which sets the accelerator's peak FLOP/s."""
    activation_bytes: Annotated[Real, Field(gt=0, le=8), Unit("B")] = 2.0

    @model_validator(mode="before")
    @classmethod
    def resolve_recipe(cls, data: Any) -> Any:
        return _resolve_recipe(data)

    @model_validator(mode="after")
    def bytes_complete(self):
        if self.recipe is None and None in (self.params, self.grads, self.optimizer):
            raise ValueError("without a recipe, give params, grads and optimizer bytes")
        return self

    def bytes_per_param(self, optimizer: str) -> tuple[float, float, float]:
        """(params, grads, optimizer state) bytes per parameter for ``optimizer``."""
        r = RECIPES.get(self.recipe or "", {})
        params = self.params if self.params is not None else r["params"]
        grads = self.grads if self.grads is not None else r["grads"]
        if self.optimizer is not None:
            opt = self.optimizer
        else:
            opt = r["master"] + OPTIMIZER_MOMENTS[optimizer] * r["state"]
        return float(params), float(grads), float(opt)


# ----------------------------------------------------------------------------- scenario


class SimulationConfig(Frozen):
    """How to simulate: ``symmetric`` follows one rank per pipeline stage and lets symmetric
    copies load the network; ``full`` simulates every rank (up to about 1,024 GPUs).

    ``kernel_tasks`` splits each compute block (attention, MLP, experts, weight gradient) into
    one task per kernel (projections, attention core, norms, activation, residual adds), named
    after the op, so the trace can be held against a profiler's; two to three times the
    tasks, the same step time.

    ``comm_interference`` is the fraction ``s`` by which a GPU's compute slows while it runs a
    collective over scale-up (NVLink) links - NCCL's kernels take SMs and HBM bandwidth -;
    compute then progresses at 1/(1+s), and a collective over slower links (the network)
    slows it in proportion to its bandwidth. Default 0.189, the mean slowdown Lee et al.
    measured for GPT and LLaMA layers overlapping communication on 4-GPU A100, H100, MI250 and
    MI210 machines ("Characterizing Compute-Communication Overlap in GPU-Accelerated
    Distributed Deep Learning", arXiv:2507.03114, 2025; maximum 40%); 0 turns it off.

    ``repeat_steady_state`` lets a pipeline whose steady state repeats (1F1B, interleaved,
    zero-bubble H1/H2, or none at all) be simulated with its warm-up, two periods and its
    cool-down, the repetition checked and the periods between written into the trace as
    they would have run (:mod:`simulator.engine.steady_state`): the same trace, in a
    fraction of the time. ``false`` simulates every micro-batch.
    """

    mode: Literal["symmetric", "full"] = "symmetric"
    """``symmetric`` (one rank per pipeline stage, symmetric copies loading the network) or
    ``full`` (every rank)."""
    kernel_tasks: bool = False
    comm_interference: Annotated[Real, Field(ge=0, le=4)] = 0.189
    repeat_steady_state: bool = True


class Scenario(Frozen):
    """One training run (the module doc lists its sections); a sweep is a spec file. Frozen:
    a changed copy is made with ``simulator.api.with_overrides``, validated as a file is.

    >>> from simulator.api import load, with_overrides
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml")
    >>> s.parallelism.pp, s.training.global_batch
    (4, 16)
    >>> with_overrides(s, {"training.global_batch": 32}).training.global_batch
    32
    """

    name: str | None = None
    """The run's name in reports and output folders (default: the file's name)."""
    description: str | None = None
    """Free text about the run, kept with it; not simulated."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the run's random draws (variability, failures): the same seed gives the same
    results."""
    model: ModelConfig
    """The transformer (``model:``): a catalog name or an architecture."""
    cluster: ClusterConfig
    """The machine: accelerator, GPU count, topology, checkpoint storage."""
    parallelism: ParallelismConfig = ParallelismConfig()
    """How the model and batch are laid out over the GPUs."""
    training: TrainingConfig
    """Batch, sequence length and optimizer."""
    precision: PrecisionConfig = PrecisionConfig()
    """Bytes per parameter, gradient and optimizer state; the compute dtype."""
    simulation: SimulationConfig = SimulationConfig()
    """How the step is simulated (one rank per stage, or every rank)."""
    framework: FrameworkConfig = FrameworkConfig()
    """The training framework's costs beyond the kernels: CPU dispatch, memory it keeps."""
    failures: FailuresConfig | None = None
    """The failure model of ``trainsim goodput`` (none: the step alone)."""
    variability: VariabilityConfig = VariabilityConfig()  # read by `run --steps N`
    """Spreads of GPU speed and kernel and collective times, for ``trainsim run --steps``."""
    sweep: None = None  # studies are separate spec files: `trainsim sweep SPEC`
    """Not a scenario key: a sweep is a spec file run by ``trainsim sweep`` (set here, it is
    refused)."""

    @field_validator("sweep", mode="before")
    @classmethod
    def sweep_is_a_spec_file(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "a scenario holds no sweep: write a spec file (base: this scenario; grid:, zip:"
                " or samples: of dotted keys) and run `trainsim sweep SPEC`; see scenarios/sweeps/"
            )
        return None

    _origin: Any = PrivateAttr(default=None)  # its YAML data (api.with_overrides rebuilds it)
    __eq__ = fields_equal  # the fields, not where the scenario came from

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def dp(self) -> int:
        """Data-parallel degree, derived from the GPU count when not given."""
        p = self.parallelism
        if p.dp is not None:
            return p.dp
        return max(1, self.num_gpus // (p.tp * p.pp * p.cp))

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step (gradient-accumulation steps): the one
        place this is derived."""
        t = self.training
        return t.global_batch // self.dp // t.micro_batch


# Re-exported: field types and the topology section live in their own modules.
__all__ = [
    "ACCELERATORS", "MAX_DEVICES", "MIN_BUCKET_BYTES", "Bandwidth", "Bytes", "Efficiency",
    "FatTreeTopology", "Frozen", "NodeSpec", "NVSwitchTopology", "PosInt", "Real", "Scenario",
    "Seconds", "TopologyConfig", "TorusTopology",
]  # fmt: skip
