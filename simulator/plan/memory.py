"""Per-rank memory ledger: model states by precision recipe and ZeRO stage, activations, buffers.

Model states per parameter with ``N`` data-parallel ranks (Rajbhandari et al. 2020, sec. 5),
``p``/``g``/``K`` bytes of parameters/gradients/optimizer state:

- DDP (stage 0): ``p + g + K``;   ZeRO-1: ``p + g + K/N``;
- ZeRO-2: ``p + (g + K)/N``;       ZeRO-3 / FSDP: ``(p + g + K)/N``.

Dense parameters shard over the data-parallel group including context parallelism (Megatron's
distributed optimizer uses DP x CP); routed-expert parameters over the expert-data-parallel group
``dp x cp x tp / (ep x expert_tp)``.

Activations come from :mod:`simulator.model.activations` times the stage's in-flight
micro-batches (:mod:`simulator.plan.stages`). Buffers are what lives beside them at the peak:
ZeRO-3's gathered units (the computing one plus ``fsdp_prefetch`` ahead) and the unsharded
gradient of one unit before its reduce-scatter; ZeRO-2's double-buffered gradient buckets; the
full-recompute working set (one layer's activations rebuilt during backward); pipeline send and
receive buffers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from simulator.model.activations import (
    MicroBatch,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
)
from simulator.model.ops import Sharding
from simulator.model.params import (
    embedding_params_per_rank,
    head_params_per_rank,
    layer_params_per_rank,
)
from simulator.plan.stages import StageLayout, pipeline_layout
from simulator.scenario.schema import Scenario


@dataclass(frozen=True)
class RankMemory:
    """Peak memory of one kind of rank (bytes), and whether it fits in HBM."""

    rank_kind: str
    stages: tuple[int, ...]
    param_count: float  # parameters this rank owns before ZeRO sharding (after TP/PP/EP)
    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    capacity: float
    in_flight_micro_batches: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def as_dict(self) -> dict:
        out = asdict(self)
        out["stages"] = list(self.stages)
        out["total"] = self.total
        out["fits"] = self.fits
        return out


def model_state_bytes_per_param(
    p: float, g: float, k: float, stage: int, n: float
) -> tuple[float, float, float]:
    """(params, grads, optimizer) bytes per parameter on one rank under ZeRO ``stage``."""
    return (p / n if stage >= 3 else p, g / n if stage >= 2 else g, k / n if stage >= 1 else k)


def sharding_of(s: Scenario) -> Sharding:
    p = s.parallelism
    return Sharding(tp=p.tp, sp=p.sequence_parallel, cp=p.cp, ep=p.ep, expert_tp=p.expert_tp)


def micro_batches_per_step(s: Scenario) -> int:
    """Micro-batches each pipeline processes per step (gradient-accumulation steps)."""
    return s.training.global_batch // s.dp // s.training.micro_batch


def _stage_params(s: Scenario, layout: StageLayout) -> tuple[float, float, list[float]]:
    """(dense, expert) parameters of the stage on one rank, and the size of each FSDP unit."""
    m, p = s.model, s.parallelism
    dense = expert = 0.0
    units: list[float] = []
    per_layer = [layer_params_per_rank(m, i, p.tp, p.ep, p.expert_tp) for i in layout.layers]
    for d, e in per_layer:
        dense, expert = dense + d, expert + e
    for start in range(0, len(per_layer), p.fsdp_unit_layers):
        units.append(sum(d + e for d, e in per_layer[start : start + p.fsdp_unit_layers]))
    if layout.is_first:
        emb = embedding_params_per_rank(m, p.tp)
        dense += emb
        units.append(emb)
    if layout.is_last:
        head = head_params_per_rank(m, p.tp, layout.stages)
        dense += head
        units.append(head)
    return dense, expert, units


def _stage_activations(
    s: Scenario, layout: StageLayout, mb: MicroBatch, sh: Sharding
) -> tuple[float, float]:
    """(activations held at the peak, the largest recompute working set) on the stage (B)."""
    m, rc = s.model, s.parallelism.recompute
    kept = [layer_activation_bytes(m, i, mb, sh, rc) for i in layout.layers]
    total = layout.in_flight * sum(kept)
    if layout.is_first:
        total += layout.in_flight * embedding_activation_bytes(m, mb, sh)
    if layout.is_last:
        total += layout.head_in_flight * head_activation_bytes(m, mb, sh)
    rebuilt = 0.0
    if rc != "none":  # backward recomputes one layer at a time: what it dropped comes back
        rebuilt = max(
            (
                layer_activation_bytes(m, i, mb, sh, "none") - kept_i
                for i, kept_i in zip(layout.layers, kept, strict=True)
            ),
            default=0.0,
        )
    return total, rebuilt


def memory_ledger(s: Scenario) -> list[RankMemory]:
    """Memory of each pipeline stage's ranks (TP/CP/DP peers of a stage are alike)."""
    par, tr = s.parallelism, s.training
    pb, gb, kb = s.precision.bytes_per_param(tr.optimizer)
    dense_group = s.dp * par.cp
    expert_group = max(1, s.dp * par.cp * par.tp // (par.ep * par.etp))
    mb = MicroBatch(tr.micro_batch, tr.seq_len, s.precision.activation_bytes, tr.flash_attention)
    sh = sharding_of(s)
    pl = par.pipeline
    layouts = pipeline_layout(
        s.model.layers,
        par.pp,
        pl.virtual_stages,
        pl.schedule,
        micro_batches_per_step(s),
        pl.first_stage_layers,
        pl.last_stage_layers,
    )
    capacity = s.cluster.accelerator.hbm_bytes
    out = []
    for layout in layouts:
        dense, expert, units = _stage_params(s, layout)
        dp_d, dg_d, do_d = model_state_bytes_per_param(pb, gb, kb, par.zero, dense_group)
        dp_e, dg_e, do_e = model_state_bytes_per_param(pb, gb, kb, par.zero, expert_group)
        activations, rebuilt = _stage_activations(s, layout, mb, sh)
        buffers = rebuilt
        if par.zero >= 3:
            biggest = max(units, default=0.0)
            buffers += (1 + par.fsdp_prefetch) * biggest * pb + biggest * gb
        elif par.zero == 2:
            buffers += 2 * par.bucket_size
        if par.pp > 1:  # one activation (or its gradient) being sent, one being received
            tokens = tr.micro_batch * tr.seq_len / par.cp
            tokens = tokens / par.tp if par.sequence_parallel else tokens
            buffers += 2 * mb.act_bytes * tokens * s.model.hidden
        out.append(
            RankMemory(
                rank_kind=f"stage {layout.stage}",
                stages=(layout.stage,),
                param_count=dense + expert,
                params=dense * dp_d + expert * dp_e,
                grads=dense * dg_d + expert * dg_e,
                optimizer=dense * do_d + expert * do_e,
                activations=activations,
                buffers=buffers,
                capacity=capacity,
                in_flight_micro_batches=layout.in_flight,
            )
        )
    return out


def distinct_rank_kinds(ledger: list[RankMemory], rel_tol: float = 1e-9) -> list[RankMemory]:
    """Merge runs of consecutive stages whose ledgers are equal: "stages 1-14" and so on."""
    groups: list[list[RankMemory]] = []
    for rm in ledger:
        if groups and _same(groups[-1][-1], rm, rel_tol):
            groups[-1].append(rm)
        else:
            groups.append([rm])
    merged = []
    for g in groups:
        stages = tuple(st for rm in g for st in rm.stages)
        label = f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}-{stages[-1]}"
        if len(ledger) == 1:
            label = "every rank"
        merged.append(RankMemory(**{**asdict(g[0]), "rank_kind": label, "stages": stages}))
    return merged


def _same(a: RankMemory, b: RankMemory, rel_tol: float) -> bool:
    fields = ("params", "grads", "optimizer", "activations", "buffers")
    return all(
        abs(getattr(a, f) - getattr(b, f)) <= rel_tol * max(1.0, abs(getattr(a, f))) for f in fields
    )


def max_params_model_states(s: Scenario) -> float:
    """Largest parameter count whose model states alone fit one device, as the ZeRO paper and
    the lecture's slide 28 count it (no activations, buffers or fragmentation).

    Parameters spread evenly over tp x pp model-parallel ranks, then by ZeRO over DP x CP.
    """
    par = s.parallelism
    pb, gb, kb = s.precision.bytes_per_param(s.training.optimizer)
    per = sum(model_state_bytes_per_param(pb, gb, kb, par.zero, s.dp * par.cp))
    return s.cluster.accelerator.hbm_bytes * par.tp * par.pp / per
