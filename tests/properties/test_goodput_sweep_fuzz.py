"""Fuzz the ``failures:`` section with the job model behind it, and sweep specs: each input is
accepted and runs, or is refused with a ScenarioError that names a line; nothing else (no
traceback, no hang: every example has a time bound). A few hundred examples run by default;
the slow suite runs 10,000 of each, in two halves the two test workers run side by side.
"""

from __future__ import annotations

import copy
import math
import time

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator import limits
from simulator.failures.model import resolve_job
from simulator.failures.montecarlo import simulate_seeds, summarise
from simulator.scenario import ScenarioError, load_scenario_text
from simulator.scenario.failures import check_failures
from simulator.sweep.spec import load_spec
from simulator.sweep.spec_keys import point_count
from tests.properties.mutation import mutate

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
SECONDS_PER_EXAMPLE = 5.0  # a bound far above what an example takes (tens of ms): a hang

BASE = {
    "name": "fuzz",
    "model": {"name": "llama3-8b", "layers": 2},
    "cluster": {"accelerator": "H100", "gpus": 16},
    "parallelism": {"tp": 8, "zero": 1},
    "training": {"global_batch": 16, "micro_batch": 1, "seq_len": 1024},
}
FAILURE_SEEDS = [
    {"preset": "llama3-table5"},
    {"preset": "llama3-table5", "causes": None, "node_rate": "6.5 / 1000 / d"},
    {"node_rate": "1 / d", "spares": 1, "repair": {"law": "lognormal", "mean": "12 h"}},
    {
        "causes": {
            "crash": {"rate": "1 / 100 / d", "per": "gpu", "law": "weibull", "shape": 0.7},
            "hang": {
                "rate": "2 / d",
                "per": "job",
                "takes_out": "software",
                "detected_by": "watchdog",
            },  # fmt: skip
        },
        "checkpoint": {"mode": "async", "interval": "10 min", "host_copy_bandwidth": "32 GB/s"},
        "policy": "elastic",
        "spares": 0,
    },
    {
        "node_rate": "3 / d",
        "maintenance": {"rate": "1 / d", "duration": "30 min", "law": "periodic"},
        "stragglers": {
            "random": {"fraction": 1e-3, "factor": 2},
            "gpus": [{"rank": 3, "power_cap": 0.8}],
        },  # fmt: skip
        "restart": {"scheduling": "2 min", "init_per_rank": "1 ms"},
        "detection": {"diagnosis": "1 min"},
    },
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "1 / d",
            "0 / s",
            "1e300 / s",
            "5 min",
            "0 s",
            "-1 h",
            "inf",
            "1e-9",
            "auto",
            "weibull",
            "lognormal",
            "fixed",
            "gpu",
            "node",
            "job",
            "switch",
            "async",
            "elastic",
            "1 / 0 / d",
            "2 TB/s",
            "0 B/s",
            "1e-4",
            "12 h",
            "",
        ]  # fmt: skip
    ),
    st.text(max_size=6),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _mutate(draw, data, keys):
    """Drop, replace or add 1-4 values anywhere in ``data``; added keys from ``keys``."""
    return mutate(draw, data, VALUES, st.one_of(st.sampled_from(keys), st.text(max_size=6)))


FAILURE_KEYS = ["rate", "per", "count", "law", "shape", "spares", "repair", "mean", "sigma",
                "interval", "mode", "write_bandwidth", "policy", "node_rate", "maintenance",
                "duration", "stragglers", "random", "fraction", "factor", "preset",
                "causes"]  # fmt: skip


@st.composite
def failure_scenarios(draw):
    failures = _mutate(draw, copy.deepcopy(draw(st.sampled_from(FAILURE_SEEDS))), FAILURE_KEYS)
    return yaml.dump({**BASE, "failures": failures}, Dumper=_DUMPER, sort_keys=False)


def _refusal_names_a_line(exc: ScenarioError) -> None:
    assert exc.problems
    for problem in exc.problems:
        assert problem.position.line >= 1 or problem.position.source.startswith("--"), problem
        assert problem.message


