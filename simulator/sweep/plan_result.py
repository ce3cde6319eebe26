"""The plan search's outcome: every candidate's fate, the fully simulated plans ranked, and
the tables and one-line summaries made from them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simulator.scenario import Scenario
from simulator.sweep.candidates import Candidate
from simulator.sweep.objectives import Objective
from simulator.sweep.plan_runs import time_of
from simulator.sweep.space import Choice


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
            row = {"gpus": k.gpus, **choice_columns(k.choice)}
            row.update(
                bound_s=k.bound_s,
                order_s=k.order_s,
                cheap_s=k.cheap_s,
                step_time_s=time_of(k.result) if k.result else None,
                status=k.status,
                reason=k.reason,
            )
            rows.append(row)
        return pd.DataFrame(rows)


CHOICE_COLUMNS = [
    "dp", "tp", "pp", "cp", "ep", "expert_tp", "zero", "schedule", "virtual_stages",
    "micro_batch", "recompute", "sequence_parallel",
]  # fmt: skip


def choice_columns(c: Choice) -> dict:
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


RESULT_COLUMNS = [
    "step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "exposed_comm_fraction",
    "peak_memory_bytes",
]  # fmt: skip


def ranked_frame(
    done: list[Candidate], obj: Objective, by_gpus: dict, headroom: float
) -> pd.DataFrame:
    rows = []
    for k in done:
        r = k.result
        row = {"gpus": k.gpus, **choice_columns(k.choice)}
        row["bound_s"] = k.bound_s
        t = time_of(r)
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
