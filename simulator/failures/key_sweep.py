"""``trainsim goodput --sweep KEY=V1,V2,...``: the job's ETTR against one field of its
``failures:`` section (spare-pool size, standbys, lemon share, repair times ...).

The step is simulated once: a ``failures.*`` field moves the job model, not the step, but for
the fleet's slow-node factor and the stragglers, which the step's sensitivity and time read
(those points simulate their own step). Every point runs the same seeds, so the differences
between points are the field's, not the draws' (common random numbers).
"""

from __future__ import annotations

import pandas as pd

from simulator.failures.montecarlo import simulate_seeds, simulate_until, summarise

# fields whose value changes the step simulation or its sensitivity, not only the job model
STEP_FIELDS = ("failures.stragglers", "failures.fleet.slow.factor")


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """``"failures.spares=0,16,64"`` -> ("failures.spares", ["0", "16", "64"]); ValueError
    naming the option otherwise."""
    key, sep, values = text.partition("=")
    key = key.strip()
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key or len(items) < 2:
        raise ValueError(f"--sweep {text}: write KEY=V1,V2[,...], e.g. failures.spares=0,16,64")
    if not key.startswith("failures."):
        raise ValueError(
            f"--sweep {key}: a field of the failures: section (failures.spares, "
            "failures.fleet.standbys, ...); sweep the step's fields with `trainsim sweep`"
        )
    return key, items


def needs_step(key: str) -> bool:
    """Whether a value of ``key`` moves the step or its sensitivity: the key is one of
    :data:`STEP_FIELDS`, below one, or a section holding one."""
    return any(key.startswith(f) or f.startswith(key + ".") for f in STEP_FIELDS)


def sweep_rows(models: list, key: str, values: list[str], days: float, seeds, ci: float):
    """Per value its job model's goodput: ``models[i]`` for ``values[i]``; ``seeds`` a count
    or None (until the 95% interval of the mean ETTR is within ``ci``, at most
    :data:`~simulator.failures.montecarlo.AUTO_MAX`: :func:`simulate_until`)."""
    rows = []
    for value, model in zip(values, models, strict=True):
        if seeds is None:
            result = simulate_until(model, days, ci)
        else:
            result = simulate_seeds(model, days, seeds)
        d = summarise(result)
        row = {
            key: value,
            "seeds": d["seeds"],
            "ettr_mean": d["ettr_mean"],
            "ettr_ci95": d["ettr_ci95"],
            "goodput_tokens_per_s": d["goodput_tokens_per_s"],
            "interruptions_mean": d["interruptions_mean"],
        }
        row.update({f"{k}_h": v for k, v in d["lost_hours_by_category"].items()})
        rows.append(row)
    return pd.DataFrame(rows)
