"""Shared test helpers: paths to the project and the published tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "scenarios" / "validation" / "published"


def published(name: str) -> pd.DataFrame:
    """A table of published numbers (a copy of shared/validation/, see its README)."""
    return pd.read_csv(PUBLISHED / name)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def scenario_files() -> list[Path]:
    """Every shipped scenario (the published tables beside them are data, not scenarios)."""
    return sorted(
        p
        for p in (ROOT / "scenarios").rglob("*.yaml")
        if "published" not in p.parts and not p.name.endswith(".sweep.yaml")  # sweep specs
    )


def membound_slope(op: str, bytes_per_elem: float | None = None) -> float:
    """HBM efficiency of ``op`` in the shipped H200 membound.csv, recomputed independently of
    the fit: bytes over seconds between its two largest sizes, over 4.8 TB/s. Bytes are the
    file's ``bytes_moved``, or ``elems`` x ``bytes_per_elem`` when given (AdamW: 28)."""
    from simulator.model.calibration import DATA

    frame = pd.read_csv(DATA / "h200" / "membound.csv")
    rows = frame[frame["op"] == op].sort_values("elems").tail(2)
    moved = rows["bytes_moved"] if bytes_per_elem is None else rows["elems"] * bytes_per_elem
    return moved.diff().iloc[-1] / rows["s"].diff().iloc[-1] / 4.8e12
