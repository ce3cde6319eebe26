"""Spec files: expansion of grid, zip and samples; bad specs fail before any point runs."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.scenario import ScenarioError
from simulator.sweep import adapter
from simulator.sweep.spec import Range, Samples, draw_samples, load_spec, override_text
from tests.sweep.conftest import TINY_BASE


def test_grid_is_the_product_in_order(write_spec):
    spec = load_spec(write_spec("grid:\n  parallelism.tp: [1, 2]\n  parallelism.pp: [1, 2, 4]\n"))
    values = [p.values for p in spec.points()]
    assert len(values) == 6
    assert values[0] == {"parallelism.tp": 1, "parallelism.pp": 1}
    assert values[1] == {"parallelism.tp": 1, "parallelism.pp": 2}
    assert values[-1] == {"parallelism.tp": 2, "parallelism.pp": 4}


def test_zip_walks_lists_together_and_multiplies_the_grid(write_spec):
    spec = load_spec(
        write_spec(
            "grid:\n  parallelism.zero: [0, 1]\n"
            "zip:\n  parallelism.tp: [1, 2, 4]\n  parallelism.pp: [4, 2, 1]\n"
        )
    )
    values = [p.values for p in spec.points()]
    assert len(values) == 2 * 3
    assert [(v["parallelism.tp"], v["parallelism.pp"]) for v in values[:3]] == [
        (1, 4),
        (2, 2),
        (4, 1),
    ]
    assert spec.keys == ["parallelism.zero", "parallelism.tp", "parallelism.pp"]


def test_samples_are_seeded_and_within_their_ranges():
    samples = Samples(
        count=50,
        seed=7,
        keys={
            "parallelism.tp": [1, 2, 4],
            "training.micro_batch": Range(low=1, high=8, log=True, integer=True),
        },
    )
    a, b = draw_samples(samples), draw_samples(samples)
    assert a == b  # same seed, same points
    assert a != draw_samples(samples.model_copy(update={"seed": 8}))
    assert {p["parallelism.tp"] for p in a} == {1, 2, 4}  # 50 draws of 3 choices hit all
    assert all(1 <= p["training.micro_batch"] <= 8 for p in a)
    assert all(isinstance(p["training.micro_batch"], int) for p in a)


@pytest.mark.parametrize(
    "value", [4, "400 Gb/s", [1, 4], {"a": 1}, True, 1e-6, 1e9, "1e9", "on", None]
)
def test_override_text_reads_back_the_same_value(value):
    from simulator.scenario.loader import parse_override

    assert parse_override(override_text("a.b", value)) == (("a", "b"), value)


def _error(spec_path) -> str:
    with pytest.raises(ScenarioError) as exc:
        load_spec(spec_path)
    return str(exc.value)


def test_unknown_key_names_the_spec_line_and_column(write_spec):
    path = write_spec("grid:\n  parallelism.tp: [1, 2]\n  parallelism.tpp: [1]\n")
    # line 1 is "base:", so the grid's second key is on line 4, column 3
    assert _error(path).startswith(f"{path}:4:3: parallelism.tpp: unknown field")


def test_wrong_type_names_the_value(write_spec):
    path = write_spec("grid:\n  parallelism.tp: [1, two]\n")
    message = _error(path)
    assert message.startswith(f"{path}:3:23: parallelism.tp:")
    assert "integer" in message


def test_empty_list_and_unequal_zip(write_spec):
    path = write_spec("grid:\n  parallelism.tp: []\n")
    assert _error(path).startswith(f"{path}:3:3: grid.parallelism.tp: List should have at least 1")
    path = write_spec("zip:\n  parallelism.tp: [1, 2]\n  parallelism.pp: [1]\n")
    # at the zip: key (line 2), naming each list's length (it said 1:1 and gave no keys)
    assert _error(path).startswith(f"{path}:2:1: zip: zip lists are walked together")
    assert "(parallelism.tp: 2, parallelism.pp: 1)" in _error(path)


@pytest.mark.parametrize(
    "text, line, section",
    [
        ("grid:\n  parallelism.tp: [1]\nzip:\n  parallelism.tp: [2]\n", 5, "zip"),
        ("set:\n  parallelism.tp: 1\ngrid:\n  parallelism.tp: [2]\n", 5, "grid"),
        (
            "grid:\n  parallelism.tp: [1]\n"
            "samples:\n  count: 2\n  keys:\n    parallelism.tp: [2, 4]\n",
            7,
            "samples.keys",
        ),
    ],
)
def test_a_key_swept_in_two_places_is_refused(write_spec, text, line, section):
    # QA: grid's value was silently dropped for zip's; the second place is named
    path = write_spec(text)
    assert _error(path).startswith(f"{path}:{line}:")
    assert f"{section}.parallelism.tp: 'parallelism.tp' is already in" in _error(path)


def test_a_plot_of_an_unknown_metric_is_refused_before_any_point_runs(write_spec):
    # QA: KeyError after the whole sweep
    path = write_spec(
        "grid:\n  parallelism.tp: [1, 2]\n"
        "plots:\n  - {kind: line, metric: step_tme_s, x: parallelism.tp}\n"
    )
    message = _error(path)
    assert message.startswith(f"{path}:5:")
    assert "plots[0].metric: 'step_tme_s' is not a metric; known: num_gpus" in message
    assert "step_time_s" in message


def test_missing_base_and_no_points(write_spec, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("base: nowhere.yaml\ngrid: {parallelism.tp: [1]}\n")
    assert _error(spec).startswith(f"{spec}:1:1: base: base scenario 'nowhere.yaml' not found")
    assert "no points" in _error(write_spec("name: x\n"))


def test_inconsistent_values_are_not_spec_errors(write_spec):
    # tp 3 does not divide 32 heads: the point is infeasible, the spec is fine
    spec = load_spec(write_spec("grid:\n  parallelism.tp: [2, 3]\n"))
    assert len(spec.points()) == 2


def test_bad_spec_exits_2_before_any_point_runs(write_spec, monkeypatch):
    calls = []
    monkeypatch.setattr(adapter, "simulate", lambda s: calls.append(s))
    path = write_spec("grid:\n  parallelism.tp: [1, 2]\n  parallelism.tpp: [1]\n")
    result = CliRunner().invoke(app, ["sweep", str(path), "--workers", "1", "--no-progress"])
    assert result.exit_code == 2
    assert f"{path}:4:3: parallelism.tpp: unknown field" in result.stderr
    assert "Traceback" not in result.output
    assert calls == []


def test_an_unknown_key_is_reported_once_for_all_its_values(write_spec):
    # QA: the same unknown-field line came once per swept value
    path = write_spec("grid:\n  parallelism.tpp: [1, 2, 4]\n")
    assert _error(path) == f"{path}:3:3: parallelism.tpp: unknown field"


def test_sampled_ranges_may_carry_units(write_spec):
    # QA: {low: 100 Gb/s, high: 800 Gb/s} was refused with pydantic's internals
    spec = load_spec(
        write_spec(
            "samples:\n  count: 20\n  keys:\n"
            "    cluster.topology.nic_bandwidth: {low: 100 Gb/s, high: 800 Gb/s, log: true}\n",
            base=TINY_BASE.replace(
                "topology: {include: topologies/dgx-h100.yaml}",
                "topology: {kind: fat_tree, nodes: 2}",
            ),
        )
    )
    drawn = [p.values["cluster.topology.nic_bandwidth"] for p in spec.points()]
    assert all(12.5e9 <= v <= 100e9 for v in drawn)  # B/s
    bad = write_spec(
        "samples:\n  count: 2\n  keys:\n    training.micro_batch: {low: 1 GB, high: 2 s}\n"
    )
    message = _error(bad)
    assert message.startswith(f"{bad}:5:")
    assert "low and high are different kinds of quantity (bytes, time)" in message


def test_a_range_of_bare_numbers_written_as_text_is_unitless():
    # the review: YAML reads 1e9 as text, which read as a bandwidth and clashed with 80 GB
    assert Range(low="1e9", high="80 GB").low == 1e9
    with pytest.raises(ValueError, match="finite"):
        Range(low="1", high="inf")
