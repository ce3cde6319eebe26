"""What the command line's modules share: the api imported on first use, and exits with a
message (code 2: bad input or a bad option)."""

from __future__ import annotations

import importlib
from pathlib import Path

import typer

from simulator.cli_options import OptionError
from simulator.scenario import ScenarioError


class OnFirstUse:
    """A module imported when one of its names is first read: ``trainsim --version`` and
    ``--help`` then cost the Python start and typer (about 0.1 s), not numpy, pandas,
    networkx and the engine (about 0.7 s)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


api = OnFirstUse("simulator.api")


def fail(message: str | Exception) -> None:
    """Exit 2 with ``message`` (a ScenarioError's names the file, line and field)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def checked(check, *args):
    """Run an option check from :mod:`simulator.cli_options`; a bad option exits 2."""
    try:
        return check(*args)
    except OptionError as exc:
        fail(str(exc))


def load(path: Path, overrides: list[str] | None):
    try:
        return api.load(path, overrides or [])
    except ScenarioError as exc:
        fail(exc)


GB = 1e9
