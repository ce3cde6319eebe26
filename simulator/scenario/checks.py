"""Consistency checks across sections of a validated scenario, each blamed on one field.

pydantic validates each field; what spans sections (the degrees must multiply to the GPU
count, heads must split over tp, ...) is checked here so that each problem can name the
field a user should change.
"""

from __future__ import annotations

from simulator.pipelines import get_schedule
from simulator.scenario.errors import FieldPath
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
    if m.heads % p.tp:
        out.append((("model", "heads"), f"{m.heads} heads do not split over tp = {p.tp}"))
    if m.attention == "mha" and m.n_kv_heads % p.tp:
        out.append(
            (("model", "kv_heads"), f"{m.n_kv_heads} kv_heads do not split over tp = {p.tp}")
        )
    out += _layer_split(s)
    if m.moe is None:
        if p.ep > 1:
            out.append((("parallelism", "ep"), "ep > 1 needs an MoE model (model.moe)"))
    else:
        if m.moe.experts % p.ep:
            out.append(
                (("parallelism", "ep"), f"ep = {p.ep} does not divide the {m.moe.experts} experts")
            )
        if (s.dp * p.cp * p.tp) % (p.ep * p.etp):
            out.append(
                (
                    ("parallelism", "ep"),
                    f"ep x expert_tp = {p.ep} x {p.etp} must divide dp x cp x tp = "
                    f"{s.dp} x {p.cp} x {p.tp}",
                )
            )
        if m.moe.expert_ffn % p.etp:
            out.append(
                (
                    ("parallelism", "expert_tp"),
                    f"expert_ffn {m.moe.expert_ffn} does not split over expert_tp {p.etp}",
                )
            )
    if m.ffn % p.tp:
        out.append((("model", "ffn"), f"ffn {m.ffn} does not split over tp = {p.tp}"))
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
        field = "pp"
        if pl.first_stage_layers is not None or pl.last_stage_layers is not None:
            which = "first" if pl.first_stage_layers is not None else "last"
            return [(("parallelism", "pipeline", f"{which}_stage_layers"), str(exc))]
        return [(("parallelism", field), str(exc))]
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
    why = get_schedule(pl.schedule).check(
        p.pp, t.global_batch // s.dp // t.micro_batch, pl.virtual_stages
    )
    if why is None:
        return []
    field = "virtual_stages" if "virtual_stages" in why else "schedule"
    if "micro-batches" in why:
        return [(("training", "micro_batch"), why)]
    return [(("parallelism", "pipeline", field), why)]


def check_scenario(s: Scenario) -> list[Finding]:
    """Every cross-section inconsistency of ``s`` as (field path, message); empty if none."""
    return _degrees(s) + _model_split(s) + _batch(s) + _pipeline(s)
