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


def _row(page: str, key: str) -> list[str]:
    import re

    row = next(r for r in page.splitlines() if r.startswith(f"| `{key}` |"))
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def test_a_quantitys_unit_is_the_si_unit_it_is_held_in():
    # a field typed with a quantity of simulator.units shows the unit its values are in once
    # parsed (a file may write "5 us" or "400 Gb/s"), also inside "X | None"; a byte count
    # typed as a plain number says so with Unit("B"); counts and fractions show none
    page = _hook()._scenario_page()
    units = {
        "framework.cpu_launch_s": "s",
        "cluster.accelerator.hbm_bytes": "B",
        "cluster.accelerator.power_limit": "W",
        "cluster.storage.write_bandwidth": "B/s",
        "parallelism.bucket_size": "B",
        "precision.params": "B",
        "failures.causes.rate": "1/s",
        "training.seq_len": "",
        "variability.kernel_jitter": "",
    }
    assert {k: _row(page, k)[2] for k in units} == units
