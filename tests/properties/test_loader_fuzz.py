"""Fuzz the scenario loader: it accepts the input or raises ScenarioError, nothing else."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.scenario import Scenario, ScenarioError, load_scenario_text

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [
    yaml.safe_load(p.read_text())
    for p in sorted((ROOT / "scenarios").rglob("*.yaml"))
    if "published" not in p.parts
]
SEEDS = [s for s in SEEDS if isinstance(s, dict)]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "400 Gb/s",
            "80 GiB",
            "1e9",
            "fsdp",
            "1f1b",
            "on",
            "-1",
            "0",
            "1.5 us",
            "llama3-8b",
            "H100",
            "interleaved",
            "swiglu",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated(draw):
    data = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for seg in path[:-1]:
            parent = parent[seg]
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(values)
    return yaml.safe_dump(data, sort_keys=False)


def _load(text: str) -> None:
    try:
        result = load_scenario_text(text, "fuzz.yaml")
    except ScenarioError as exc:
        assert str(exc)  # the message is never empty
        for problem in exc.problems:
            assert str(problem.position)
    else:
        assert isinstance(result, Scenario)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_scenarios(text):
    _load(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_garbage_text(text):
    _load(text)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SEEDS), st.integers(0, 400), st.text(max_size=5))
def test_spliced_text(seed, cut, junk):
    text = yaml.safe_dump(seed, sort_keys=False)
    _load(text[:cut] + junk + text[cut:])
