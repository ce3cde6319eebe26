"""The closing-exercise studies (scenarios/studies/exercise-*.yaml) quote their own simulated
step, MFU and peak memory in a ``# simulated:`` header line, and the plan table of docs/what-if.md
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
    readme = (ROOT / "docs" / "what-if.md").read_text()
    assert len(STUDIES) == 4
    for path in STUDIES:
        step, mfu, peak = quoted(path)
        row = next((r for r in readme.splitlines() if f"`{path.name}`" in r), None)
        assert row is not None, f"docs/what-if.md's plan table has no row for {path.name}"
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


FABRIC = ROOT / "scenarios" / "studies" / "llama3-405b-fabric.sweep.yaml"


@pytest.mark.slow  # 12 steps of the 16K-GPU job (about 15-30 s on two cores)
def test_the_fabric_study_runs_as_the_readme_says(tmp_path):
    """Rails are never slower than top-of-rack leaves on the like-for-like fabric (the same
    16-port leaf, the same 384-host pods), equal at 1:1 leaves, and docs/what-if.md's table is
    this run's."""
    from simulator.sweep.runner import make_backend, run_sweep
    from simulator.sweep.spec import load_spec

    frame = run_sweep(load_spec(FABRIC), tmp_path, make_backend("local"), progress=False)
    pts = frame[frame["point"] >= 0]
    nic = "cluster.topology.nic_bandwidth_text"
    leaf = pts["cluster.topology.oversubscription"].map(lambda r: float(r[0]))
    readme = (ROOT / "docs" / "what-if.md").read_text()
    for (bw, over), pair in pts.groupby([nic, leaf]):
        by_rails = pair.set_index("cluster.topology.rail_optimized")["step_time_s"]
        tor, rails = float(by_rails[False]), float(by_rails[True])
        if over == 1:
            # the same bandwidth leaves every leaf: only a hop's latency differs (1e-4)
            assert rails == pytest.approx(tor, rel=1e-4)
        else:
            assert rails < tor  # fewer pipeline sends climb to the oversubscribed spines
        row = f"| {bw} | {over:g}:1 / 7:1 | {tor:.4g} | {rails:.4g} |"
        assert row in readme, row
