"""Every shipped sweep spec (scenarios/**/*.sweep.yaml) loads and names valid points."""

from __future__ import annotations

from simulator.sweep.runner import resolve_points
from simulator.sweep.spec import load_spec


def test_shipped_specs_load(root):
    specs = sorted((root / "scenarios").rglob("*.sweep.yaml"))
    assert len(specs) >= 3
    for path in specs:
        spec = load_spec(path)
        points = spec.points()
        assert points, path
        resolved = resolve_points(spec, [(p.index, p.values) for p in points])
        assert any(p.task is not None for p in resolved), path  # some point is feasible


def test_plot_axes_must_be_swept(write_spec):
    import pytest

    from simulator.scenario import ScenarioError

    path = write_spec(
        "grid:\n  parallelism.tp: [1, 2]\nplots:\n  - {kind: line, x: parallelism.pp}\n"
    )
    with pytest.raises(ScenarioError, match=r"spec.yaml:5:\d+: plots\[0\].x: 'parallelism.pp' is"):
        load_spec(path)
