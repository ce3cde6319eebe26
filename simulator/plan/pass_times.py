"""Each pipeline stage's pass durations, estimated for the schedules searched over them.

ZB-1p and ZB-2p (:mod:`simulator.pipelines.zb_auto`) order a stage's passes by how long they
take, as their authors' scheduler does with durations it profiles. Before any task graph
exists, the plan estimates them here from the same compute model the step builder costs
kernels with: one micro-batch's forward (f), input-gradient (b) and weight-gradient (w) work
of the stage's layers, with the embedding on the first stage and the output layer and loss on
the last, the recompute in b (the whole forward with ``recompute: full``, the attention core
with ``selective``), the output layer's weight gradient in w where the schedule splits W
off (:func:`~simulator.schedule.passes.output_weight_grad`), else in b, and an activation's
trip to the next stage (its bytes over the link between the stages' hosts, plus one hop's
latency).

Left out: tensor- and context-parallel communication inside a pass, overlap and interference
(the authors profile whole passes, so their durations hold them). The estimate only shapes
the order; the simulation then times every task itself, with the scenario's compute model or
a caller's own (:func:`simulator.api.build_step`), which then does not reorder the passes.
"""

from __future__ import annotations

from simulator.model.activations import MicroBatch
from simulator.model.compute import ComputeModel
from simulator.model.ops import (
    Op,
    Sharding,
    attention_core_op,
    embedding_ops,
    head_ops,
    layer_ops,
)
from simulator.model.recompute import modules_of, recomputed_op
from simulator.pipelines import PassTimes, PipelineSchedule
from simulator.plan.collective_choice import NetworkFacts
from simulator.scenario.schema import Scenario


def stage_ops(
    s: Scenario,
    schedule: PipelineSchedule,
    layers: dict[tuple[int, int], tuple[int, ...]],
    stage: int,
    mb: MicroBatch,
    sh: Sharding,
) -> tuple[list[Op], list[Op], list[Op]]:
    """(the ops of one micro-batch on ``stage`` but the output layer's, the output layer's and
    loss's (none off the last stage), the ops its recompute runs again)."""
    m, par = s.model, s.parallelism
    p, v = par.pp, par.pipeline.virtual_stages
    last = schedule.model_chunks(p, v) - 1
    ops: list[Op] = []
    head: list[Op] = []
    again: list[Op] = []
    for c in range(schedule.chunks_per_stage(v)):
        k = schedule.model_chunk(p, v, stage, c)
        if k == 0:
            ops += embedding_ops(m, mb.b, mb.s, sh, mb.act_bytes)
        modules = modules_of(par.recompute)
        for layer in layers[(stage, c)]:
            ops_l = layer_ops(
                m, layer, mb.b, mb.s, sh, mb.act_bytes, mb.flash, mb.eager_kernels, mb.eager_norms
            )
            ops += ops_l
            if par.recompute == "full":
                again += ops_l
            elif par.recompute == "selective":
                again += attention_core_op(m, mb.b, mb.s, sh, mb.act_bytes, mb.flash)
            elif modules:  # per-module recompute: the modules' ops again
                moe = m.is_moe_layer(layer)
                again += [o for o in ops_l if recomputed_op(o.name, modules, moe)]
        if k == last:
            head = head_ops(m, mb.b, mb.s, sh, mb.act_bytes, mb.eager_kernels, mb.eager_norms)
    return ops, head, again


def pass_times(
    s: Scenario,
    schedule: PipelineSchedule,
    layers: dict[tuple[int, int], tuple[int, ...]],
    mb: MicroBatch,
    sh: Sharding,
    send_bytes: float,
    stage_stride: int,
    network: NetworkFacts | None,
) -> PassTimes:
    """Per-stage f, b, w durations (s) and the stage-to-stage trip (s): ``send_bytes`` between
    ranks ``stage_stride`` apart, over the network when any two adjacent stages sit on
    different hosts (the slowest trip: the search takes one, so a pipeline whose stages share
    hosts in pairs has its NVLink trips priced as network ones), else over NVLink (module
    doc); free without ``network`` (:func:`simulator.api.memory_report` gives the ledger the
    network, so that it holds the order ``run`` simulates)."""
    cm = ComputeModel.for_scenario(s)
    f, b, w = [], [], []
    for r in range(s.parallelism.pp):
        ops, head, again = stage_ops(s, schedule, layers, r, mb, sh)
        head_w = cm.seconds(head, "w")
        split = schedule.split_backward  # else the output layer's W runs in B
        f.append(cm.seconds(ops, "f") + cm.seconds(head, "f"))
        b.append(
            cm.seconds(ops, "b") + cm.seconds(again, "f") + cm.seconds(head, "b")
            + (0.0 if split else head_w)
        )  # fmt: skip
        w.append(cm.seconds(ops, "w") + (head_w if split else 0.0))
    comm = 0.0
    if network is not None:
        p, g = s.parallelism.pp, network.gpus_per_host
        across = len({r * stage_stride // g for r in range(p)}) > 1  # some trip leaves a host
        bandwidth = network.inter_Bps if across or not network.intra_Bps else network.intra_Bps
        comm = send_bytes / bandwidth + (network.inter_latency_s if across else 0.0)
    return PassTimes(tuple(f), tuple(b), tuple(w), comm)
