"""The closing-exercise studies (scenarios/studies/exercise-*.yaml) quote their own simulated
step, MFU and peak memory in a ``# simulated:`` header line, and the README's plan table
quotes them again: both are checked here against a run of each file, so neither goes stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator import api

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted((ROOT / "scenarios" / "studies").glob("exercise-*.yaml"))
LINE = re.compile(r"^# simulated: step ([\d.]+) s, MFU ([\d.]+)%, peak ([\d.]+) GB$", re.M)


def quoted(path: Path) -> tuple[float, float, float]:
    """(step s, MFU %, peak GB) as the file's header quotes them."""
    match = LINE.search(path.read_text())
    assert match, f"{path.name} has no '# simulated: step ... s, MFU ...%, peak ... GB' line"
    step, mfu, peak = match.groups()
    return float(step), float(mfu), float(peak)


def test_every_study_quotes_its_numbers_and_the_readme_agrees():
    readme = (ROOT / "README.md").read_text()
    assert len(STUDIES) == 4
    for path in STUDIES:
        step, mfu, peak = quoted(path)
        row = next((r for r in readme.splitlines() if f"`{path.name}`" in r), None)
        assert row is not None, f"the README's plan table has no row for {path.name}"
        cells = [c.strip() for c in row.strip("|").split("|")]
        # the table shows the header's figures as written there
        assert f"{step:g} s" in cells or f"{step} s" in cells, (row, step)
        assert f"{mfu}%" in cells, (row, mfu)
        assert f"{peak} GB" in cells, (row, peak)


@pytest.mark.slow  # four full steps, the 400B one of 1.1M tasks (about 2-3 minutes in all)
@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_each_study_simulates_to_the_numbers_it_quotes(path):
    step, mfu, peak = quoted(path)
    m = api.run(api.load_scenario(path)).metrics
    # the header rounds: the step to its last written digit, MFU to 0.1 point, peak to
    # 0.1 GB; the simulation is deterministic, so a run lands within that rounding
    digits = len(str(step).split(".")[1]) if "." in str(step) else 0
    assert abs(m.step_time_s - step) <= 0.5 * 10**-digits + 1e-12
    assert abs(100 * m.mfu - mfu) <= 0.05 + 1e-9
    assert abs(m.peak_memory_bytes / 1e9 - peak) <= 0.05 + 1e-9
