"""The generated scenario reference (docs/hooks/reference.py) gives every field a meaning: its
docstring in the schema, its entry in the section's attribute list, or the section's sentences
that name it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "reference.py"


def _hook():
    spec = importlib.util.spec_from_file_location("reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_scenario_field_has_a_meaning():
    rows = [r for r in _hook()._scenario_page().splitlines() if r.startswith("| `")]
    assert len(rows) > 150  # every section's fields, nested ones included
    cells = [r.strip().strip("|").split("|") for r in rows]
    blank = [c[0].strip() for c in cells if not c[-1].strip()]
    assert blank == [], "document these fields (a docstring under the field in the schema)"


def test_a_fields_meaning_comes_from_its_docstring():
    page = _hook()._scenario_page()
    row = next(r for r in page.splitlines() if r.startswith("| `training.seq_len` |"))
    assert row.endswith("| Tokens per sequence. |")
