"""A refusal of the step layer is bad input (exit 2); any other error is a bug (exit 1, with a
request to report it), never passed off as the user's mistake."""

from __future__ import annotations

import sys

import pytest

from simulator import api
from simulator.cli import main
from simulator.infeasible import InfeasibleError

EXAMPLE = "scenarios/examples/pipeline-1f1b.yaml"


def _main(monkeypatch, capsys, raised):
    def broken(*args, **kwargs):
        raise raised

    monkeypatch.setattr(api, "run", broken)
    monkeypatch.setattr(sys, "argv", ["trainsim", "run", EXAMPLE])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


def test_an_internal_value_error_is_a_bug_report(root, monkeypatch, capsys, caplog):
    monkeypatch.chdir(root)
    code, err = _main(monkeypatch, capsys, ValueError("internal: unresolved dependency"))
    assert code == 1
    assert "internal error: internal: unresolved dependency" in caplog.text  # and its traceback
    assert "This is a bug in trainsim" in err


def test_a_refusal_is_bad_input(root, monkeypatch, capsys):
    monkeypatch.chdir(root)
    code, err = _main(monkeypatch, capsys, InfeasibleError("no link 0 -> 99 in the topology"))
    assert code == 2
    assert f"error: {EXAMPLE}: no link 0 -> 99 in the topology" in err
    assert "bug" not in err


def test_the_sweep_marks_a_refusal_infeasible_and_a_bug_an_error(monkeypatch):
    from simulator.sweep import adapter
    from simulator.sweep.worker import Task, simulate_task

    for raised, status in ((InfeasibleError("refused"), "infeasible"), (KeyError("x"), "error")):
        monkeypatch.setattr(
            adapter, "simulate", lambda scenario, e=raised: (_ for _ in ()).throw(e)
        )
        row = simulate_task(Task("h", None))
        assert row["status"] == status, row
