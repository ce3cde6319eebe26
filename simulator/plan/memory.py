"""Per-rank memory ledger: model states by precision recipe and ZeRO stage, activations, buffers.

Model states per parameter with ``N`` data-parallel ranks (Rajbhandari et al. 2020, sec. 5),
``p``/``g``/``K`` bytes of parameters/gradients/optimizer state:

- DDP (stage 0): ``p + g + K``;   ZeRO-1: ``p + g + K/N``;
- ZeRO-2: ``p + (g + K)/N``;       ZeRO-3 / FSDP: ``(p + g + K)/N``.

Dense parameters shard over the data-parallel group including context parallelism (Megatron's
distributed optimizer uses DP x CP); routed-expert parameters over the expert-data-parallel group
``dp x cp x tp / (ep x expert_tp)``.

Activations come from :mod:`simulator.model.activations`, held as the stage's pass order
(:mod:`simulator.pipelines`) keeps them: a chunk's forward takes them, its weight gradient
gives them back. Buffers are what lives beside them at the peak:
ZeRO-3's gathered units (the computing one plus ``fsdp_prefetch`` ahead) and the unsharded
gradient of one unit before its reduce-scatter; ZeRO-2's double-buffered gradient buckets; the
full-recompute working set (one layer's activations rebuilt during backward); pipeline send and
receive buffers; on the last stage the logits' gradients while the loss runs backward.
The framework (:mod:`simulator.scenario.framework`) adds the caching allocator's reserve over
all of that and the runtime's own memory (CUDA context, cuBLAS workspace); NCCL's buffers
(:mod:`simulator.plan.nccl_memory`) sit outside the allocator beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from simulator.model.activations import (
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    loss_transient_bytes,
    output_weight_grad_bytes,
)
from simulator.pipelines import peak_held
from simulator.plan.nccl_memory import nccl_bytes
from simulator.plan.plan import Plan, StagePlan, build_plan, zero_sharded
from simulator.scenario.schema import Scenario


def device_bytes(allocated, runtime: float, reserve_fraction: float):
    """Device memory in use (B) when ``allocated`` bytes of tensors are live (a number or an
    array): the caching allocator's reserve over them (reserved = allocated / (1 - reserve)),
    plus the runtime's own (CUDA context, library workspaces) - what nvidia-smi shows."""
    return allocated / (1.0 - reserve_fraction) + runtime


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
    runtime: float = 0.0  # CUDA context and library workspaces, outside the allocator
    reserve_fraction: float = 0.0  # the caching allocator's reserve (framework)
    nccl: float = 0.0  # NCCL's buffers, outside the allocator (simulator.plan.nccl_memory)

    @property
    def allocated(self) -> float:
        """Bytes of live tensors at the peak (what ``max_memory_allocated`` reports)."""
        return self.params + self.grads + self.optimizer + self.activations + self.buffers

    @property
    def total(self) -> float:
        """Device memory in use at the peak (:func:`device_bytes`): what must fit in HBM."""
        return device_bytes(self.allocated, self.runtime + self.nccl, self.reserve_fraction)

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
    return zero_sharded((p, g, k), stage, n)


def _stage_activations(plan: Plan, stage: StagePlan) -> tuple[float, float]:
    """(activations held at the stage's peak, the largest recompute working set) in B.

    The peak follows the stage's pass order: a chunk's forward takes its layers' activations
    (and the embedding's, on the first model chunk), its weight-gradient pass gives them back;
    the output layer's logits live from the loss forward to the loss backward (B), and under a
    split-backward schedule the output layer's input and the logits' gradient until its W.
    """
    s = plan.scenario
    m, rc, mb, sh = s.model, s.parallelism.recompute, plan.micro_batch, plan.sharding
    kept = {i: layer_activation_bytes(m, i, mb, sh, rc) for i in stage.layers}
    emb, head = embedding_activation_bytes(m, mb, sh), head_activation_bytes(m, mb, sh)

    def chunk_bytes(c: int) -> float:
        ch = stage.chunks[c]
        return sum(kept[i] for i in ch.layers) + (emb if ch.has_embedding else 0.0)

    total = peak_held(stage.order, chunk_bytes)
    if stage.is_last:
        heads = [c for c, ch in enumerate(stage.chunks) if ch.has_head]

        def is_head(c: int) -> float:
            return float(c in heads)

        # a postponed output-layer weight gradient keeps its input and the logits' gradient
        # until its W (:func:`~simulator.model.activations.output_weight_grad_bytes`)
        kept_for_w = output_weight_grad_bytes(m, mb, sh) if plan.schedule.split_backward else 0.0
        total += (head - kept_for_w) * peak_held(stage.order, is_head, released_by="B")
        total += kept_for_w * peak_held(stage.order, is_head, released_by="W")
    rebuilt = 0.0
    if rc != "none":  # backward recomputes one layer at a time: what it dropped comes back
        rebuilt = max(
            (layer_activation_bytes(m, i, mb, sh, "none") - kept[i] for i in stage.layers),
            default=0.0,
        )
    return total, rebuilt


def root_kept(plan: Plan) -> bool:
    """Whether ZeRO-3 keeps the root unit (the embedding and the output layer) gathered from
    a micro-batch's forward through its backward: without a pipeline, as PyTorch FSDP does
    (FSDP2 ``fully_shard``: the root's ``reshard_after_forward`` is set to False "as a
    heuristic since its parameters would typically be immediately all-gathered for
    backward"). With a pipeline the ends sit on different stages, gathered per pass."""
    return plan.scenario.parallelism.pp == 1


