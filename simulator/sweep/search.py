"""``trainsim plan``: search the parallel plans of a scenario's model, cluster and batch, ranked
by the simulator.

1. **Enumerate** the space (:mod:`simulator.sweep.space`) on each GPU count asked for.
2. **Bound** every candidate: a lower bound on its simulated step from the kernel costs
   (:func:`simulator.stages.bounds.step_lower_bound`: each stage's compute with its
   recompute and TP collectives, the pipeline's fill and drain). Order the candidates by the
   bound plus the analytic estimate's exposed communication (:mod:`simulator.sweep.estimate`).
3. **Screen** in that order, in rounds: a candidate whose bound cannot beat the best plan
   simulated so far is dropped (*bound*); the rest are checked by the loader (*infeasible*)
   and the memory ledger with ``memory_headroom`` to spare (*oom*; a degree combination whose
   most frugal variant does not fit is rejected whole), then simulated cheaply: a step of
   ``2u`` and one of ``3u`` micro-batches (``u`` the stages, 1 without a pipeline) and the
   step time extrapolated linearly to the real count (the steady state adds the same time per
   micro-batch), or the full step where that is not cheaper. After each round the best
   cheap candidates are simulated in full, which tightens the bound for the next.
4. **Rank** by full simulation: the ``top`` best cheap candidates, and every candidate whose
   cheap time is within :data:`EXTRAPOLATION_MARGIN` of the best full step.

The search stops when no candidate is left whose bound could still win, or when ``budget``
candidates were simulated cheaply; the outcome counts the candidates at each fate, so a
budget that cut the search short says so.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from simulator.infeasible import InfeasibleError
from simulator.model.params import layer_params_per_rank
from simulator.model.power import step_clock
from simulator.scenario import Scenario, ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.scenario.schema import FatTreeTopology, NVSwitchTopology, TorusTopology
from simulator.sweep import adapter
from simulator.sweep.estimate import Machine, ModelShape, exposed_comm_s
from simulator.sweep.runner import Backend
from simulator.sweep.space import (
    Choice,
    Knobs,
    Rejected,
    applied,
    enumerate_space,
    overrides_of,
    stage_split,
)
from simulator.sweep.spec import SweepSpecModel, spec_from_model
from simulator.sweep.store import read_results, write_results
from simulator.sweep.worker import Task, scenario_hash

log = logging.getLogger("trainsim.plan")

# The cheap simulation's extrapolated step time was within 0.3% of the full step on every
# candidate of the tests' sample (tests/sweep/test_search.py); a candidate is simulated in full
# when its cheap time is within this margin of the best full step, so an extrapolation error
# up to it cannot hide the winner.
EXTRAPOLATION_MARGIN = 0.02
# Candidates simulated cheaply per round (then the best of them in full).
ROUND = 8
DEFAULT_BUDGET = 64
# B: what a plan must leave free beyond the ledger (the caching allocator's fragmentation,
# NCCL's and the framework's buffers): a convention of this tool, not a measurement; the
# table shows each plan's peak so a user can judge
DEFAULT_HEADROOM = 2e9
# Degree combinations whose most frugal variant the ledger checks for the candidates a budget
# left (each a few to tens of milliseconds); the rest are reported as not reached.
MAX_COMBOS = 300


# -- objectives ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """What the search minimises, from a plan's step time: ``cost(step_s, scenario)``,
    non-decreasing in the step time (so a bound on the step bounds the cost)."""

    name: str
    cost: Callable[[float, Scenario], float]
    shown: str  # the column the ranked table shows it in


def step_time_objective() -> Objective:
    return Objective("step-time", lambda t, s: t, "step_time_s")


def tokens_objective() -> Objective:
    """Tokens per second, as the negative cost's inverse: the tokens of a step over its time
    (the same order as the step time at one batch)."""
    return Objective(
        "tokens-per-s",
        lambda t, s: t / (s.training.global_batch * s.training.seq_len),
        "tokens_per_s",
    )


def mfu_objective() -> Objective:
    """MFU: GPU-seconds per step (its inverse's order): across GPU counts, the most efficient."""
    return Objective("mfu", lambda t, s: t * s.num_gpus, "mfu")


OBJECTIVES = {
    "step-time": step_time_objective,
    "tokens-per-s": tokens_objective,
    "mfu": mfu_objective,
}


# -- the estimate's view of the cluster and the model ----------------------------------------


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
    m, report = s.model, adapter.memory_report(s)
    moe_layers = sum(m.is_moe_layer(i) for i in range(m.layers))
    _, grads, _ = s.precision.bytes_per_param(s.training.optimizer)
    return ModelShape(
        layers=m.layers,
        moe_layers=moe_layers,
        hidden=m.hidden,
        attn_dim=m.heads * m.d_head,
        kv_dim=m.n_kv_heads * m.d_head,
        params=float(report.parameter_count),
        active_params=float(report.active_parameter_count),
        top_k=m.moe.top_k if m.moe else 0,
        global_batch=s.training.global_batch,
        seq_len=s.training.seq_len,
        grad_bytes=grads,
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


def _spec(path: Path, fixed: dict[str, Any]):
    return spec_from_model(
        SweepSpecModel(base=str(path.resolve()), set=fixed, zip={"parallelism.tp": [1]}), path
    )


def _on_gpus(path: Path, fixed: dict[str, Any], gpus: int | None) -> Scenario:
    """The scenario moved to ``gpus`` GPUs (``fixed``): with its own parallel layout where
    that fits them, else with :data:`PLAIN_LAYOUT` (the layout is searched anyway). A
    ScenarioError that names ``--gpus`` when neither fits (a batch too small for them)."""
    error = None
    for layout in ({}, PLAIN_LAYOUT):
        try:
            return _spec(path, {**fixed, **layout}).scenario({})
        except ScenarioError as exc:
            error = error or exc
    raise ScenarioError(
        [
            Problem(Position(f"--gpus {gpus}"), p.field, f"{p.message} (from {p.position})")
            for p in error.problems
        ]
    ) from None


# -- candidates -----------------------------------------------------------------------------


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


def _frugal(c: Choice, zeros: tuple[int, ...] = (0, 1, 2, 3)) -> Choice:
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


def _memory(setting: Setting, c: Choice, headroom: float) -> tuple[str, str, Scenario | None]:
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


def _combo(c: Choice) -> tuple:
    """The degrees a most frugal variant stands for (:func:`_frugal`)."""
    return (c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sequence_parallel, c.bucket_size)


def _over_floor(setting: Setting, c: Choice, headroom: float) -> str:
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


def _fits(setting: Setting, c: Choice, headroom: float) -> tuple[str, str, Scenario | None]:
    """:func:`_memory`, skipped where memory's order decides it: a degree combination whose
    most frugal variant does not fit is rejected whole, and a variant that needs at least as
    much as one that did not fit (a lower ZeRO stage, a larger micro-batch, less recompute,
    the same schedule) is rejected with it."""
    over = _over_floor(setting, c, headroom)
    if over:
        return "oom", over, None
    combo = _combo(c)
    if combo not in setting.frugal:
        status, reason, _ = _memory(setting, _frugal(c, setting.zeros), headroom)
        setting.frugal[combo] = (status, reason)
    status, reason = setting.frugal[combo]
    if status == "oom":
        return status, reason + " (even with full recompute, micro-batch 1, highest ZeRO)", None
    layout = (*combo, c.schedule, c.virtual_stages)
    point = (c.zero, c.micro_batch, RECOMPUTE_SAVES.get(c.recompute, 1))  # modules: as selective
    for z, mb, rc, why in setting.over.get(layout, ()):
        if c.zero <= z and c.micro_batch >= mb and point[2] >= rc:
            return "oom", why + " (a variant needing less memory did not fit)", None
    status, reason, scenario = _memory(setting, c, headroom)
    if status == "oom":
        setting.over.setdefault(layout, []).append((*point, reason))
    return status, reason, scenario


# -- cheap and full simulation ----------------------------------------------------------------


def reduced_counts(c: Choice, micro_batches: int) -> tuple[int, int] | None:
    """The two micro-batch counts the cheap simulation runs (``2u``, ``3u``; ``u`` the stages,
    1 without a pipeline), or None when simulating them costs more than 70% of the full step
    (then the full step is simulated)."""
    unit = c.pp if c.pp > 1 else 1
    m1, m2 = 2 * unit, 3 * unit
    if m1 + m2 > 0.7 * micro_batches:
        return None
    return m1, m2


def extrapolate(m1: int, t1: float, m2: int, t2: float, m: int) -> float:
    """The step time at ``m`` micro-batches from steps of ``m1`` and ``m2``: each micro-batch
    past the warm-up adds the same time (the steady state's period)."""
    return t2 + (m - m2) * (t2 - t1) / (m2 - m1)


def _with_batch(scenario: Scenario, count: int) -> Scenario:
    """``scenario`` with ``count`` micro-batches per pipeline (a smaller global batch)."""
    batch = count * scenario.dp * scenario.training.micro_batch
    training = scenario.training.model_copy(update={"global_batch": batch})
    return scenario.model_copy(update={"training": training})


class Simulator:
    """Runs scenarios on a backend, each once (results kept by scenario hash, and in the
    output folder's ``results.parquet`` so that a search run again resumes)."""

    def __init__(self, backend: Backend, out_dir: Path | None):
        self.backend = backend
        self.out_dir = out_dir
        self.rows: dict[str, dict] = {}
        if out_dir is not None:
            stored, _ = read_results(out_dir)
            if not stored.empty and "scenario_hash" in stored:
                for row in stored.to_dict("records"):
                    if row.get("status") in ("ok", "oom"):
                        self.rows[row["scenario_hash"]] = row
        self.simulated = 0

    def run(self, scenarios: list[Scenario]) -> list[dict]:
        hashes = [scenario_hash(s) for s in scenarios]
        todo = {h: Task(h, s) for h, s in zip(hashes, scenarios, strict=True) if h not in self.rows}
        if todo:
            for row in self.backend(list(todo.values())):
                self.rows[row["scenario_hash"]] = row
            self.simulated += len(todo)
        return [self.rows[h] for h in hashes]

    def save(self) -> None:
        if self.out_dir is None or not self.rows:
            return
        frame = pd.DataFrame(list(self.rows.values()))
        frame = frame.drop(columns=[c for c in ("point", "base") if c in frame])
        frame.insert(0, "point", range(len(frame)))
        frame.insert(1, "base", False)
        write_results(frame, [], self.out_dir)


def _fits_simulated(row: dict | None, headroom: float) -> bool:
    """A fully simulated plan that may set the bar: it ran without OOM and its simulated
    peak leaves ``headroom`` bytes of its HBM."""
    if row is None or row.get("status") != "ok":
        return False
    peak, capacity = row.get("peak_memory_bytes"), row.get("memory_capacity_bytes")
    return peak is None or capacity is None or peak + headroom <= capacity


def _time_of(row: dict) -> float | None:
    if row.get("status") not in ("ok", "oom"):
        return None
    return float(row["step_time_s"])


# -- the search -----------------------------------------------------------------------------


@dataclass
class PlanSearch:
    """The outcome: every candidate with its fate, the fully simulated ones ranked (a
    DataFrame), the scenario's own plan simulated, and the counts of each round."""

    name: str
    gpus: list[int]
    objective: str
    candidates: list[Candidate]
    ranked: pd.DataFrame
    own: dict | None
    counts: dict[str, int]
    rounds: list[dict]
    seconds: float
    scenarios: dict[tuple[int, Choice], Scenario] = field(default_factory=dict)
    base: Scenario | None = None
    path: Path = Path()
    fixed_of: dict[int, dict] = field(default_factory=dict)  # GPU count -> its overrides
    least_bytes: float = math.inf  # the least memory per GPU any checked candidate needs
    capacity_bytes: float = math.inf  # the HBM of a GPU

    def nothing_fits(self) -> str:
        """Why no plan was ranked, in one sentence."""
        if math.isfinite(self.least_bytes):
            return (
                f"no plan fits: the least memory a candidate needs is "
                f"{self.least_bytes / 1e9:,.1f} GB per GPU, over the "
                f"{self.capacity_bytes / 1e9:,.0f} GB of HBM less the headroom"
            )
        return "no plan fits: see the screened candidates below"

    def headline(self) -> str:
        gpus = ", ".join(f"{g:,}" for g in self.gpus)
        c = self.counts
        lines = [
            f"{self.name}: {c['enumerated']:,} candidate plans on {gpus} GPUs, objective "
            f"{self.objective}; {self.seconds:.0f} s",
            f"  screened out: {c['bound']:,} by the step bound, {c['infeasible']:,} "
            f"infeasible, {c['oom']:,} over memory"
            + (f", {c['budget']:,} not reached within the budget" if c["budget"] else ""),
            f"  simulated: {c['cheap']:,} cheaply in {len(self.rounds)} rounds, "
            f"{c['full']:,} in full (ranked below)",
        ]
        if c["budget"]:
            lines.append(
                f"  {c['budget']:,} candidates could still beat the pick (their bound is "
                "lower) but were not simulated: raise --budget to settle them"
            )
        if self.own is not None:
            if self.own.get("status") in ("ok", "oom"):
                lines.append(
                    f"the scenario's own plan: step {self.own['step_time_s']:.4g} s, MFU "
                    f"{self.own['mfu']:.1%}, peak {self.own['peak_memory_bytes'] / 1e9:,.1f} GB"
                    + (" (OOM)" if self.own["status"] == "oom" else "")
                )
            else:
                lines.append(
                    f"the scenario's own plan: {self.own.get('status')}: {self.own.get('reason')}"
                )
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "objective": self.objective,
            "counts": self.counts,
            "fates": self.fates(),
            "rounds": self.rounds,
            "seconds": self.seconds,
            "ranked": self.ranked.to_dict("records"),
            "rejected": rejection_summary(self.candidate_frame()).to_dict("records"),
            "own_plan": self.own,
        }

    def fates(self) -> dict[str, int]:
        """Candidates by their final status; they add up to ``counts["enumerated"]`` (the
        combinations rejected before any candidate was made count as infeasible)."""
        out: dict[str, int] = {}
        for k in self.candidates:
            out[k.status] = out.get(k.status, 0) + 1
        rejected = self.counts["enumerated"] - len(self.candidates)
        if rejected:
            out["infeasible"] = out.get("infeasible", 0) + rejected
        return out

    def candidate_frame(self) -> pd.DataFrame:
        rows = []
        for k in self.candidates:
            row = {"gpus": k.gpus, **_choice_columns(k.choice)}
            row.update(
                bound_s=k.bound_s,
                order_s=k.order_s,
                cheap_s=k.cheap_s,
                step_time_s=_time_of(k.result) if k.result else None,
                status=k.status,
                reason=k.reason,
            )
            rows.append(row)
        return pd.DataFrame(rows)


CHOICE_COLUMNS = [
    "dp", "tp", "pp", "cp", "ep", "expert_tp", "zero", "schedule", "virtual_stages",
    "micro_batch", "recompute", "sequence_parallel",
]  # fmt: skip


def _choice_columns(c: Choice) -> dict:
    row = {k: getattr(c, k) for k in CHOICE_COLUMNS}
    row["expert_tp"] = c.etp
    row["sequence_parallel"] = c.sp
    if c.bucket_size is not None:
        row["bucket_size"] = c.bucket_size
    return row


def rejection_summary(candidates: pd.DataFrame) -> pd.DataFrame:
    """Candidates not ranked, by fate and reason (numbers masked), with a count and an
    example."""
    if candidates.empty:
        return pd.DataFrame(columns=["status", "count", "reason", "example"])
    rej = candidates[candidates["status"] != "ok"]
    if rej.empty:
        return pd.DataFrame(columns=["status", "count", "reason", "example"])
    kind = rej["reason"].str.replace(r"[\d.,]+", "#", regex=True)
    rows = []
    for (status, _), grp in rej.groupby([rej["status"], kind], sort=False):
        ex = grp.iloc[0]
        rows.append(
            {
                "status": status,
                "count": len(grp),
                "reason": _clip(ex["reason"]),
                "example": _label_of_row(ex),
            }
        )
    return pd.DataFrame(rows).sort_values("count", ascending=False).reset_index(drop=True)


def _label_of_row(r) -> str:
    text = f"tp{r.tp} cp{r.cp} pp{r.pp} dp{r.dp}"
    if r.ep > 1:
        text += f" ep{r.ep}"
    if r.expert_tp != r.tp:
        text += f" etp{int(r.expert_tp)}"
    text += f" z{r.zero} {r.schedule}"
    if r.virtual_stages > 1:
        text += f" v{r.virtual_stages}"
    return text + f" mb{r.micro_batch} {r.recompute}"


def _clip(text: str, n: int = 90) -> str:
    text = text.split(": ", 1)[-1] if text.startswith("--set") else text
    return text if len(text) <= n else text[: n - 3] + "..."


@dataclass(frozen=True)
class SearchOptions:
    """What ``trainsim plan`` was asked: GPU counts (None: the scenario's), knobs, the plans to
    rank in full, the cheap-simulation budget, memory headroom (B), the objective."""

    gpus: tuple[int | None, ...] = (None,)
    fixes: tuple[str, ...] = ()
    varies: tuple[str, ...] = ()
    top: int = 5
    budget: int = DEFAULT_BUDGET
    headroom: float = DEFAULT_HEADROOM
    objective: Objective = field(default_factory=step_time_objective)


def _settings(path: Path, base: Scenario, gpus: tuple[int | None, ...]) -> list[Setting]:
    out = []
    for g in gpus:
        fixed = gpu_overrides(base, g)
        scenario = _on_gpus(path, fixed, g) if fixed else base
        out.append(Setting(scenario.num_gpus, scenario, _spec(path, fixed), fixed))
    return out


def _candidates(setting: Setting, knobs: Knobs) -> tuple[list[Candidate], list[Rejected]]:
    """Every choice of the space on the setting's GPUs, bounded and ordered."""
    s = setting.scenario
    hw = machine_of(s)
    choices, rejected = enumerate_space(s, hw.domain, knobs)
    ingress = adapter.ingress_Bps(s)
    shape = shape_of(s)
    bounds: dict[Choice, tuple[float, str]] = {}
    out = []
    for c in choices:
        key = replace(c, zero=0)  # ZeRO moves no compute
        if key not in bounds:
            try:
                bounds[key] = (adapter.step_lower_bound(applied(s, key), ingress).seconds, "")
            except InfeasibleError as exc:
                bounds[key] = (math.inf, str(exc))
        bound, why = bounds[key]
        cand = Candidate(c, s.num_gpus, bound, bound + exposed_comm_s(c, shape, hw))
        if why:
            cand.status, cand.reason = "infeasible", why
        out.append(cand)
    return out, rejected


def search_plans(
    path: Path,
    options: SearchOptions,
    backend: Backend,
    out: Path | None = None,
    progress: bool = True,
) -> PlanSearch:
    """Search the plans of the scenario in ``path`` (see the module doc)."""
    start = time.perf_counter()
    base = adapter.load_scenario(path)
    settings = _settings(path, base, options.gpus)
    knobs = Knobs.parse(base, options.fixes, options.varies)
    for st in settings:
        st.zeros = tuple(knobs.values("zero", (0, 1, 2, 3)))
    cands: list[Candidate] = []
    rejected: list[Rejected] = []
    by_gpus = {st.gpus: st for st in settings}
    for st in settings:
        c, r = _candidates(st, knobs)
        cands += c
        rejected += r
    obj = options.objective
    sim = Simulator(backend, out)

    def cost(k: Candidate, t: float) -> float:
        return obj.cost(t, by_gpus[k.gpus].scenario)

    scenarios: dict[tuple[int, Choice], Scenario] = {}
    pending = [k for k in cands if k.status == "pending"]
    # two walks over the same candidates: by the estimate (the likely winners first, to set a
    # good plan early) and by the bound (the least settled first: when the lowest bound left
    # cannot beat the best, nothing left can)
    by_estimate = iter(sorted(pending, key=lambda k: cost(k, k.order_s)))
    by_bound = sorted(pending, key=lambda k: cost(k, k.bound_s))
    bound_at = 0
    best = math.inf  # the objective's cost of the best plan simulated in full
    rounds: list[dict] = []
    cheap_done = 0
    settled = False
    bar = _progress(progress, options.budget)

    def admit(k: Candidate) -> bool:
        """Screen ``k`` (bound, loader, memory); True if it joins the round."""
        if cost(k, k.bound_s) >= best:
            k.status, k.reason = "bound", "its step bound cannot beat the best simulated"
            return False
        status, reason, scenario = _fits(by_gpus[k.gpus], k.choice, options.headroom)
        if status != "fits":
            k.status, k.reason = status, reason
            return False
        scenarios[k.key] = scenario
        k.status = "queued"
        return True

    while cheap_done < options.budget:
        batch: list[Candidate] = []
        room = min(ROUND, options.budget - cheap_done)
        estimate_open = True
        while len(batch) < room and (estimate_open or not settled):
            took = False
            for k in by_estimate:  # one from the estimate's order
                if k.status == "pending" and admit(k):
                    batch.append(k)
                    took = True
                    break
            else:
                estimate_open = False
            while not settled and len(batch) < room:  # one from the bound's order
                if bound_at >= len(by_bound):
                    settled = True
                    break
                k = by_bound[bound_at]
                if k.status != "pending":
                    bound_at += 1
                    continue
                if cost(k, k.bound_s) >= best:
                    settled = True  # every candidate after it is bounded out too
                    break
                bound_at += 1
                if admit(k):
                    batch.append(k)
                    took = True
                    break
            if not took and not estimate_open:
                break
        if not batch:
            break
        _cheap(batch, scenarios, sim)
        cheap_done += len(batch)
        bar.update(len(batch))
        # the best of this round in full: it bounds what the rest must beat
        fresh = sorted(
            (k for k in batch if k.cheap_s is not None), key=lambda k: cost(k, k.cheap_s)
        )
        full = [k for k in fresh[:1] if k.result is None]
        _full(full, scenarios, sim)
        for k in batch:
            if _fits_simulated(k.result, options.headroom):
                best = min(best, cost(k, _time_of(k.result)))
        rounds.append({"round": len(rounds) + 1, "cheap": len(batch), "full": len(full)})
        sim.save()  # a search stopped now resumes from here
    bar.close()
    # what the budget left: candidates not yet decided whose bound could still win
    for k in cands:
        if k.status != "pending":
            continue
        if cost(k, k.bound_s) >= best:
            k.status, k.reason = "bound", "its step bound cannot beat the best simulated"
            continue
        setting = by_gpus[k.gpus]
        status, reason = "oom", _over_floor(setting, k.choice, options.headroom)
        if not reason:
            combo = _combo(k.choice)
            if combo not in setting.frugal and len(setting.frugal) < MAX_COMBOS:
                _fits(setting, _frugal(k.choice, setting.zeros), options.headroom)
            status, reason = setting.frugal.get(combo, ("", ""))
            reason += " (even with full recompute, micro-batch 1)"
        if status == "oom":
            k.status, k.reason = "oom", reason
        else:
            k.status, k.reason = "budget", f"not simulated within the budget of {options.budget}"
    # the final round: the top cheap candidates and all within the margin, in full
    screened = sorted((k for k in cands if k.cheap_s is not None), key=lambda k: cost(k, k.cheap_s))
    final = [
        k
        for i, k in enumerate(screened)
        if i < options.top or cost(k, k.cheap_s) <= best * (1 + EXTRAPOLATION_MARGIN)
    ]
    _full([k for k in final if k.result is None], scenarios, sim)
    rounds.append({"round": len(rounds) + 1, "cheap": 0, "full": len(final)})
    for k in cands:
        if k.cheap_s is not None and k.result is None:
            k.status = "screened"
            k.reason = (
                f"cheap simulation {k.cheap_s:.4g} s: more than "
                f"{EXTRAPOLATION_MARGIN:.0%} slower than the best in full"
            )
    own = _own_plan(settings[0], sim) if len(settings) == 1 else None
    sim.save()
    full_done = [k for k in cands if k.result is not None]
    for k in full_done:
        k.status = k.result.get("status", "error")
        if k.status == "ok" and k.result.get(
            "peak_memory_bytes", 0
        ) + options.headroom > k.result.get("memory_capacity_bytes", math.inf):
            k.status = "oom"
            k.reason = (
                f"simulated peak {k.result['peak_memory_bytes'] / 1e9:,.1f} GB + "
                f"{options.headroom / 1e9:g} GB headroom over the HBM"
            )
    counts = {
        "enumerated": len(cands) + len(rejected),
        "bound": sum(k.status == "bound" for k in cands),
        "infeasible": sum(k.status == "infeasible" for k in cands) + len(rejected),
        "oom": sum(k.status == "oom" and k.result is None for k in cands),
        "budget": sum(k.status == "budget" for k in cands),
        "cheap": sum(k.cheap_s is not None for k in cands),
        "full": len(full_done),
        "simulations": sim.simulated,
    }
    ranked = _ranked(full_done, obj, by_gpus, options.headroom).head(options.top)
    name = base.name or path.stem
    return PlanSearch(
        name,
        [st.gpus for st in settings],
        obj.name,
        cands,
        ranked,
        own,
        counts,
        rounds,
        time.perf_counter() - start,
        {k.key: scenarios[k.key] for k in full_done},
        base,
        path,
        {st.gpus: st.fixed for st in settings},
        min(st.least for st in settings),
        base.cluster.accelerator.hbm_bytes,
    )


def _progress(enabled: bool, total: int):
    return tqdm(total=total, desc="plan search", unit="plan", file=sys.stderr, disable=not enabled)


def _cheap(batch: list[Candidate], scenarios: dict, sim: Simulator) -> None:
    """Simulate each candidate of ``batch`` cheaply (module doc), setting ``cheap_s`` (and
    ``result`` where the full step was simulated)."""
    jobs: list[tuple[Candidate, list[int]]] = []
    runs: list[Scenario] = []
    for k in batch:
        s = scenarios[k.key]
        m = s.micro_batches
        counts = reduced_counts(k.choice, m)
        reduced = []
        if counts is not None:
            try:
                reduced = [_checked(_with_batch(s, n)) for n in counts]
            except ScenarioError:
                counts = None
        if counts is None:
            jobs.append((k, [m]))
            runs.append(s)
        else:
            jobs.append((k, list(counts)))
            runs += reduced
    rows = iter(sim.run(runs))
    for k, counts in jobs:
        got = [next(rows) for _ in counts]
        times = [_time_of(r) for r in got]
        if any(t is None for t in times):
            k.status, k.reason = got[0].get("status", "error"), got[0].get("reason", "")
            continue
        if len(counts) == 1:
            k.cheap_s, k.cheap_exact, k.result = times[0], True, got[0]
            continue
        s = scenarios[k.key]
        m = s.micro_batches
        k.cheap_s = extrapolate(counts[0], times[0], counts[1], times[1], m)


def _checked(s: Scenario) -> Scenario:
    """``s`` revalidated by the loader's checks (a schedule's condition on the micro-batches)."""
    from simulator.scenario.checks import check_scenario

    findings = check_scenario(s)
    if findings:
        raise ScenarioError(
            [Problem(Position("<reduced>"), ".".join(findings[0][0]), findings[0][1])]
        )
    return s


def _full(ks: list[Candidate], scenarios: dict, sim: Simulator) -> None:
    for k, row in zip(ks, sim.run([scenarios[k.key] for k in ks]), strict=True):
        k.result = row


def _own_plan(setting: Setting, sim: Simulator) -> dict | None:
    """The scenario's own parallelism, simulated."""
    try:
        scenario = setting.spec.scenario({})
    except ScenarioError as exc:
        return {"status": "infeasible", "reason": str(exc).splitlines()[0]}
    row = sim.run([scenario])[0]
    keep = ["status", "reason", "step_time_s", "mfu", "peak_memory_bytes"]
    return {k: v for k, v in row.items() if k in keep}


RESULT_COLUMNS = [
    "step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "exposed_comm_fraction",
    "peak_memory_bytes",
]  # fmt: skip


def _ranked(done: list[Candidate], obj: Objective, by_gpus: dict, headroom: float) -> pd.DataFrame:
    rows = []
    for k in done:
        r = k.result
        row = {"gpus": k.gpus, **_choice_columns(k.choice)}
        row["bound_s"] = k.bound_s
        t = _time_of(r)
        for col in RESULT_COLUMNS:
            row[col] = r.get(col)
        row["utilisation"] = r.get("utilisation")
        row["status"] = k.status
        row["reason"] = k.reason or r.get("reason", "")
        w = r.get("warnings")
        row["warnings"] = [] if w is None else [str(x) for x in w]
        row["cost"] = obj.cost(t, by_gpus[k.gpus].scenario) if t is not None else math.inf
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    frame["_bad"] = frame["status"] != "ok"
    frame = frame.sort_values(["_bad", "cost"]).drop(columns=["_bad", "cost"])
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame.reset_index(drop=True)


def choice_of_row(row) -> Choice:
    """The :class:`Choice` of a ranked row."""
    etp = int(row["expert_tp"])
    return Choice(
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        cp=int(row["cp"]),
        ep=int(row["ep"]),
        dp=int(row["dp"]),
        zero=int(row["zero"]),
        schedule=str(row["schedule"]),
        micro_batch=int(row["micro_batch"]),
        recompute=str(row["recompute"]),
        expert_tp=None if etp == int(row["tp"]) else etp,
        virtual_stages=int(row["virtual_stages"]),
        sequence_parallel=bool(row["sequence_parallel"]),
        bucket_size=row.get("bucket_size")
        if "bucket_size" in row and row["bucket_size"] == row["bucket_size"]
        else None,
    )


__all__ = ["PlanSearch", "SearchOptions", "search_plans", "stage_split", "overrides_of"]
