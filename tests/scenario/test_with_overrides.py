"""A loaded scenario is frozen; api.with_overrides makes a changed copy validated as a file
with --set is, and the error of a frozen field says so."""

import pytest

from simulator import api
from simulator.scenario import ScenarioError

PATH = "scenarios/examples/pipeline-1f1b.yaml"


def test_setting_a_field_says_how_to_change_it():
    s = api.load(PATH)
    with pytest.raises(TypeError, match=r"api.with_overrides\(scenario"):
        s.training.global_batch = 32


def test_with_overrides_equals_loading_with_the_same_overrides():
    s = api.load(PATH)
    changed = api.with_overrides(s, {"training.global_batch": 32, "parallelism.zero": 1})
    assert changed == api.load(PATH, ["training.global_batch=32", "parallelism.zero=1"])
    assert s.training.global_batch == 16  # the original is untouched
    again = api.with_overrides(changed, ["parallelism.pipeline.schedule=gpipe"])
    assert again.parallelism.zero == 1 and again.parallelism.pipeline.schedule == "gpipe"


def test_with_overrides_validates_like_the_command_line():
    s = api.load(PATH)
    with pytest.raises(ScenarioError, match="parallelism.tp"):
        api.with_overrides(s, {"parallelism.tp": 3})  # 8 GPUs do not divide by 3 x 4


def test_a_scenario_changed_in_code_is_not_silently_rebuilt():
    s = api.load(PATH).model_copy(update={"name": "changed"})
    with pytest.raises(ValueError, match="changed in code"):
        api.with_overrides(s, {"training.global_batch": 32})


def test_equality_is_the_fields_not_the_provenance():
    a = api.load(PATH, ["training.global_batch=32", "parallelism.zero=1"])
    b = api.load(PATH, ["parallelism.zero=1", "training.global_batch=32"])
    assert a == b and a != api.load(PATH)


def test_string_values_stay_strings():
    s = api.load(PATH)
    assert api.with_overrides(s, {"description": "yes"}).description == "yes"
    assert api.with_overrides(s, {"description": "null"}).description == "null"
    assert api.with_overrides(s, {"name": "a: b"}).name == "a: b"
