"""One layer's kernels on one rank, per pass: what the compute model charges, to hold
against a profiler trace (``trainsim costs``)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pandas as pd

from simulator.model.compute import ComputeModel
from simulator.model.power import power_model_of, step_clock
from simulator.model.recompute import modules_of, recomputed_op
from simulator.plan.plan import build_plan as make_plan
from simulator.plan.plan import micro_batch_of, sharding_of
from simulator.scenario import Scenario
from simulator.schedule.costs import (
    LayerCost,
    embedding_block,
    grad_accumulate_op,
    head_block,
    layer_cost,
    layer_kernels,
)


def compute_model_of(scenario: Scenario) -> ComputeModel:
    """Kernel durations on the scenario's accelerator (calibrated), with its framework's CPU
    cost per kernel launch (:meth:`ComputeModel.for_scenario`), at the clock the step's own
    kernels hold under the power limit (:func:`compute_activity`,
    :mod:`simulator.model.power`).

    >>> from simulator.api import load
    >>> round(compute_model_of(load("scenarios/examples/pipeline-1f1b.yaml")).sustained, 3)
    0.931
    """
    cm = ComputeModel.for_scenario(scenario)
    acc = scenario.cluster.accelerator
    if power_model_of(acc) is None:
        return cm
    activity = compute_activity(scenario, replace(cm, sustained=1.0))
    return replace(cm, sustained=step_clock(acc, activity))


def compute_activity(scenario: Scenario, burst: ComputeModel) -> float:
    """The step's mean tensor activity: its compute's FLOPs over its compute time at the boost
    clock (``burst``) and the device's best GEMM rate there (peak x ``e_max``). 1 for a step
    of large GEMMs; lower the more its time goes to memory-bound kernels. One micro-batch of
    every layer, forward, backward and recompute, and the embedding and output layer: every
    micro-batch of a step has the same mix."""
    s = scenario
    per_param = s.precision.bytes_per_param(s.training.optimizer)
    mb, sh = micro_batch_of(s, per_param[0]), sharding_of(s)
    best = s.cluster.accelerator.peak(s.precision.compute_dtype) * burst.gemm.e_max
    return _activity(s.model, mb, sh, s.parallelism.recompute, burst, best)


@lru_cache(maxsize=4096)
def _activity(m, mb, sh, recompute: str, burst: ComputeModel, best: float) -> float:
    """:func:`compute_activity` of its parts (a plan search asks it of many plans that share
    them)."""
    flops = seconds = 0.0
    kinds: dict[bool, LayerCost] = {}  # a layer's kernels differ only by whether it is MoE
    for layer in range(m.layers):
        moe = m.is_moe_layer(layer)
        cost = kinds.get(moe) or kinds.setdefault(
            moe, layer_cost(m, layer, mb, sh, recompute, burst)
        )
        for block in (cost.attn_local, cost.attn_remote, cost.ffn, cost.experts):
            if block is not None:
                flops += block.flops_f + block.flops_b + block.flops_w
                seconds += block.f + block.b + block.w
    for block in (embedding_block(m, mb, sh, burst), head_block(m, mb, sh, burst)):
        flops += block.flops_f + block.flops_b + block.flops_w
        seconds += block.f + block.b + block.w
    return flops / (seconds * best) if seconds > 0 else 0.0


PASSES = {"f": "forward", "b": "input_grad", "w": "weight_grad"}


def layer_costs(scenario: Scenario, layer: int = 0) -> pd.DataFrame:
    """One layer's kernels for one micro-batch on one rank, per pass: FLOPs, bytes, seconds
    and whether compute or memory bounds them (what to hold against a profiler trace).

    Passes: forward, input_grad, weight_grad, and recompute (the forward again, for the ops the
    recompute policy re-runs: all of them with ``full``, the attention core with
    ``selective``). Columns: pass, op, kind, flops, bytes, seconds, bound.

    >>> from simulator.api import load
    >>> costs = layer_costs(load("scenarios/examples/pipeline-1f1b.yaml"))
    >>> sorted(costs["pass"].unique())
    ['forward', 'input_grad', 'weight_grad']
    >>> flops = costs.groupby("pass")["flops"].sum()  # the backward does about twice the forward
    >>> round(float((flops["input_grad"] + flops["weight_grad"]) / flops["forward"]), 2)
    2.02
    """
    if not 0 <= layer < scenario.model.layers:
        raise ValueError(f"layer {layer} is not in 0 .. {scenario.model.layers - 1}")
    plan = make_plan(scenario)
    mb, sh = plan.micro_batch, plan.sharding
    cm = compute_model_of(scenario)
    ops = layer_kernels(scenario.model, layer, mb, sh)
    rc = scenario.parallelism.recompute
    rows = []
    for phase, name in PASSES.items():
        for op in ops:
            rows.append(_cost_row(cm, op, phase, name))
    if scenario.framework.grad_accumulation == "add":  # every micro-batch after the first
        add = grad_accumulate_op(plan.accumulated_params(layer), plan.grad_bytes_per_param)
        rows.append(_cost_row(cm, add, "w", "weight_grad"))
    modules, moe = modules_of(rc), scenario.model.is_moe_layer(layer)
    for op in ops:
        if rc == "full" or (rc == "selective" and op.kind == "attention"):
            rows.append(_cost_row(cm, op, "f", "recompute"))
        elif recomputed_op(op.name, modules, moe):
            rows.append(_cost_row(cm, op, "f", "recompute"))
    frame = pd.DataFrame(rows)
    return frame[frame["seconds"] > 0].reset_index(drop=True)


def _cost_row(cm: ComputeModel, op, phase: str, name: str) -> dict:
    seconds, bound = cm.op_timing(op, phase)
    flops = {"f": op.f_flops, "b": op.b_flops, "w": op.w_flops}[phase]
    moved = {"f": op.f_bytes, "b": op.b_bytes, "w": op.w_bytes}[phase]
    return {
        "pass": name,
        "op": op.name,
        "kind": op.kind,
        "flops": flops,
        "bytes": moved,
        "seconds": seconds,
        "bound": bound,
    }


def costs_notes(s: Scenario, frame: pd.DataFrame) -> list[str]:
    """What ``trainsim costs`` says under its table: the clock the step's compute-bound
    kernels hold under the power limit, and the CPU's issue time per pass."""
    notes = []
    held = compute_model_of(s).sustained
    if held < 1.0:  # a profiler trace of a short run catches the boost clock
        notes.append(
            f"compute-bound kernels at {held:.3f} of their burst rate: the clock this step's "
            f"kernels hold under the {s.cluster.accelerator.limit:g} W power limit (a short "
            "benchmark's: --set cluster.accelerator.sustained_compute=1)"
        )
    fw = s.framework
    if fw.cpu_launch_s + fw.cpu_op_forward_s + fw.cpu_op_backward_s > 0:
        issue = {}
        for name, n in frame.groupby("pass", sort=False).size().items():
            forward = name in ("forward", "recompute")
            per = fw.cpu_launch_s + (fw.cpu_op_forward_s if forward else fw.cpu_op_backward_s)
            issue[name] = n * per * 1e6
        notes.append(
            f"CPU issue, us ({fw.name}; the host stream, which the GPU waits for when it runs "
            "behind): " + ", ".join(f"{k} {v:,.1f}" for k, v in issue.items())
        )
    return notes