def fsdp_gathered_bytes(plan: Plan, stage: StagePlan) -> tuple[float, float]:
    """ZeRO-3 buffers at the peak (B): (the units gathered at once - the computing one and
    ``fsdp_prefetch`` ahead, at most as many as there are, beside the root unit where it is
    kept (:func:`root_kept`) -, one unit's unsharded gradient before its reduce-scatter)."""
    par = plan.scenario.parallelism
    units = [sum(plan.params_of(u)) for ch in stage.chunks for u in ch.units]
    ends = [sum(plan.params_of(k)) for k in ("emb", "head") if _holds(stage, k)]
    grad = max(units + ends, default=0.0) * plan.grad_bytes_per_param
    if root_kept(plan):
        units.sort(reverse=True)
        gathered = sum(ends) + sum(units[: 1 + par.fsdp_prefetch])
    else:
        units = sorted(units + ends, reverse=True)
        gathered = sum(units[: 1 + par.fsdp_prefetch])
    return gathered * plan.param_bytes_per_param, grad


def _holds(stage: StagePlan, key: str) -> bool:
    return stage.is_first if key == "emb" else stage.is_last


def _bucket_bytes(plan: Plan, stage: StagePlan) -> float:
    """Bytes of ``stage``'s largest gradient bucket (``bucket_size`` at most: buckets close
    there, and hold one chunk's gradients at most)."""
    largest = max(
        (b.dense_params + b.expert_params for c in stage.chunks for b in c.buckets), default=0.0
    )
    return largest * plan.grad_bytes_per_param


def memory_ledger(s: Scenario | Plan) -> list[RankMemory]:
    """Memory of each pipeline stage's ranks (TP/CP/DP peers of a stage are alike)."""
    plan = s if isinstance(s, Plan) else build_plan(s)
    s = plan.scenario
    par = s.parallelism
    capacity = s.cluster.accelerator.hbm_bytes
    out = []
    for stage in plan.stages:
        activations, rebuilt = _stage_activations(plan, stage)
        # the logits' gradients live while the loss runs backward, before any layer's
        # weight gradient (so never beside a layer unit's unsharded ZeRO-3 gradient),
        logits = loss_transient_bytes(s.model, plan.micro_batch, plan.sharding)
        logits = logits if stage.is_last else 0.0
        # nor beside the recompute working set (a layer is rebuilt after the loss)
        if par.zero >= 3 and plan.dense_shard_ranks > 1:  # one rank: nothing to gather
            gathered, grad = fsdp_gathered_bytes(plan, stage)
            if stage.is_last:
                head_grad = sum(plan.params_of("head")) * plan.grad_bytes_per_param
                if plan.schedule.split_backward:  # computed first in the W pass, its
                    grad += head_grad  # reduce-scatter beside the first unit's gradient
                else:  # the output layer's unsharded gradient comes with the loss's
                    logits += head_grad
            buffers = gathered + max(grad + rebuilt, logits)
        else:
            buffers = max(rebuilt, logits) + (
                2 * _bucket_bytes(plan, stage) if par.zero == 2 else 0.0
            )
        if par.pp > 1:  # one activation (or its gradient) being sent, one being received
            buffers += 2 * plan.send_bytes
        out.append(
            RankMemory(
                rank_kind=f"stage {stage.stage}",
                stages=(stage.stage,),
                param_count=stage.dense_params + stage.expert_params,
                params=stage.param_bytes,
                grads=stage.grad_bytes,
                optimizer=stage.optimizer_bytes,
                activations=activations,
                buffers=buffers,
                capacity=capacity,
                in_flight_micro_batches=stage.in_flight,
                runtime=s.framework.runtime_bytes,
                reserve_fraction=s.framework.allocator_reserve,
                nccl=nccl_bytes(plan, plan.grid.rank(pp=stage.stage, dp=0, cp=0, tp=0)),
            )
        )
    return out


def ledger_caveats(s: Scenario | Plan) -> list[str]:
    """Where the ledger's peak can fall short of the simulated step's, in words.

    Split-backward schedules (zero-bubble) run deferred weight gradients back to back; under
    ZeRO-2/3 each leaves an unsharded gradient until its reduce-scatter ends on the
    data-parallel stream, in order, and when the weight passes outrun the network those
    gradients queue (the simulated memory timeline holds them; the ledger counts one unit's
    or two buckets). How many queue depends on the step's timing, which the ledger does not
    know."""
    plan = s if isinstance(s, Plan) else build_plan(s)
    par = plan.scenario.parallelism
    out = []
    if plan.schedule.split_backward and par.zero >= 2 and plan.dense_shard_ranks > 1:
        out.append(
            f"{plan.schedule.name} defers weight gradients: under ZeRO-{par.zero} their "
            "unsharded gradients can queue for the data-parallel reduce-scatters, which this "
            "ledger counts once; trainsim run simulates the queue and may find a higher peak"
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
    fields = ("params", "grads", "optimizer", "activations", "buffers", "nccl")
    return all(
        abs(getattr(a, f) - getattr(b, f)) <= rel_tol * max(1.0, abs(getattr(a, f))) for f in fields
    )


def max_params_model_states(s: Scenario) -> float:
    """Largest parameter count whose model states alone fit one device, as the ZeRO paper and
    the lecture's slide 28 count it (no activations, buffers or fragmentation).

    Parameters spread evenly over tp x pp model-parallel ranks, then by ZeRO over DP x CP.
    """
    par = s.parallelism
    per_param = s.precision.bytes_per_param(s.training.optimizer)
    per = sum(zero_sharded(per_param, par.zero, s.dp * par.cp))
    return s.cluster.accelerator.hbm_bytes * par.tp * par.pp / per
