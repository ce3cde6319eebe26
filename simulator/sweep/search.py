"""``trainsim plan``: search the parallel plans of a scenario's model, cluster and batch.

1. Enumerate DP/TP/PP/CP/EP, ZeRO stage, pipeline schedule, micro-batch and recompute. Pruned
   by rules with sources: TP stays inside the NVLink domain (lecture 8 slide 42); ZeRO-2/3 are
   not combined with pipeline parallelism (DeepSpeed's pipeline engine supports ZeRO 0 and 1
   only); sequence parallelism whenever TP > 1 (Korthikanti et al. 2022: same communication
   volume, less activation memory). Pipelines whose layers do not split evenly get shorter
   first and last stages, as Llama 3 405B does (7 + 14 x 8 + 7).
2. Order the candidates by the analytic estimate (:mod:`simulator.sweep.estimate`).
3. Walk that order through the loader (consistency checks) and the memory ledger until
   ``top`` candidates fit, at most ``PER_COMBO`` of them with the same degrees. A degree
   combination whose most frugal variant (highest ZeRO stage, full recompute, micro-batch 1,
   1F1B) does not fit is rejected whole: those knobs only add memory.
4. Simulate the ``top`` candidates with the full step simulation, through the sweep machinery
   (so on either backend, and resumable), and rank them by simulated step time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.scenario import Scenario, ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.scenario.schema import FatTreeTopology, NVSwitchTopology, TorusTopology
from simulator.sweep import adapter
from simulator.sweep.estimate import Choice, Machine, ModelShape, estimate_step_s
from simulator.sweep.runner import Backend, run_sweep
from simulator.sweep.spec import SweepSpecModel, spec_from_model

SCHEDULES = ("1f1b", "interleaved", "zb-h1")
RECOMPUTE = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4)
MAX_DEGREE = 64
# At most this many simulated plans share one (tp, pp, cp, ep): the estimate does not tell
# ZeRO stages apart, so without it the top K are often one layout K times.
PER_COMBO = 2


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(int(math.log2(max(1, limit))) + 1)]


def gpu_overrides(s: Scenario, gpus: int | None) -> dict[str, Any]:
    """Overrides that put the scenario on ``gpus`` GPUs (a fat-tree grows its nodes)."""
    if gpus is None or gpus == s.num_gpus:
        return {}
    t = s.cluster.topology
    if isinstance(t, FatTreeTopology):
        return {"cluster.topology.nodes": -(-gpus // t.node.gpus), "cluster.gpus": gpus}
    return {"cluster.gpus": gpus}


# A layout that fits any GPU count the batch allows: every GPU a data-parallel replica. The
# search replaces the layout of every candidate (:func:`overrides_of` sets all these keys).
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


def _on_gpus(path: Path, fixed: dict[str, Any], gpus: int | None) -> Scenario:
    """The scenario moved to ``gpus`` GPUs (``fixed``): with its own parallel layout where
    that fits them, else with :data:`PLAIN_LAYOUT` (the layout is searched anyway). A
    ScenarioError that names ``--gpus`` when neither fits (a batch too small for them)."""
    error = None
    for layout in ({}, PLAIN_LAYOUT):
        probe = spec_from_model(
            SweepSpecModel(
                base=str(path.resolve()), set={**fixed, **layout}, zip={"parallelism.tp": [1]}
            ),
            path,
        )
        try:
            return probe.scenario({})
        except ScenarioError as exc:
            error = error or exc
    raise ScenarioError(
        [
            Problem(Position(f"--gpus {gpus}"), p.field, f"{p.message} (from {p.position})")
            for p in error.problems
        ]
    ) from None


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
    # the rate compute-bound kernels hold through a step (Accelerator.sustained_compute)
    peak = acc.peak(s.precision.compute_dtype) * acc.sustained_compute
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


@dataclass(frozen=True)
class Candidate:
    """A choice, its estimate, and what became of it."""

    choice: Choice
    estimate_s: float
    status: str = "not checked"  # infeasible | oom | fits | not checked
    reason: str = ""


def enumerate_choices(s: Scenario, hw: Machine) -> tuple[list[Choice], list[Candidate]]:
    """Every structurally possible choice, and the degree combinations rejected outright."""
    m, t = s.model, s.training
    rejected: list[Candidate] = []
    choices: list[Choice] = []
    for tp in _powers_of_two(hw.domain):
        for cp in _powers_of_two(min(MAX_DEGREE, hw.gpus // tp)):
            if t.seq_len % (2 * cp):
                continue
            for pp in _powers_of_two(min(MAX_DEGREE, m.layers, hw.gpus // (tp * cp))):
                if hw.gpus % (tp * cp * pp) or stage_split(m.layers, pp) is None:
                    continue
                dp = hw.gpus // (tp * cp * pp)
                if t.global_batch % dp:
                    rejected.append(
                        Candidate(
                            Choice(tp, pp, cp, 1, dp, 0, "1f1b", 1, "none"),
                            math.inf,
                            "infeasible",
                            f"global batch {t.global_batch} does not split over dp = {dp}",
                        )
                    )
                    continue
                for ep, etp in _expert_degrees(s, tp, cp, dp):
                    choices += _variants(s, tp, pp, cp, ep, dp, etp)
    return choices, rejected


def _expert_degrees(s: Scenario, tp: int, cp: int, dp: int) -> list[tuple[int, int | None]]:
    """(ep, expert TP) pairs: every power-of-two EP that divides the experts, with the experts
    split over the attention's TP (expert TP None) and, under TP, folded with expert TP 1
    (Megatron-core's MoE parallel folding: whole experts, EP over a stage's neighbours)."""
    moe = s.model.moe
    if moe is None:
        return [(1, None)]
    out: list[tuple[int, int | None]] = []
    for e in _powers_of_two(min(MAX_DEGREE, moe.experts)):
        if moe.experts % e:
            continue
        if (dp * cp) % e == 0:
            out.append((e, None))
        if tp > 1 and (dp * cp * tp) % e == 0:
            out.append((e, 1))
    return out


def _variants(s: Scenario, tp, pp, cp, ep, dp, etp=None) -> list[Choice]:
    per_replica = s.training.global_batch // dp
    zeros = (0, 1) if pp > 1 else (0, 1, 2, 3)
    if dp * cp == 1:
        zeros = (0,)  # nothing to shard over
    out = []
    for schedule in SCHEDULES if pp > 1 else ("1f1b",):
        for mb in MICRO_BATCHES:
            if per_replica % mb:
                continue
            micro = per_replica // mb
            if schedule == "interleaved" and (micro % pp or s.model.layers % (2 * pp)):
                continue
            if schedule.startswith("zb") and s.model.layers % pp:  # uneven stages: 1F1B only
                continue
            for zero in zeros:
                for rc in RECOMPUTE:
                    out.append(Choice(tp, pp, cp, ep, dp, zero, schedule, mb, rc, etp))
    return out


def stage_split(layers: int, pp: int) -> tuple[int | None, int | None] | None:
    """(first, last) stage layers for ``pp`` stages: (None, None) when the layers split
    evenly, shorter first and last stages around ``ceil(layers / pp)``-layer middle stages
    otherwise (Llama 3 405B: 126 = 7 + 14 x 8 + 7), None if neither works."""
    if layers % pp == 0:
        return None, None
    if pp <= 2:
        return None
    per = -(-layers // pp)
    rest = layers - (pp - 2) * per
    first, last = rest - rest // 2, rest // 2
    if last < 1 or first > per:
        return None
    return first, last


def overrides_of(s: Scenario, c: Choice) -> dict[str, Any]:
    """The choice as dotted-key overrides of the scenario."""
    first, last = stage_split(s.model.layers, c.pp) or (None, None)
    return {
        "parallelism.dp": c.dp,
        "parallelism.tp": c.tp,
        "parallelism.pp": c.pp,
        "parallelism.cp": c.cp,
        "parallelism.ep": c.ep,
        "parallelism.expert_tp": c.expert_tp,
        "parallelism.zero": c.zero,
        "parallelism.sequence_parallel": c.tp > 1,
        "parallelism.recompute": c.recompute,
        "parallelism.pipeline.schedule": c.schedule,
        "parallelism.pipeline.virtual_stages": c.virtual_stages,
        "parallelism.pipeline.first_stage_layers": first,
        "parallelism.pipeline.last_stage_layers": last,
        "training.micro_batch": c.micro_batch,
    }


def _frugal(c: Choice) -> Choice:
    return replace(
        c,
        zero=max(z for z in (0, 1, 2, 3) if c.pp == 1 or z <= 1) if c.dp * c.cp > 1 else 0,
        recompute="full",
        micro_batch=1,
        schedule="1f1b",
    )


def _memory_status(spec, fixed: dict, s: Scenario, c: Choice) -> tuple[str, str]:
    try:
        scenario = spec.scenario({**fixed, **overrides_of(s, c)})
    except ScenarioError as exc:
        return "infeasible", str(exc).splitlines()[0]
    report = adapter.memory_report(scenario)
    if report.fits:
        return "fits", ""
    worst = max(report.ranks, key=lambda r: r.total)
    return "oom", (
        f"memory ledger: {worst.total / 1e9:,.1f} GB on "
        + ("every rank" if worst.rank_kind == "every rank" else f"{worst.rank_kind} ranks")
        + f" > {worst.capacity / 1e9:,.0f} GB"
    )


def screen(
    spec, fixed: dict, s: Scenario, choices: list[Choice], hw: Machine, top: int
) -> list[Candidate]:
    """Estimate every choice, then check memory in estimate order until ``top`` fit."""
    shape = shape_of(s)
    ranked = sorted(
        (Candidate(c, estimate_step_s(c, shape, hw)) for c in choices),
        key=lambda k: k.estimate_s,
    )
    combo_verdict: dict[tuple, tuple[str, str]] = {}
    per_combo: dict[tuple, int] = {}
    fitting = 0
    out = []
    for cand in ranked:
        c = cand.choice
        combo = (c.tp, c.pp, c.cp, c.ep, c.etp)
        if fitting >= top:
            out.append(
                replace(
                    cand,
                    status="not simulated",
                    reason=f"estimated slower than the best {top} that fit",
                )
            )
            continue
        if per_combo.get(combo, 0) >= PER_COMBO and top > PER_COMBO:
            out.append(
                replace(
                    cand,
                    status="not simulated",
                    reason=f"{PER_COMBO} faster variants of tp{c.tp} pp{c.pp} "
                    f"cp{c.cp} ep{c.ep}{_folded(c)} are simulated",
                )
            )
            continue
        if combo not in combo_verdict:
            status, reason = _memory_status(spec, fixed, s, _frugal(c))
            combo_verdict[combo] = (status, reason)
        status, reason = combo_verdict[combo]
        if status != "fits":
            out.append(
                replace(
                    cand,
                    status=status,
                    reason=reason + " (even with full recompute, micro-batch 1, highest ZeRO)"
                    if status == "oom"
                    else reason,
                )
            )
            continue
        status, reason = _memory_status(spec, fixed, s, c)
        fitting += status == "fits"
        per_combo[combo] = per_combo.get(combo, 0) + (status == "fits")
        out.append(replace(cand, status=status, reason=reason))
    return out


@dataclass
class PlanSearch:
    """The outcome: every candidate with its fate, and the simulated ones ranked."""

    name: str
    gpus: int
    candidates: pd.DataFrame
    ranked: pd.DataFrame
    results: pd.DataFrame

    def headline(self) -> str:
        n = len(self.candidates)
        text = (
            f"{self.name}: {n:,} candidate plans on {self.gpus:,} GPUs, "
            f"{len(self.ranked)} simulated (best first)"
        )
        base = self.results[self.results["point"] == -1] if not self.results.empty else None
        if base is None or base.empty:
            return text
        b = base.iloc[0]
        if b["status"] not in ("ok", "oom"):
            return text + f"\nthe scenario's own plan: {b['status']}: {b['reason']}"
        text += (
            f"\nthe scenario's own plan: step {b['step_time_s']:.4g} s, MFU {b['mfu']:.1%}, "
            f"peak {b['peak_memory_bytes'] / 1e9:,.1f} GB"
            + (" (OOM)" if b["status"] == "oom" else "")
        )
        ok = self.ranked[self.ranked["status"] == "ok"] if not self.ranked.empty else None
        if b["status"] == "ok" and ok is not None and not ok.empty:
            best = float(ok["step_time_s"].min())
            if best > b["step_time_s"]:
                text += (
                    f"\nnone of the {len(ok)} simulated beats it (best {best:.4g} s): "
                    "the quick estimate ranked them ahead of it; a larger --top simulates more"
                )
        return text

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "ranked": self.ranked.to_dict("records"),
            "rejected": rejection_summary(self.candidates).to_dict("records"),
            "own_plan": self._own_plan(),
        }

    def _own_plan(self) -> dict | None:
        """The scenario's own parallelism, simulated as the sweep's base point."""
        if self.results.empty:
            return None
        base = self.results[self.results["point"] == -1]
        if base.empty:
            return None
        keep = ["status", "reason", "step_time_s", "mfu", "peak_memory_bytes"]
        return {k: v for k, v in base.iloc[0].to_dict().items() if k in keep}


def _candidate_rows(cands: list[Candidate]) -> pd.DataFrame:
    rows = []
    for k in cands:
        row = asdict(k.choice)
        row["expert_tp"] = k.choice.etp  # the degree, as in the ranked table: tp's when not folded
        row.update(estimate_s=k.estimate_s, status=k.status, reason=k.reason)
        rows.append(row)
    return pd.DataFrame(rows)


def rejection_summary(candidates: pd.DataFrame) -> pd.DataFrame:
    """Rejected candidates by fate and reason (first line), with a count and an example."""
    rej = candidates[candidates["status"] != "fits"]
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
                "example": f"tp{ex.tp} pp{ex.pp} cp{ex.cp} ep{ex.ep}{_folded(ex)} dp{ex.dp} "
                f"z{ex.zero} {ex.schedule} mb{ex.micro_batch} {ex.recompute}",
            }
        )
    return pd.DataFrame(rows).sort_values("count", ascending=False).reset_index(drop=True)


def _folded(c) -> str:
    """`` etp1`` for a plan whose expert TP differs from its TP (None or NaN: the same)."""
    etp = c.expert_tp
    return "" if etp is None or etp != etp else f" etp{int(etp)}"


def _clip(text: str, n: int = 80) -> str:
    text = text.split(": ", 1)[-1] if text.startswith("--set") else text
    return text if len(text) <= n else text[: n - 3] + "..."


KEYS = ["dp", "tp", "pp", "cp", "ep", "expert_tp", "zero", "schedule", "micro_batch", "recompute"]


def search_plans(
    path: Path,
    gpus: int | None,
    top: int,
    backend: Backend,
    out: Path | None = None,
    progress: bool = True,
) -> PlanSearch:
    """Search the plans of the scenario in ``path`` (see the module doc)."""
    base = adapter.load_scenario(path)
    fixed = gpu_overrides(base, gpus)
    # candidates are built on the base with the GPU count changed (each sets every layout key)
    probe = spec_from_model(
        SweepSpecModel(base=str(path.resolve()), set=fixed, zip={"parallelism.tp": [1]}), path
    )
    scenario = _on_gpus(path, fixed, gpus) if fixed else base
    hw = machine_of(scenario)
    choices, rejected = enumerate_choices(scenario, hw)
    screened = screen(probe, {}, scenario, choices, hw, top) + rejected
    frame = _candidate_rows(screened)
    chosen = [k.choice for k in screened if k.status == "fits"]
    name = base.name or path.stem
    out_dir = out or Path("reports") / "plans" / name
    if not chosen:
        return PlanSearch(name, hw.gpus, frame, pd.DataFrame(), pd.DataFrame())
    zipped: dict[str, list] = {}
    for c in chosen:
        for k, v in overrides_of(scenario, c).items():
            zipped.setdefault(k, []).append(v)
    spec = spec_from_model(
        SweepSpecModel(name=f"plan-{name}", base=str(path.resolve()), set=fixed, zip=zipped), path
    )
    results = run_sweep(spec, out_dir, backend, progress=progress)
    frame.to_csv(out_dir / "candidates.csv", index=False)
    return PlanSearch(name, hw.gpus, frame, _ranked(results, chosen, screened), results)


def _ranked(results: pd.DataFrame, chosen: list[Choice], screened: list[Candidate]) -> pd.DataFrame:
    est = {k.choice: k.estimate_s for k in screened}
    rows = []
    for r in results[results["point"] >= 0].to_dict("records"):
        c = chosen[int(r["point"])]
        row = {k: getattr(c, k) for k in KEYS}
        row["expert_tp"] = c.etp  # the degree itself: tp's when not folded
        row.update(
            estimate_s=est[c],
            step_time_s=r.get("step_time_s"),
            mfu=r.get("mfu"),
            peak_memory_bytes=r.get("peak_memory_bytes"),
            status=r["status"],
            reason=r.get("reason", ""),
        )
        rows.append(row)
    frame = pd.DataFrame(rows).sort_values("step_time_s", na_position="last")
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame.reset_index(drop=True)
