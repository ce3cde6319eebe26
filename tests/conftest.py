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
