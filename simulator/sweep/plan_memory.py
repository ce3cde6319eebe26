"""Whether a candidate fits in memory, checked as cheaply as memory's order allows: the model
states' floor first, then the most frugal variant of its degrees (rejecting the combination
whole), then the ledger of the plan itself."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from simulator.infeasible import InfeasibleError
from simulator.model.params import layer_params_per_rank
from simulator.scenario import Scenario, ScenarioError
from simulator.sweep import adapter
from simulator.sweep.candidates import Setting
from simulator.sweep.space import Choice, overrides_of


def frugal(c: Choice, zeros: tuple[int, ...] = (0, 1, 2, 3)) -> Choice:
    """The variant of ``c`` that needs the least memory: the highest ZeRO stage of ``zeros``
    (the knob's values) the pipeline allows, full recompute, micro-batch 1, 1F1B."""
    allowed = [z for z in zeros if c.pp == 1 or z <= 1 or len(zeros) == 1]
    return replace(
        c,
        zero=max(allowed or zeros) if c.dp * c.cp > 1 else 0,
        recompute="full",
        micro_batch=1,
        schedule="1f1b",
        virtual_stages=1,
    )


RECOMPUTE_SAVES = {"full": 0, "selective": 1, "none": 2}  # less memory first


def memory_fit(setting: Setting, c: Choice, headroom: float) -> tuple[str, str, Scenario | None]:
    """(status, reason, the scenario) of ``c`` by the loader and the ledger with
    ``headroom`` bytes to spare."""
    try:
        scenario = setting.spec.scenario(overrides_of(setting.scenario, c))
        total, capacity, kind = adapter.ledger_peak(scenario)
    except ScenarioError as exc:
        return "infeasible", str(exc).splitlines()[0], None
    except InfeasibleError as exc:  # a plan the schedule cannot order (a searched ZB order)
        return "infeasible", str(exc).splitlines()[0], None
    setting.least = min(setting.least, total)
    if total + headroom <= capacity:
        return "fits", "", scenario
    where = "every rank" if kind == "every rank" else f"{kind} ranks"
    return (
        "oom",
        f"memory ledger: {total / 1e9:,.1f} GB on {where} + {headroom / 1e9:g} GB "
        f"headroom > {capacity / 1e9:,.0f} GB",
        scenario,
    )


def state_floor(s: Scenario, c: Choice) -> float:
    """A floor under the memory ledger of ``c``'s fullest rank (B): the model states (weights,
    gradients, optimizer state, each ZeRO-sharded as the choice says) of the layers alone,
    averaged over the stages (the fullest holds at least the mean; embeddings, activations
    and buffers only add). Arithmetic on the parameter counts: no plan is built."""
    m = s.model
    p_b, g_b, o_b = s.precision.bytes_per_param(s.training.optimizer)
    n_dense = c.dp * c.cp
    n_expert = max(1, c.dp * c.cp * c.tp // (c.ep * c.etp))

    def per_param(n: int) -> float:
        return (
            (p_b / n if c.zero >= 3 else p_b)
            + (g_b / n if c.zero >= 2 else g_b)
            + (o_b / n if c.zero >= 1 else o_b)
        )

    dense, expert = _layer_params(m, c.tp, c.ep, c.expert_tp)
    return (dense * per_param(n_dense) + expert * per_param(n_expert)) / c.pp


@lru_cache(maxsize=1024)
def _layer_params(m, tp: int, ep: int, expert_tp: int | None) -> tuple[float, float]:
    """(dense, expert) parameters of all the layers on one rank of each stage, summed."""
    dense = expert = 0.0
    for layer in range(m.layers):
        d, e = layer_params_per_rank(m, layer, tp, ep, expert_tp)
        dense, expert = dense + d, expert + e
    return dense, expert


def combo_of(c: Choice) -> tuple:
    """The degrees a most frugal variant stands for (:func:`frugal`)."""
    return (c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sequence_parallel, c.bucket_size)


def over_floor(setting: Setting, c: Choice, headroom: float) -> str:
    """Why ``c``'s model states alone leave less than ``headroom`` of the HBM ("" if they
    do not): :func:`state_floor`, no plan built."""
    floor = state_floor(setting.scenario, c)
    capacity = setting.scenario.cluster.accelerator.hbm_bytes
    if floor + headroom <= capacity:
        return ""
    setting.least = min(setting.least, floor)
    return (
        f"model states alone: {floor / 1e9:,.1f} GB per GPU + {headroom / 1e9:g} GB "
        f"headroom > {capacity / 1e9:,.0f} GB"
    )


def fits(setting: Setting, c: Choice, headroom: float) -> tuple[str, str, Scenario | None]:
    """:func:`memory_fit`, skipped where memory's order decides it: a degree combination whose
    most frugal variant does not fit is rejected whole, and a variant that needs at least as
    much as one that did not fit (a lower ZeRO stage, a larger micro-batch, less recompute,
    the same schedule) is rejected with it."""
    over = over_floor(setting, c, headroom)
    if over:
        return "oom", over, None
    combo = combo_of(c)
    if combo not in setting.frugal:
        status, reason, _ = memory_fit(setting, frugal(c, setting.zeros), headroom)
        setting.frugal[combo] = (status, reason)
    status, reason = setting.frugal[combo]
    if status == "oom":
        return status, reason + " (even with full recompute, micro-batch 1, highest ZeRO)", None
    layout = (*combo, c.schedule, c.virtual_stages)
    point = (c.zero, c.micro_batch, RECOMPUTE_SAVES.get(c.recompute, 1))  # modules: as selective
    for z, mb, rc, why in setting.over.get(layout, ()):
        if c.zero <= z and c.micro_batch >= mb and point[2] >= rc:
            return "oom", why + " (a variant needing less memory did not fit)", None
    status, reason, scenario = memory_fit(setting, c, headroom)
    if status == "oom":
        setting.over.setdefault(layout, []).append((*point, reason))
    return status, reason, scenario
