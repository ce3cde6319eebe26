"""Consistency checks across sections of a validated scenario, each blamed on one field.

pydantic validates each field; what spans sections (the degrees must multiply to the GPU
count, heads must split over tp, ...) is checked here so that each problem can name the
field a user should change.
"""

from __future__ import annotations

from simulator.collectives.algorithms import ALGORITHMS
from simulator.pipelines import get_schedule
from simulator.scenario.errors import FieldPath
from simulator.scenario.failures import check_failures
from simulator.scenario.schema import Scenario

Finding = tuple[FieldPath, str]


def _degrees(s: Scenario) -> list[Finding]:
    p, gpus = s.parallelism, s.num_gpus
    out: list[Finding] = []
    devices = s.cluster.topology_devices
    if s.cluster.gpus is not None and devices is not None and s.cluster.gpus > devices:
        out.append(
            (
                ("cluster", "gpus"),
                f"{s.cluster.gpus} GPUs requested but the topology has only {devices}",
            )
        )
    model_parallel = p.tp * p.pp * p.cp
    if p.dp is None:
        if gpus % model_parallel:
            out.append(
                (
                    ("parallelism", "tp"),
                    f"tp x pp x cp = {p.tp} x {p.pp} x {p.cp} = {model_parallel} does not "
                    f"divide the {gpus} GPUs",
                )
            )
    elif p.dp * model_parallel != gpus:
        out.append(
            (
                ("parallelism", "dp"),
                f"dp x tp x pp x cp = {p.dp} x {p.tp} x {p.pp} x {p.cp} = "
                f"{p.dp * model_parallel}, but the cluster has {gpus} GPUs",
            )
        )
    return out


def _model_split(s: Scenario) -> list[Finding]:
    m, p = s.model, s.parallelism
    out: list[Finding] = []
    if m.attention == "mha" and m.head_dim is None and m.hidden % m.heads:
        out.append(
            (
                ("model", "hidden"),
                f"hidden {m.hidden} does not split into {m.heads} heads; give head_dim "
                f"explicitly if the heads are not hidden / heads wide",
            )
        )
    if m.heads % p.tp:
        out.append((("model", "heads"), f"{m.heads} heads do not split over tp = {p.tp}"))
    if m.attention == "mha" and m.n_kv_heads % p.tp:
        out.append(
            (("model", "kv_heads"), f"{m.n_kv_heads} kv_heads do not split over tp = {p.tp}")
        )
    out += _layer_split(s)
    out += _expert_split(s)
    if m.ffn % p.tp:
        out.append((("model", "ffn"), f"ffn {m.ffn} does not split over tp = {p.tp}"))
    return out


def _expert_split(s: Scenario) -> list[Finding]:
    """Whether the experts split over EP and expert TP, and the EP groups over the ranks."""
    m, p = s.model, s.parallelism
    out: list[Finding] = []
    if m.moe is None:
        if p.ep > 1:
            out.append((("parallelism", "ep"), "ep > 1 needs an MoE model (model.moe)"))
    else:
        if m.moe.experts % p.ep:
            out.append(
                (("parallelism", "ep"), f"ep = {p.ep} does not divide the {m.moe.experts} experts")
            )
        if p.etp == p.tp and (s.dp * p.cp) % p.ep:
            # the rank grid carves each EP group out of dp x cp (Megatron-LM)
            out.append(
                (
                    ("parallelism", "ep"),
                    f"ep = {p.ep} must divide dp x cp = {s.dp} x {p.cp} = {s.dp * p.cp} "
                    f"(expert-parallel groups are carved out of the data-parallel ranks)",
                )
            )
        if p.etp != p.tp:
            stage = p.tp * p.cp * s.dp
            if stage % (p.etp * p.ep):
                # MoE parallel folding: expert TP x EP x expert DP over a stage's ranks
                out.append(
                    (
                        ("parallelism", "expert_tp"),
                        f"expert_tp x ep = {p.etp} x {p.ep} must divide a pipeline stage's "
                        f"tp x cp x dp = {p.tp} x {p.cp} x {s.dp} = {stage} ranks (the MoE "
                        f"layers fold expert TP, EP and expert DP over them)",
                    )
                )
            if p.tp > 1 and not p.sequence_parallel:
                out.append(
                    (
                        ("parallelism", "expert_tp"),
                        f"expert_tp = {p.etp} other than tp = {p.tp} needs "
                        f"sequence_parallel: true (each rank dispatches its own share of the "
                        f"tokens; Megatron-LM requires sequence parallelism for MoE with TP)",
                    )
                )
        if m.moe.expert_ffn % p.etp:
            out.append(
                (
                    ("parallelism", "expert_tp"),
                    f"expert_ffn {m.moe.expert_ffn} does not split over expert_tp {p.etp}",
                )
            )
    return out


