"""Many seeds of the job-level simulation, as pandas DataFrames, and their summary.

>>> import numpy as np
>>> from simulator.failures.model import JobModel
>>> m = JobModel(step_time_s=10.0, gpus=8, nodes=1, dp=8, gpus_per_node=8, gpus_per_replica=1,
...     tokens_per_step=1e6, cause_names=("crash",), cause_rate_s=np.array([1 / 36000]),
...     cause_shape=np.array([1.0]), cause_nodes_out=np.array([0]),
...     cause_detect_s=np.array([0.0]), maintenance_rate_s=0.0, maintenance_periodic=True,
...     maintenance_duration_s=0.0, spares=0, repair_law="fixed", repair_mean_s=0.0,
...     repair_sigma=1.0, restart_fixed_s=600.0, init_per_rank_s=0.0, interval_s=3600.0,
...     pause_s=60.0, drain_s=0.0, policy="restart_on_spares")
>>> r = simulate_seeds(m, days=30, seeds=4)
>>> bool(0.85 < r.per_seed["ettr"].mean() < 0.95)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator import limits
from simulator.failures.fleet import simulate_fleet_job as simulate_job
from simulator.failures.job import CATEGORIES
from simulator.failures.model import JobModel
from simulator.failures.optimum import daly_interval, young_interval

DAY_S = 86400.0


@dataclass(frozen=True)
class GoodputResult:
    """Per-seed rows, interruption counts per seed and cause, and one seed's timeline.

    ``per_seed``: seed, ettr, interruptions, and hours of each lost-time category.
    ``by_cause``: seed, cause, count (planned maintenance as cause ``maintenance``).
    ``timeline``: seed, start_s, end_s, state, cause (None unless recorded).
    """

    model: JobModel
    days: float
    per_seed: pd.DataFrame
    by_cause: pd.DataFrame
    timeline: pd.DataFrame | None


def simulate_seeds(
    model: JobModel,
    days: float,
    seeds: int,
    first_seed: int = 0,
    record_seed: int | None = None,
) -> GoodputResult:
    """Run ``seeds`` seeds (``first_seed``, ``first_seed + 1``, ...) of ``days`` of wall clock."""
    horizon = days * DAY_S
    rows, counts, timeline = [], [], None
    names = [*model.cause_names, "maintenance"]
    for seed in range(first_seed, first_seed + seeds):
        res = simulate_job(model, horizon, seed, record=seed == record_seed)
        row = {"seed": seed, "ettr": res.ettr, "interruptions": int(res.counts.sum())}
        row["productive_h"] = res.productive_s / 3600.0
        row.update({f"{k}_h": v / 3600.0 for k, v in res.lost_s.items()})
        rows.append(row)
        counts.append(res.counts)
        if res.segments is not None:
            timeline = pd.DataFrame(res.segments, columns=["start_s", "end_s", "state", "cause"])
            timeline.insert(0, "seed", seed)
    per_seed = pd.DataFrame(rows)
    matrix = np.array(counts, dtype=np.int64).reshape(len(rows), len(names))
    by_cause = pd.DataFrame(matrix, columns=names)
    by_cause.insert(0, "seed", per_seed["seed"])
    by_cause = by_cause.melt(id_vars="seed", var_name="cause", value_name="count")
    return GoodputResult(model, days, per_seed, by_cause, timeline)


Z95 = 1.959964  # the standard normal's 97.5th percentile: a two-sided 95% interval
# Student's t 97.5th percentiles by degrees of freedom (any statistics table), interpolated
# in 1/df between them; the normal's beyond 120
T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
AUTO_BATCH = 10  # seeds run between checks of the interval
AUTO_MIN = 20  # the fewest seeds it is judged on (two batches: less optional stopping)
AUTO_MAX = 1000  # --seeds auto stops here whatever its interval (about 4 minutes at 16K)


def t975(df: int) -> float:
    """Student's t 97.5th percentile for ``df`` degrees of freedom (:data:`T975`)."""
    if df >= 120:
        return Z95 if df > 1000 else float(np.interp(1 / df, [1 / 1000, 1 / 120], [Z95, 1.980]))
    known = sorted(T975)
    if df in T975:
        return T975[df]
    lo = max(k for k in known if k < df)
    hi = min(k for k in known if k > df)
    return float(np.interp(1 / df, [1 / hi, 1 / lo], [T975[hi], T975[lo]]))


def ci95(values: np.ndarray) -> float:
    """Half-width of the 95% confidence interval of the mean of ``values`` (Student's t,
    sample standard deviation); 0 for fewer than two values.

    >>> round(ci95(np.array([0.0, 1.0] * 5)), 4)  # t(9) = 2.262, s = 0.527, n = 10
    0.377
    """
    if len(values) < 2:
        return 0.0
    return float(t975(len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))


