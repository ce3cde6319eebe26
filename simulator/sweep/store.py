"""The result store: ``DIR/results.parquet``, one row per point, read back to resume.

Rows carry the point's swept values (columns named by their dotted keys), ``point`` (its index;
-1 for the base scenario), ``scenario_hash``, ``status``, ``reason``, ``warnings`` and every
metric of ``trainsim run --format json``. The swept keys are recorded in the file's schema
metadata, so a resumed sweep knows which columns are results (keyed by hash) and which belong
to the points. Writes go to a temporary file then replace the old one, so an interrupted sweep
leaves the previous results intact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from simulator.sweep.columns import text_column

RESULTS = "results.parquet"
POINT_COLUMNS = ("point", "base")
_META_KEY = b"trainsim.sweep.keys"


def _column_for_parquet(values: pd.Series) -> pd.Series:
    """Mixed columns (numbers and strings) become text; numbers, text and lists of numbers
    (``oversubscription``) stay."""
    kinds = {type(v) for v in values if v is not None and not (isinstance(v, float) and v != v)}
    if kinds <= {int, float, bool} and not (bool in kinds and kinds - {bool}):
        return values
    if kinds <= {str}:
        return values
    if kinds <= {list} and all(
        isinstance(x, int | float) for v in values if isinstance(v, list) for x in v
    ):
        return values
    return values.map(lambda v: None if v is None else json.dumps(v, default=str))


def write_results(frame: pd.DataFrame, keys: list[str], out_dir: Path) -> Path:
    """Write ``frame`` to ``out_dir/results.parquet`` atomically; ``keys`` are the swept keys."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shown = frame.copy()
    for key in keys:
        if key in shown:
            shown[key] = _column_for_parquet(shown[key])
    table = pa.Table.from_pandas(shown, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[_META_KEY] = json.dumps(keys).encode()
    table = table.replace_schema_metadata(meta)
    path = out_dir / RESULTS
    tmp = out_dir / (RESULTS + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_results(out_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """The stored rows and their swept keys; an empty frame if there is no results file."""
    path = out_dir / RESULTS
    if not path.is_file():
        return pd.DataFrame(), []
    table = pq.read_table(path)
    keys = json.loads((table.schema.metadata or {}).get(_META_KEY, b"[]"))
    return table.to_pandas(), keys


def results_by_hash(frame: pd.DataFrame, keys: list[str]) -> dict[str, dict[str, Any]]:
    """Each stored scenario's result (metrics, status, reason, warnings), by scenario hash."""
    if frame.empty:
        return {}
    own = {*POINT_COLUMNS, *keys, *(text_column(k) for k in keys)}
    drop = [c for c in frame if c in own]
    out: dict[str, dict[str, Any]] = {}
    for row in frame.drop(columns=drop).to_dict("records"):
        row = {k: v for k, v in row.items() if not _missing(v)}
        if "warnings" in row:
            row["warnings"] = list(row["warnings"])
        out.setdefault(row["scenario_hash"], row)
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)