def _goodput(text: str) -> None:
    start = time.perf_counter()
    try:
        s = load_scenario_text(text, "fuzz.yaml")
    except ScenarioError as exc:
        _refusal_names_a_line(exc)
        return
    if s.failures is None:
        return
    assert not check_failures(s, 2.0) or True  # findings are refusals the CLI prints
    try:
        model = resolve_job(s, 2.0, 1e11)
    except ValueError as exc:  # a cause per switch or link with no count: named
        assert "failures.causes." in str(exc)
        return
    events = (model.unplanned_rate_s + model.maintenance_rate_s) * 86400.0
    if limits.beyond("events_per_seed", events, "fuzz"):
        return  # the CLI refuses it (tests/cli/test_bounds_and_refusals.py)
    result = summarise(simulate_seeds(model, days=1.0, seeds=1))
    assert 0.0 <= result["ettr_mean"] <= 1.0 + 1e-9
    assert all(math.isfinite(v) and v >= 0 for v in result["lost_hours_by_category"].values())
    assert time.perf_counter() - start < SECONDS_PER_EXAMPLE


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(failure_scenarios())
@example(yaml.dump({**BASE, "failures": {"node_rate": "1e300 / s"}}))
@example(yaml.dump({**BASE, "failures": {"causes": {"c": {"rate": "1 / d", "law": "weibull",
                                                          "shape": 0.2}}}}))  # fmt: skip
def test_failure_sections(text):
    _goodput(text)


@pytest.mark.slow
@pytest.mark.parametrize("half", ["first", "second"])
@settings(max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=failure_scenarios())
def test_failure_sections_10k(half, text):
    _goodput(text)


# ----------------------------------------------------------------------------- sweep specs

SPEC_SEEDS = [
    {"grid": {"parallelism.tp": [1, 2, 4, 8], "parallelism.zero": [0, 1]}},
    {
        "zip": {"parallelism.tp": [1, 2], "training.micro_batch": [2, 1]},
        "set": {"training.seq_len": 2048},
    },  # fmt: skip
    {
        "samples": {
            "count": 3,
            "seed": 1,
            "keys": {
                "training.micro_batch": {"low": 1, "high": 4, "integer": True},
                "parallelism.tp": [1, 2],
            },
        }
    },  # fmt: skip
    {
        "grid": {"training.global_batch": [16, 32]},
        "plots": [{"kind": "line", "x": "training.global_batch", "metric": "mfu"}],
    },  # fmt: skip
]
SPEC_KEYS = ["grid", "zip", "set", "samples", "plots", "count", "seed", "keys", "low", "high",
             "log", "integer", "kind", "x", "y", "group", "metric", "file", "name", "base",
             "parallelism.tp", "training.micro_batch", "nope.x", "", "5"]  # fmt: skip


@st.composite
def sweep_specs(draw):
    spec = _mutate(draw, copy.deepcopy(draw(st.sampled_from(SPEC_SEEDS))), SPEC_KEYS)
    return yaml.dump({"base": "base.yaml", **spec}, Dumper=_DUMPER, sort_keys=False)


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("specs")
    (folder / "base.yaml").write_text(yaml.dump(BASE, sort_keys=False))
    return folder


def _sweep_spec(folder, text: str) -> None:
    start = time.perf_counter()
    path = folder / "spec.sweep.yaml"
    path.write_text(text)
    try:
        spec = load_spec(path)
    except ScenarioError as exc:
        _refusal_names_a_line(exc)
        return
    assert point_count(spec.model) <= limits.bound("sweep_points")
    for point in spec.points()[:3]:
        try:
            spec.scenario(point.values)
        except ScenarioError as exc:  # an infeasible point: a row with its reason
            assert exc.problems
    assert time.perf_counter() - start < SECONDS_PER_EXAMPLE


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(text=sweep_specs())
@example(text="base: base.yaml\ngrid:\n  '': [1]\n")
@example(text="base: base.yaml\nset: {nope.x: 1}\ngrid: {parallelism.tp: [1]}\n")
def test_sweep_specs(spec_dir, text):
    _sweep_spec(spec_dir, text)


@pytest.mark.slow
@pytest.mark.parametrize("half", ["first", "second"])
@settings(max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(text=sweep_specs())
def test_sweep_specs_10k(spec_dir, half, text):
    _sweep_spec(spec_dir, text)
