"""Tables of a sweep's results: the points with their headline metrics, and deltas against the
base scenario. Each function takes the results frame and returns a DataFrame."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pandas as pd

from simulator.metrics import StepMetrics
from simulator.sweep.columns import text_column

HEADLINE = ["step_time_s", "mfu", "tokens_per_s", "peak_memory_bytes", "exposed_comm_fraction"]


# What "best" means when no metric is named: the most model FLOP/s per GPU. Among points of
# one model, batch and GPU count that is the fastest step; unlike the step time it does not
# favour a point that does less work (a smaller batch), and unlike MFU it does not favour a
# slower GPU that is better used.
BEST_BY = "model_tflops_per_gpu"


def best_point(frame: pd.DataFrame, metric: str | None = None) -> int | None:
    """Index (``point``) of the best simulated point that fits in memory: lowest ``metric`` for
    times and memory, highest for MFU, HFU and throughput; by default the most model FLOP/s
    per GPU (``BEST_BY``; the lowest step time when the frame has no such column). None if no
    point ran ``ok``."""
    if metric is None:
        metric = BEST_BY if BEST_BY in frame else "step_time_s"
    ok = frame[(frame["status"] == "ok") & (frame["point"] >= 0)]
    if ok.empty or metric not in ok:
        return None
    values = ok[metric].astype(float)
    row = values.idxmax() if higher_is_better(metric) else values.idxmin()
    return int(ok.loc[row, "point"])


def higher_is_better(metric: str) -> bool:
    return metric in ("mfu", "hfu", "tokens_per_s", "model_tflops_per_gpu", "overlap_fraction")


def points_table(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Swept values, status, headline metrics and reason of every point (base first), with
    ``best`` marking the point that fits with the most model FLOP/s per GPU (:func:`best_point`:
    the fastest, among points that do the same work on as many GPUs)."""
    cols = ["point", *keys, "status"] + [m for m in HEADLINE if m in frame] + ["reason"]
    shown = _as_written(frame.sort_values("point"), keys)[[c for c in cols if c in frame]]
    best = best_point(frame)
    shown.insert(1, "best", shown["point"] == best)
    return shown.reset_index(drop=True)


def _as_written(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A copy of ``frame`` whose swept-key columns hold the values as written (their
    ``_text`` columns), for a table read by people; the numbers stay in results.parquet."""
    out = frame.copy()
    for k in keys:
        if text_column(k) in out:
            out[k] = out[text_column(k)]
    return out


def deltas_table(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each point against the base scenario (point -1): step time, MFU, tokens/s and peak
    memory, as values and relative changes (``d_*``: (point - base) / base)."""
    base = frame[frame["point"] == -1]
    pts = frame[frame["point"] >= 0].sort_values("point")
    out = _as_written(pts, keys)[["point", *[k for k in keys if k in pts], "status"]]
    metrics = [m for m in ("step_time_s", "mfu", "tokens_per_s", "peak_memory_bytes") if m in pts]
    for m in metrics:
        out[m] = pts[m].astype(float)
        if base.empty or m not in base or pd.isna(base[m].iloc[0]):
            out["d_" + m] = float("nan")
        else:
            b = float(base[m].iloc[0])
            out["d_" + m] = (pts[m].astype(float) - b) / b
    return out.reset_index(drop=True)


# Short names of the terminal table's columns (results.parquet keeps the full ones).
ALIASES = {
    "point": "pt",
    "step_time_s": "step_s",
    "tokens_per_s": "tokens/s",
    "peak_memory_bytes": "peak_mem",
    "exposed_comm_fraction": "exposed",
    "bubble_fraction": "bubble",
    "d_step_time_s": "d_step",
    "d_tokens_per_s": "d_tokens/s",
    "d_peak_memory_bytes": "d_peak_mem",
}


def format_table(table: pd.DataFrame, keys: list[str] = ()) -> str:
    """Human units for the terminal: seconds, percentages, GB (1e9 bytes); swept values as
    written (the base scenario's own on its row, point -1), each swept key under the last
    part of its dotted name when that is unambiguous; short metric names (:data:`ALIASES`)."""
    shown = table.copy()
    for col in shown.columns:
        if col in keys:
            shown[col] = [_value(v) for v in table[col]]
        elif col in ("mfu", "exposed_comm_fraction", "bubble_fraction"):
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        elif col.startswith("d_"):
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:+.1%}")
        elif col == "peak_memory_bytes":
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v / 1e9:,.1f} GB")
        elif col in ("step_time_s", "estimate_s", "bound_s"):
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:,.4g}")
        elif col == "tokens_per_s":
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:,.0f}")
        elif col == "best":
            shown[col] = shown[col].map(lambda v: "*" if v else "")
        elif col == "reason":
            shown[col] = shown[col].map(_short)
    short = [k.rsplit(".", 1)[-1] for k in keys]
    names = dict(ALIASES)
    if len(set(short)) == len(short):
        names.update(zip(keys, short, strict=True))
    shown = shown.rename(columns=names)
    return shown.to_string(index=False)


def _value(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _short(text) -> str:
    if not isinstance(text, str):
        return ""
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= 90 else first[:87] + "..."


# Result columns by type, from the run's metrics (``trainsim run --format json``): whole
# numbers (a frame with a missing value keeps them as floats), nested metrics (stored as JSON
# text: a parquet column has one type), and every numeric one a plot can show (with the
# straggler pair and the point's own wall time).
_INTEGER = {"point"} | {f.name for f in fields(StepMetrics) if f.type in (int, "int")}
_NESTED = {f.name for f in fields(StepMetrics) if str(f.type).startswith("dict")}
NUMERIC = [f.name for f in fields(StepMetrics) if f.type in (float, int, "float", "int")] + [
    "healthy_step_time_s",
    "straggler_slowdown",
    "sim_time_s",
]


def json_records(frame: pd.DataFrame) -> list[dict]:
    """The rows as strict-JSON-ready dicts: a missing or infinite value is None (not NaN),
    whole-number metrics are ints, nested metrics (per-rank peaks, utilisation) are dicts
    again."""
    out = []
    for row in frame.to_dict("records"):
        clean = {}
        for key, value in row.items():
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                value = None
            elif key in _INTEGER and isinstance(value, float) and value.is_integer():
                value = int(value)
            elif key in _NESTED and isinstance(value, str):
                value = json.loads(value)
            clean[key] = value
        out.append(clean)
    return out
