"""The plan search's candidates: the cluster and model as the estimate sees them, each GPU
count's base scenario (:class:`Setting`), and every choice of the space with its step bound
(:func:`candidates_of`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simulator.infeasible import InfeasibleError
from simulator.model.params import count_params
from simulator.model.power import step_clock
from simulator.scenario import Scenario, ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.scenario.schema import FatTreeTopology, NVSwitchTopology, TorusTopology
from simulator.sweep import adapter
from simulator.sweep.estimate import Machine, ModelShape, exposed_comm_s
from simulator.sweep.space import Choice, Knobs, Rejected, applied, enumerate_space
from simulator.sweep.spec import SweepSpecModel, spec_from_model


def machine_of(s: Scenario) -> Machine:
    """The estimate's view of the cluster (see :class:`Machine`)."""
    acc, t = s.cluster.accelerator, s.cluster.topology
    nvlink, nic, domain = acc.scale_up_bandwidth_Bps, acc.scale_up_bandwidth_Bps, 8
    if isinstance(t, FatTreeTopology | NVSwitchTopology):
        nvlink = t.node.nvlink_bandwidth or nvlink
        domain = t.node.gpus
    if isinstance(t, FatTreeTopology):
        nic = min(t.nic_bandwidth * t.nic_efficiency, t.node.pcie_bandwidth)
    elif isinstance(t, NVSwitchTopology):
        domain = max(domain, t.node.gpus)
    elif isinstance(t, TorusTopology):
        domain, nic = s.num_gpus, t.ici_link_bandwidth
    elif t is None:
        nic = 50e9  # build_topology's default fabric: one 400 Gb/s NIC per GPU
    peak = acc.peak(s.precision.compute_dtype) * step_clock(acc, 1.0)  # large GEMMs' clock
    return Machine(s.num_gpus, domain, nvlink, nic, peak)


def shape_of(s: Scenario) -> ModelShape:
    """The estimate's view of the model and batch."""
    m = s.model
    counts = count_params(m)
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.layers))
    weights, grads, _ = s.precision.bytes_per_param(s.training.optimizer)
    return ModelShape(
        layers=m.layers,
        moe_layers=moe_layers,
        hidden=m.hidden,
        attn_dim=m.heads * m.d_head,
        kv_dim=m.n_kv_heads * m.d_head,
        params=float(counts.total),
        active_params=float(counts.active),
        top_k=m.moe.top_k if m.moe else 0,
        global_batch=s.training.global_batch,
        seq_len=s.training.seq_len,
        grad_bytes=grads,
        param_bytes=weights,
        expert_params=float(sum(layer.expert for layer in counts.layers)),
    )


def gpu_overrides(s: Scenario, gpus: int | None) -> dict[str, Any]:
    """Overrides that put the scenario on ``gpus`` GPUs (a fat-tree grows its nodes)."""
    if gpus is None or gpus == s.num_gpus:
        return {}
    t = s.cluster.topology
    if isinstance(t, FatTreeTopology):
        return {"cluster.topology.nodes": -(-gpus // t.node.gpus), "cluster.gpus": gpus}
    return {"cluster.gpus": gpus}


# A layout that fits any GPU count the batch allows: every GPU a data-parallel replica.
PLAIN_LAYOUT: dict[str, Any] = {
    "parallelism.dp": None,
    "parallelism.tp": 1,
    "parallelism.pp": 1,
    "parallelism.cp": 1,
    "parallelism.ep": 1,
    "parallelism.expert_tp": None,
    "parallelism.sequence_parallel": False,
    "parallelism.pipeline.schedule": "1f1b",
    "parallelism.pipeline.virtual_stages": 1,
    "parallelism.pipeline.first_stage_layers": None,
    "parallelism.pipeline.last_stage_layers": None,
    "training.micro_batch": 1,
}


def spec_for(path: Path, fixed: dict[str, Any]):
    return spec_from_model(
        SweepSpecModel(base=str(path.resolve()), set=fixed, zip={"parallelism.tp": [1]}), path
    )


def on_gpus(path: Path, fixed: dict[str, Any], gpus: int | None) -> Scenario:
    """The scenario moved to ``gpus`` GPUs (``fixed``): with its own parallel layout where
    that fits them, else with :data:`PLAIN_LAYOUT` (the layout is searched anyway). A
    ScenarioError that names ``--gpus`` when neither fits (a batch too small for them)."""
    error = None
    for layout in ({}, PLAIN_LAYOUT):
        try:
            return spec_for(path, {**fixed, **layout}).scenario({})
        except ScenarioError as exc:
            error = error or exc
    raise ScenarioError(
        [
            Problem(Position(f"--gpus {gpus}"), p.field, f"{p.message} (from {p.position})")
            for p in error.problems
        ]
    ) from None


@dataclass
class Candidate:
    """A choice on one GPU count, its bound and ordering key, and what became of it.

    ``status``: ``bound`` (its bound cannot beat the best simulated), ``infeasible``, ``oom``,
    ``budget`` (could still win; not simulated within the budget), ``screened`` (simulated
    cheaply, not in full), ``ok`` / ``oom`` after the full simulation."""

    choice: Choice
    gpus: int
    bound_s: float
    order_s: float
    status: str = "pending"
    reason: str = ""
    cheap_s: float | None = None
    cheap_exact: bool = False
    result: dict | None = None

    @property
    def key(self) -> tuple[int, Choice]:
        return self.gpus, self.choice


@dataclass
class Setting:
    """One GPU count's base scenario, its spec (to build candidates through the loader) and the
    memo of degree combinations whose most frugal variant does not fit."""

    gpus: int
    scenario: Scenario
    spec: Any
    fixed: dict[str, Any]
    frugal: dict[tuple, tuple[str, str]] = field(default_factory=dict)
    over: dict[tuple, list] = field(default_factory=dict)  # layout -> variants that did not fit
    zeros: tuple[int, ...] = (0, 1, 2, 3)  # the ZeRO knob's values
    least: float = math.inf  # B: the least memory a checked candidate needs (ledger or floor)


def settings_of(path: Path, base: Scenario, gpus: tuple[int | None, ...]) -> list[Setting]:
    out = []
    for g in gpus:
        fixed = gpu_overrides(base, g)
        scenario = on_gpus(path, fixed, g) if fixed else base
        out.append(Setting(scenario.num_gpus, scenario, spec_for(path, fixed), fixed))
    return out


def candidates_of(setting: Setting, knobs: Knobs) -> tuple[list[Candidate], list[Rejected]]:
    """Every choice of the space on the setting's GPUs, bounded and ordered."""
    s = setting.scenario
    hw = machine_of(s)
    choices, rejected = enumerate_space(s, hw.domain, knobs)
    reach = adapter.reach(s)
    shape = shape_of(s)
    # the bound waits for the expert all-to-alls but under DeepEP (stages.bounds)
    bounded = s.parallelism.moe_dispatcher != "deepep" and bool(reach.ingress_Bps)
    bounds: dict[Choice, tuple[float, str]] = {}
    out = []
    for c in choices:
        key = replace(c, zero=0)  # ZeRO moves no compute
        if key not in bounds:
            try:
                bounds[key] = (adapter.step_lower_bound(applied(s, key), reach).seconds, "")
            except InfeasibleError as exc:
                bounds[key] = (math.inf, str(exc))
        bound, why = bounds[key]
        order = bound + exposed_comm_s(c, shape, hw, bounded)
        cand = Candidate(c, s.num_gpus, bound, order)
        if why:
            cand.status, cand.reason = "infeasible", why
        out.append(cand)
    return out, rejected
