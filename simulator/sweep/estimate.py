"""A quick analytic step-time estimate. The plan search orders its candidates by the step
bound (:mod:`simulator.stages.bounds`: compute, TP collectives, pipeline fill and drain)
plus this estimate's communication terms that the bound leaves out (:func:`exposed_comm_s`);
it only orders the search's walk and never drops a candidate (the bound and the simulations
do that).

Terms, each from the lecture 8 ledger (docs/design.md):

- compute: training FLOPs per token ``6 P_active + 6 L s h`` (causal attention, docs/design.md)
  over the GPUs at ``GEMM_EFFICIENCY`` of peak; full recompute adds a forward (x 4/3),
  selective recompute re-runs the attention core (``2 L s h`` per token);
- pipeline bubble: ``(p-1)/(m+p-1)`` for 1F1B, ``(p-1)/(v m+p-1)`` interleaved, a third of
  1F1B's for ZB-H1 (Qi et al. 2023);
- TP: four all-reduce-sized collectives per layer and micro-batch (two forward, two backward;
  two more under full recompute) of ``b s h`` activations, busbw factor ``2(t-1)/t``;
- CP: the K/V ring, ``cp - 1`` steps forward and twice that backward; EP: four all-to-alls
  per MoE layer of the routed tokens, factor ``(e-1)/e``, over NVLink when the EP group's
  GPUs fit in one domain (folded with expert TP 1, a TP group's neighbours); both exposed;
- DP: the gradient reduction ``2(d-1)/d`` x gradient bytes over the NICs of the group's
  members on one NVLink domain (a node's share crosses once), hidden behind one micro-batch's
  backward (ZeRO-2: a reduce-scatter per micro-batch); ZeRO-3 gathers the weights twice and
  reduce-scatters the gradients every micro-batch, ``(d-1)/d`` x (2 x weight + gradient
  bytes), under that micro-batch's compute; PP: two sends per micro-batch.

Links: NVLink per GPU (x 0.8 payload efficiency) when a group fits in the NVLink domain, else
the NIC capped by its PCIe link.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.sweep.space import Choice

# Large-GEMM efficiency of the H200 calibration (simulator/model/calibration.py: e_max 0.71).
GEMM_EFFICIENCY = 0.71
NVLINK_PAYLOAD = 0.8  # NodeSpec.nvlink_efficiency's default (nccl-tests issue 149)


@dataclass(frozen=True)
class Machine:
    """What the estimate needs of the cluster: GPUs, NVLink domain, bandwidths (B/s), and
    ``peak_flops``: the dense peak (FLOP/s) a step's compute-bound kernels can hold, the
    datasheet's times the clock large GEMMs hold under the power limit."""

    gpus: int
    domain: int
    nvlink_Bps: float
    nic_Bps: float
    peak_flops: float


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of the model and batch."""

    layers: int
    moe_layers: int
    hidden: int
    attn_dim: int  # heads x head_dim
    kv_dim: int  # kv_heads x head_dim
    params: float
    active_params: float
    top_k: int
    global_batch: int
    seq_len: int
    grad_bytes: float  # per parameter
    param_bytes: float = 2.0  # per parameter, as the weights are gathered (ZeRO-3)
    expert_params: float = 0.0  # every routed expert's (``params`` holds them too)


def bubble_fraction(c: Choice, micro_batches: int) -> float:
    """Idle fraction of the pipeline schedule (docs/design.md formulas)."""
    if c.pp == 1:
        return 0.0
    p, m = c.pp, micro_batches
    if c.schedule in ("interleaved", "flexible-interleaved"):
        return (p - 1) / (c.virtual_stages * m + p - 1)
    base = (p - 1) / (m + p - 1)
    if c.schedule in ("zb-h1", "zb-1p"):  # ZB-1p: ZB-H1's bubble at equal passes (tests)
        return base / 3
    if c.schedule in ("zb-h2", "zb-2p", "zb-v"):  # ZB-2p and ZB-V: none at equal passes
        return 0.0
    return base


def _expert_span(c: Choice) -> int:
    """Consecutive GPUs an EP group spans with the layout tp, cp, pp, dp: with the experts
    split over TP, one rank of each of ep consecutive (dp, cp) places' TP groups (cp inner:
    inside the CP group when ep <= cp, else over ep / cp replicas, tp x cp x pp GPUs apart);
    with expert TP other than TP (folded), ep x etp places of a stage, within its tp x cp
    ranks or over replicas beyond them. The default order is assumed whatever the scenario's
    ``order``, and a group inside the CP group when ep <= cp (where cp is not a multiple of
    ep one may straddle two): the span only picks NVLink or the NIC for the estimate's
    all-to-alls, which rank candidates; the simulation places the groups as ordered
    (:meth:`simulator.plan.grid.RankGrid.ep_group`)."""
    if c.etp == c.tp:
        return c.ep * c.tp if c.ep <= c.cp else c.ep * c.tp * c.pp
    places = c.ep * c.etp
    return places if places <= c.tp * c.cp else places * c.pp


def estimate_step_s(c: Choice, m: ModelShape, hw: Machine) -> float:
    """Estimated step time (s) of choice ``c``; see the module doc for the terms."""
    return _estimate(c, m, hw)[0]


def exposed_comm_s(c: Choice, m: ModelShape, hw: Machine, experts_bounded: bool = True) -> float:
    """The estimate's communication that the step bound leaves out (s): context-parallel
    traffic stretched by the bubble, the data-parallel synchronisation not hidden under a
    micro-batch's backward, and the pipeline sends; and the expert all-to-alls unless
    ``experts_bounded`` (:func:`simulator.stages.bounds.step_lower_bound` counts compute, TP
    and, but under DeepEP's dispatcher, the expert all-to-alls)."""
    _, outside, experts = _estimate(c, m, hw)
    return outside if experts_bounded else outside + experts


def _estimate(c: Choice, m: ModelShape, hw: Machine) -> tuple[float, float, float]:
    """(the whole estimate, its communication outside compute, TP and the expert
    all-to-alls, those all-to-alls), in s."""
    tokens = m.global_batch * m.seq_len
    attn = 6 * m.layers * m.seq_len * m.attn_dim
    flops = tokens * (6 * m.active_params + attn)
    # per-module recompute (a scenario's own plan) is screened as none: the estimate's floor
    extra = {"selective": tokens * attn / 3, "full": flops / 3}.get(c.recompute, 0.0)
    compute = (flops + extra) / (hw.gpus * hw.peak_flops * GEMM_EFFICIENCY)
    micro = m.global_batch // (c.dp * c.micro_batch)
    tokens_mb = c.micro_batch * m.seq_len / c.cp  # per rank of a TP group, per micro-batch
    nv = hw.nvlink_Bps * NVLINK_PAYLOAD
    layers_here = m.layers / c.pp
    ops = 6 if c.recompute == "full" else 4
    tp = 0.0
    if c.tp > 1:
        size = tokens_mb * m.hidden * 2
        tp = layers_here * micro * ops * 2 * (c.tp - 1) / c.tp * size / nv
    cp = 0.0
    if c.cp > 1:
        bw = nv if c.tp * c.cp <= hw.domain else hw.nic_Bps
        kv = 2 * tokens_mb * m.kv_dim / c.tp * 2
        cp = layers_here * micro * 3 * (c.cp - 1) * kv / bw
    ep = 0.0
    if c.ep > 1 and m.moe_layers:
        bw = nv if _expert_span(c) <= hw.domain else hw.nic_Bps
        routed = tokens_mb / c.tp * m.top_k * m.hidden * 2
        ep = m.moe_layers / c.pp * micro * 4 * (c.ep - 1) / c.ep * routed / bw
    experts = m.expert_params
    dense = m.params - experts
    if c.etp == c.tp:
        per_rank = (dense + experts / c.ep) / (c.tp * c.pp)
    else:  # folded: the experts split etp ways, the rest tp ways
        per_rank = (dense / c.tp + experts / (c.ep * c.etp)) / c.pp
    d = c.dp * c.cp
    # the group's members on one NVLink domain share its crossing: each NIC carries a k-th
    # of it (a node's data crosses once); with the order tp, cp, pp, dp the CP members are tp
    # apart, the DP ones tp x cp x pp; never faster than NVLink
    k = min(d, min(c.cp, hw.domain // c.tp) * max(1, hw.domain // (c.tp * c.cp * c.pp)))
    nic = min(nv, hw.nic_Bps * max(1, k))
    dp = 0.0
    if d > 1 and c.zero == 3:  # every micro-batch's gathers and reduce-scatter, under it
        each = (d - 1) / d * per_rank * (2 * m.param_bytes + m.grad_bytes) / nic
        dp = micro * max(0.0, each - compute / micro)
    elif d > 1:
        dp = 2 * (d - 1) / d * per_rank * m.grad_bytes / nic
        if c.zero == 2:  # a reduce-scatter per micro-batch (half of the 2x), one all-gather
            dp *= (micro + 1) / 2
        dp = max(0.0, dp - (2 / 3) * compute / micro)
    pp = 2 * micro * tokens_mb * m.hidden * 2 / hw.nic_Bps if c.pp > 1 else 0.0
    stretch = 1 - bubble_fraction(c, micro)
    return (compute + tp + cp + ep) / stretch + dp + pp, cp / stretch + dp + pp, ep / stretch