def simulate_until(
    model: JobModel,
    days: float,
    ci: float,
    max_seeds: int | None = None,
    record_seed: int | None = None,
) -> GoodputResult:
    """Seeds in batches of :data:`AUTO_BATCH`, at least :data:`AUTO_MIN`, until the 95%
    confidence interval of the mean ETTR is narrower than ``ci`` on each side (or
    ``max_seeds`` have run; default :data:`AUTO_MAX`, within :mod:`simulator.limits`)."""
    if max_seeds is None:
        max_seeds = min(AUTO_MAX, int(limits.bound("seeds")))
    result = simulate_seeds(model, days, min(AUTO_MIN, max_seeds), record_seed=record_seed)
    while len(result.per_seed) < max_seeds and ci95(result.per_seed["ettr"].to_numpy()) > ci:
        n = len(result.per_seed)
        more = simulate_seeds(model, days, min(AUTO_BATCH, max_seeds - n), first_seed=n)
        result = GoodputResult(
            model,
            days,
            pd.concat([result.per_seed, more.per_seed], ignore_index=True),
            pd.concat([result.by_cause, more.by_cause], ignore_index=True),
            result.timeline,
        )
    return result


def optimal_intervals(model: JobModel) -> dict[str, float | None]:
    """Young and Daly optimum intervals (s) for the job's own unplanned MTTI and pause.

    An asynchronous checkpoint pauses training only for its copy to host memory, but the
    next cannot start before the drain to storage ends, and a failure during the drain loses
    it: the optimum is never shorter than the drain (``drain_bound`` says it binds)."""
    mtti = model.mtti_s
    if math.isinf(mtti) or model.pause_s <= 0:
        return {"young": None, "daly": None, "drain_bound": False}
    young = young_interval(model.pause_s, mtti)
    daly = daly_interval(model.pause_s, mtti)
    return {
        "young": max(young, model.drain_s),
        "daly": max(daly, model.drain_s),
        "drain_bound": model.drain_s > min(young, daly),
    }


def summarise(result: GoodputResult) -> dict:
    """The ``trainsim goodput --format json`` object (times in s or h as named)."""
    m, per = result.model, result.per_seed
    mean_counts = result.by_cause.groupby("cause", sort=False)["count"].mean()
    interruptions = float(per["interruptions"].mean())
    planned = float(mean_counts.get("maintenance", 0.0))
    unplanned = interruptions - planned
    ettr = per["ettr"].to_numpy()
    return {
        "step_time_s": m.step_time_s,
        "days": result.days,
        "seeds": len(per),
        "interruptions_mean": interruptions,
        "unplanned_interruptions_mean": unplanned,
        "planned_interruptions_mean": planned,
        "interruptions_by_cause": {k: float(v) for k, v in mean_counts.items()},
        # mean time to an unplanned interruption (planned maintenance is counted apart)
        "mtti_hours": result.days * 24.0 / unplanned if unplanned else None,
        "spares": m.spares,
        "spares_auto": m.spares_auto,
        "checkpoint_write_Bps": m.write_Bps,
        "checkpoint_interval_requested_s": m.interval_requested_s,
        "ettr_mean": float(ettr.mean()),
        "ettr_p5": float(np.percentile(ettr, 5)),
        "ettr_p95": float(np.percentile(ettr, 95)),
        "ettr_ci95": ci95(ettr),  # half-width of the mean's 95% confidence interval
        "goodput_tokens_per_s": float(ettr.mean() * m.tokens_per_step / m.step_time_s),
        "goodput_tokens_per_s_ci95": ci95(ettr) * m.tokens_per_step / m.step_time_s,
        "lost_hours_by_category": {k: float(per[f"{k}_h"].mean()) for k in CATEGORIES},
        "lost_hours_ci95_by_category": {k: ci95(per[f"{k}_h"].to_numpy()) for k in CATEGORIES},
        "fleet": _fleet_summary(m),
        "checkpoint_interval_s": m.interval_s,
        "optimal_checkpoint_interval_s": optimal_intervals(m),
    }


def _fleet_summary(m: JobModel) -> dict | None:
    """The node-level model's settings as simulated (None without ``failures.fleet``)."""
    f = m.fleet
    if f is None:
        return None
    out = {k: v for k, v in vars(f).items() if k not in ("slow_costs", "speeds")}
    out["node_mtbf_days"] = 1 / f.node_rate_s / DAY_S if f.node_rate_s else None
    out["slow_cost_by_stage"] = list(f.slow_costs)
    out["step_time_multiplier_by_fleet"] = list(f.speeds)
    return out


def sweep_intervals(
    model: JobModel, intervals: list[float], days: float, seeds: int
) -> pd.DataFrame:
    """ETTR against the checkpoint interval, the same seeds (failures) at every interval.

    Columns: interval_s (as requested), effective_interval_s (rounded to whole steps),
    ettr_mean, ettr_p5, ettr_p95.
    """
    rows = []
    for interval in intervals:
        m = model.with_interval(interval)
        ettr = simulate_seeds(m, days, seeds).per_seed["ettr"].to_numpy()
        rows.append(
            {
                "interval_s": interval,
                "effective_interval_s": m.interval_s,
                "ettr_mean": float(ettr.mean()),
                "ettr_p5": float(np.percentile(ettr, 5)),
                "ettr_p95": float(np.percentile(ettr, 95)),
            }
        )
    return pd.DataFrame(rows)