def _layer_split(s: Scenario) -> list[Finding]:
    """The schedule must cut the layers into its chunks (evenly, or with the given ends)."""
    p = s.parallelism
    pl = p.pipeline
    try:
        get_schedule(pl.schedule).chunk_sizes(
            s.model.layers, p.pp, pl.virtual_stages, pl.first_stage_layers, pl.last_stage_layers
        )
    except ValueError as exc:
        if pl.first_stage_layers is not None or pl.last_stage_layers is not None:
            which = "first" if pl.first_stage_layers is not None else "last"
            return [(("parallelism", "pipeline", f"{which}_stage_layers"), str(exc))]
        return [(("parallelism", "pp"), str(exc))]
    return []


def _batch(s: Scenario) -> list[Finding]:
    t, p, m = s.training, s.parallelism, s.model
    out: list[Finding] = []
    if t.global_batch % s.dp:
        out.append(
            (
                ("training", "global_batch"),
                f"global batch {t.global_batch} does not split over dp = {s.dp}",
            )
        )
    elif (t.global_batch // s.dp) % t.micro_batch:
        out.append(
            (
                ("training", "micro_batch"),
                f"micro-batch {t.micro_batch} does not divide the per-replica batch "
                f"{t.global_batch // s.dp}",
            )
        )
    if p.cp > 1 and t.seq_len % (2 * p.cp):
        out.append(
            (
                ("training", "seq_len"),
                f"seq_len {t.seq_len} must split into 2 x cp = {2 * p.cp} chunks "
                f"(causal load balancing)",
            )
        )
    if m.max_positions is not None and t.seq_len > m.max_positions:
        out.append(
            (
                ("training", "seq_len"),
                f"seq_len {t.seq_len} exceeds the model's {m.max_positions} positions",
            )
        )
    return out


def _pipeline(s: Scenario) -> list[Finding]:
    """The schedule's own conditions on stages, micro-batches and virtual stages."""
    p, t = s.parallelism, s.training
    pl = p.pipeline
    if t.global_batch % s.dp or (t.global_batch // s.dp) % t.micro_batch:
        return []  # _batch names the problem
    why = get_schedule(pl.schedule).check(p.pp, s.micro_batches, pl.virtual_stages)
    if why is None:
        return []
    field = "virtual_stages" if "virtual_stages" in why else "schedule"
    if "micro-batches" in why:
        return [(("training", "micro_batch"), why)]
    return [(("parallelism", "pipeline", field), why)]


def _compute_dtype(s: Scenario) -> list[Finding]:
    acc, dtype = s.cluster.accelerator, s.precision.compute_dtype
    if acc.supports(dtype):
        return []
    return [
        (
            ("precision", "compute_dtype"),
            f"{acc.name} has no peak FLOP/s for {dtype} (it lists "
            f"{', '.join(acc.peak_flops_per_s)}); add it to cluster.accelerator.peak_flops_per_s "
            f"or pick a listed dtype",
        )
    ]


MAX_TASK_UNITS = 262_144
"""Largest step simulated: micro-batches x layers x simulated replicas <= 2^18. Each unit is
about 8 tasks (forward, input and weight gradients, sends, collectives) and a task costs about
1.3 kB and 80 us to build and run: 4,096 micro-batches x 32 layers (131,072 units, 1.06M tasks)
took 85 s and 1.36 GB, so the cap keeps a run within about 3 GB and 3 minutes.
The steady state repeats one pattern; fewer, larger micro-batches give the same bubble trend."""


def _size(s: Scenario) -> list[Finding]:
    t, p = s.training, s.parallelism
    if t.global_batch % s.dp or (t.global_batch // s.dp) % t.micro_batch:
        return []  # reported by _batch
    micro = s.micro_batches
    replicas = s.num_gpus // p.pp if s.simulation.mode == "full" else 1
    units = micro * s.model.layers * replicas
    if units <= MAX_TASK_UNITS:
        return []
    full = f" x {replicas:,} ranks per stage (full mode)" if replicas > 1 else ""
    return [
        (
            ("training", "global_batch"),
            f"{micro:,} micro-batches x {s.model.layers} layers{full} = {units:,} exceeds "
            f"the {MAX_TASK_UNITS:,} a step may simulate (about 8 tasks each; memory and time "
            f"grow with it): raise micro_batch or lower global_batch",
        )
    ]


def stream_collectives(s: Scenario) -> dict[str, tuple[int, set[str]]]:
    """Each stream that has collectives: (its group size, the kinds of collective it runs).
    A pipeline's sends are point to point: no algorithm applies to them."""
    p = s.parallelism
    zero_kinds = {0: {"all_reduce"}, 3: {"all_gather", "reduce_scatter"}}
    out = {
        "tp": (p.tp, {"all_gather", "reduce_scatter"} if p.sequence_parallel else {"all_reduce"}),
        "cp": (p.cp, {"all_gather", "reduce_scatter"}),
        "ep": (p.ep, {"all_to_all"}),
        "dp": (s.dp * p.cp, zero_kinds.get(p.zero, {"all_reduce", "all_gather", "reduce_scatter"})),
        "pp": (p.pp, {"send_recv"}),
    }
    return {k: v for k, v in out.items() if v[0] > 1}


def _collectives(s: Scenario) -> list[Finding]:
    """A forced algorithm (``parallelism.collectives``) must run some collective of its
    stream, on its group, on this topology: one that cannot is refused here, so that
    ``check``, ``memory`` and ``run`` agree (a silent fallback to the automatic choice would
    make a study of the algorithm measure something else)."""
    out: list[Finding] = []
    streams = stream_collectives(s)
    topo = s.cluster.topology
    for stream, algo in s.parallelism.collectives.items():
        if algo == "auto":
            continue
        where = ("parallelism", "collectives", stream)
        if stream not in streams:
            out.append((where, f"{algo}: the {stream} stream has no collective here "
                        f"(parallelism.{stream} is 1)"))  # fmt: skip
            continue
        size, kinds = streams[stream]
        algorithm = ALGORITHMS[algo]
        if not set(algorithm.kinds) & kinds:
            out.append(
                (where, f"{algo} implements {', '.join(algorithm.kinds)}; the {stream} "
                 f"stream runs {', '.join(sorted(kinds))}")
            )  # fmt: skip
        elif algo == "halving_doubling" and size & (size - 1):
            out.append((where, f"halving_doubling needs a power-of-two group; {stream} "
                        f"groups have {size} ranks"))  # fmt: skip
        elif algo == "nvls" and not getattr(getattr(topo, "node", None), "nvls", False):
            out.append((where, "nvls needs NVLink SHARP: cluster.topology.node.nvls: true"))
        elif algo == "torus" and getattr(topo, "kind", None) != "torus":
            out.append((where, "torus needs a torus topology (cluster.topology.kind: torus)"))
    return out


def check_scenario(s: Scenario) -> list[Finding]:
    """Every cross-section inconsistency of ``s`` as (field path, message); empty if none."""
    out = _degrees(s) + _model_split(s) + _batch(s) + _pipeline(s) + _compute_dtype(s) + _size(s)
    out += _collectives(s)
    return out + check_failures(s)  # spares against nodes, straggler ranks (no step time yet)
