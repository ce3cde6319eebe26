"""One layer's kernels on one rank, per pass: what the compute model charges, to hold
against a profiler trace (``trainsim costs``)."""

from __future__ import annotations

import pandas as pd

from simulator.model.compute import ComputeModel
from simulator.plan.plan import build_plan as make_plan
from simulator.scenario import Scenario
from simulator.schedule.costs import grad_accumulate_op, layer_kernels


def compute_model_of(scenario: Scenario) -> ComputeModel:
    """Kernel durations on the scenario's accelerator (calibrated), with its framework's CPU
    cost per kernel launch (:meth:`ComputeModel.for_scenario`)."""
    return ComputeModel.for_scenario(scenario)


PASSES = {"f": "forward", "b": "input_grad", "w": "weight_grad"}


def layer_costs(scenario: Scenario, layer: int = 0) -> pd.DataFrame:
    """One layer's kernels for one micro-batch on one rank, per pass: FLOPs, bytes, seconds
    and whether compute or memory bounds them (what to hold against a profiler trace).

    Passes: forward, input_grad, weight_grad, and recompute (the forward again, for the ops the
    recompute policy re-runs: all of them with ``full``, the attention core with
    ``selective``). Columns: pass, op, kind, flops, bytes, seconds, bound.
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
    for op in ops:
        if rc == "full" or (rc == "selective" and op.kind == "attention"):
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
