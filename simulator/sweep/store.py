"""The result store: ``DIR/results.parquet``, one row per point, read back to resume.

Rows carry the point's swept values (columns named by their dotted keys, with their text in
``KEY_text``), ``point`` (its index;
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


TIMINGS = "timings.csv"
WALL_CLOCK = ("sim_time_s",)  # how long a point took to simulate: not a result of the point


def write_results(frame: pd.DataFrame, keys: list[str], out_dir: Path) -> Path:
    """Write ``frame`` to ``out_dir/results.parquet`` atomically; ``keys`` are the swept keys.

    The wall-clock seconds each point took go to ``timings.csv`` beside it, so that the
    results of the same study are the same bytes on every run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clocks = [c for c in WALL_CLOCK if c in frame]
    if clocks:
        frame[["point", "scenario_hash", *clocks]].to_csv(out_dir / TIMINGS, index=False)
    shown = frame.drop(columns=clocks)
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


class StoreError(ValueError):
    """A results file that is not one this program wrote; the message names it."""


def check_store(out_dir: Path) -> None:
    """Refuse, before anything is simulated, an ``out_dir`` whose results file could not be
    read back or replaced: a folder of that name, or a file that is not a sweep's Parquet
    table. It is left as it is (never overwritten)."""
    path = out_dir / RESULTS
    if path.exists() and not path.is_file():
        raise StoreError(f"{path} is not a file: move it away or give another --out")
    if path.is_file():
        read_results(out_dir)


def set_aside(out_dir: Path) -> Path | None:
    """Move ``out_dir``'s results file to ``results.previous.parquet`` (replacing an older
    one there) so that a run starts afresh; its path, or None if there was none."""
    path = out_dir / RESULTS
    if not path.is_file():
        return None
    previous = out_dir / "results.previous.parquet"
    os.replace(path, previous)
    return previous


def read_results(out_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """The stored rows and their swept keys; an empty frame if there is no results file.
    StoreError when the file is not a results table (it is left untouched)."""
    path = out_dir / RESULTS
    if not path.is_file():
        return pd.DataFrame(), []
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise StoreError(
            f"{path} is not a results table this program can read ({str(exc).splitlines()[0]}); "
            "it is left as it is: move it away or give another --out"
        ) from None
    if "scenario_hash" not in table.column_names:
        raise StoreError(
            f"{path} is a Parquet file without the sweep's columns (scenario_hash): it is "
            "left as it is: move it away or give another --out"
        )
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
