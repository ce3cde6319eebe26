"""The Python API's surface: ``dir(simulator.api)`` lists its public names, not its imports,
and each of them is there."""

from __future__ import annotations

import simulator.api as api


def test_dir_lists_the_public_names_only():
    assert dir(api) == sorted(api.__all__)
    assert "np" not in dir(api) and "make_plan" not in dir(api)  # imports stay out of sight
    for name in api.__all__:
        assert getattr(api, name) is not None
        assert not name.startswith("_")


def test_the_names_a_notebook_starts_with_are_public():
    for name in ("load", "run", "RunResult", "build_plan", "build_step", "simulate", "perturb"):
        assert name in api.__all__
    namespace: dict = {}
    exec("from simulator.api import *", namespace)
    assert set(api.__all__) <= set(namespace)
