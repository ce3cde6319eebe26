"""What ``trainsim plan`` says of its ranked plans: the ``--set`` line that runs each, why the
pick wins against the runner-up, and each plan written out as a scenario file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from simulator.scenario import scenario_data
from simulator.sweep.plan_result import PlanSearch, choice_of_row
from simulator.sweep.space import overrides_of
from simulator.sweep.spec import override_text


def plan_overrides(search: PlanSearch, row) -> dict:
    """The dotted-key overrides that turn the searched scenario into the ranked plan ``row``
    (the GPU count's too, when the search moved it)."""
    base = search.base
    assert base is not None
    over = overrides_of(base, choice_of_row(row))
    fixed = search.fixed_of.get(int(row["gpus"]), {})
    return {**fixed, **over}


def set_line(search: PlanSearch, row) -> str:
    """``--set k=v ...`` for the keys where the plan differs from the scenario's own resolved
    values (defaults filled in: a plan's ``ep=1`` is no change to a file that says nothing)."""
    own = _resolved(search.base)
    raw = scenario_data(search.path)
    parts = []
    for key, value in plan_overrides(search, row).items():
        mine = own.get(key, _lookup(raw, key))
        if mine == value or (value is None and mine is _MISSING):
            continue
        parts.append(f"--set {override_text(key, value)}")
    return " ".join(parts) or "(the scenario's own plan)"


def _resolved(s) -> dict:
    """The scenario's layout keys, dotted, as resolved (``parallelism.dp`` the derived
    degree)."""
    out = {f"parallelism.{k}": v for k, v in s.parallelism.model_dump().items()}
    out.update(
        {f"parallelism.pipeline.{k}": v for k, v in s.parallelism.pipeline.model_dump().items()}
    )
    out["parallelism.dp"] = s.dp
    out["training.micro_batch"] = s.training.micro_batch
    out["cluster.gpus"] = s.num_gpus
    return out


_MISSING = object()


def _lookup(data, dotted: str):
    node = data
    for seg in dotted.split("."):
        if not isinstance(node, dict) or seg not in node:
            return _MISSING
        node = node[seg]
    return node


def write_plans(search: PlanSearch, out_dir: Path, k: int) -> list[Path]:
    """``plan-1.yaml`` ... ``plan-k.yaml`` in ``out_dir``: the searched scenario (includes
    expanded) with each of the best ``k`` plans' layout, which ``trainsim run`` takes as it
    is; a header says what the search measured."""
    if search.ranked.empty:
        return []
    ok = search.ranked[search.ranked["status"] == "ok"]
    paths = []
    for i, (_, row) in enumerate(list(ok.iterrows())[:k], start=1):
        over = plan_overrides(search, row)
        data = scenario_data(search.path, [override_text(key, v) for key, v in over.items()])
        header = [
            f"# trainsim plan's pick {i} of {len(ok)} for {search.path.name} on "
            f"{int(row['gpus']):,} GPUs (objective {search.objective}):",
            f"#   step {row['step_time_s']:.4g} s, MFU {row['mfu']:.1%}, bubble "
            f"{row['bubble_fraction']:.1%}, exposed communication "
            f"{row['exposed_comm_fraction']:.1%}, peak {row['peak_memory_bytes'] / 1e9:,.1f} GB",
            f"# the same as: trainsim run {search.path} {set_line(search, row)}",
        ]
        for w in row["warnings"]:
            header.append(f"# warning: {w}")
        path = out_dir / f"plan-{i}.yaml"
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
        path.write_text("\n".join(header) + "\n" + text)
        paths.append(path)
    return paths


def _streams(row) -> str:
    util = row.get("utilisation")
    if isinstance(util, str):
        try:
            util = json.loads(util)
        except ValueError:
            util = None
    if not isinstance(util, dict):
        return ""
    comm = {k: v for k, v in util.items() if k != "compute" and v >= 0.01}
    return ", ".join(f"{k} {v:.0%}" for k, v in sorted(comm.items(), key=lambda kv: -kv[1]))


def why(search: PlanSearch) -> list[str]:
    """One line per ranked plan (step, MFU, bubble, exposed communication, the busiest
    communication streams, peak memory, warnings), then what the pick has over the runner-up:
    the knobs that differ and what each metric costs."""
    ranked = search.ranked
    if ranked.empty:
        return []
    lines = []
    for _, r in ranked.iterrows():
        if r["status"] != "ok":
            lines.append(f"#{r['rank']} {r['status']}: {r['reason']}")
            continue
        streams = _streams(r)
        lines.append(
            f"#{r['rank']} {_label(r)}: step {r['step_time_s']:.4g} s, MFU {r['mfu']:.1%}, "
            f"bubble {r['bubble_fraction']:.1%}, exposed comm {r['exposed_comm_fraction']:.1%}"
            + (f" (streams busy: {streams})" if streams else "")
            + f", peak {r['peak_memory_bytes'] / 1e9:,.1f} GB"
            + (
                f"; {len(r['warnings'])} warning(s): {r['warnings'][0]}"
                if len(r["warnings"])
                else ""
            )
        )
    ok = ranked[ranked["status"] == "ok"]
    if len(ok) >= 2:
        a, b = ok.iloc[0], ok.iloc[1]
        lines.append(against(a, b))
    return lines


KNOB_COLUMNS = [
    "gpus", "tp", "cp", "pp", "dp", "ep", "expert_tp", "zero", "schedule", "virtual_stages",
    "micro_batch", "recompute", "sequence_parallel",
]  # fmt: skip


def against(a, b) -> str:
    """What the pick ``a`` has over the runner-up ``b``: differing knobs, then the step and
    where its time went (bubble, exposed communication, compute), in seconds of each step."""
    diff = [
        f"{k} {b[k]} -> {a[k]}" for k in KNOB_COLUMNS if k in a and k in b and not _same(a[k], b[k])
    ]
    ta, tb = a["step_time_s"], b["step_time_s"]
    parts = [f"step {tb - ta:+.3g} s ({tb / ta - 1:+.1%}) for the runner-up"]
    for col, name in (("bubble_fraction", "bubble"), ("exposed_comm_fraction", "exposed comm")):
        da = a[col] * ta
        db = b[col] * tb
        if abs(db - da) >= 0.001 * ta:
            parts.append(f"{name} {db - da:+.3g} s")
    mem = (b["peak_memory_bytes"] - a["peak_memory_bytes"]) / 1e9
    parts.append(f"peak memory {mem:+.1f} GB")
    return "the pick against the runner-up (" + ", ".join(diff) + "): " + ", ".join(parts)


def _same(x, y) -> bool:
    if pd.isna(x) and pd.isna(y):
        return True
    return x == y


def _label(r) -> str:
    text = f"tp{r['tp']} cp{r['cp']} pp{r['pp']} dp{r['dp']}"
    if r["ep"] > 1:
        text += f" ep{r['ep']}"
    if r["expert_tp"] != r["tp"]:
        text += f" etp{int(r['expert_tp'])}"
    text += f" z{r['zero']} {r['schedule']}"
    if r["virtual_stages"] > 1:
        text += f" v{r['virtual_stages']}"
    return text + f" mb{r['micro_batch']} {r['recompute']}"
