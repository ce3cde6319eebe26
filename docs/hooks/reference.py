"""MkDocs hook: the command-line and scenario references, generated from the sources at build
time (``trainsim``'s Typer commands; the scenario's pydantic schema), so they cannot go stale."""

from __future__ import annotations

import os
import typing

from mkdocs.structure.files import File


def _cli_page() -> str:
    import click
    import typer

    from simulator.cli import app

    root = typer.main.get_command(app)
    out = [
        "# Command-line reference",
        "",
        "Generated from the commands' own help (`trainsim COMMAND --help` prints the same).",
        "",
    ]
    for name in sorted(root.commands):
        cmd = root.commands[name]
        ctx = click.Context(cmd, info_name=f"trainsim {name}", parent=click.Context(root))
        os.environ["COLUMNS"] = "100"
        text = cmd.get_help(ctx)
        out += [f"## `trainsim {name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


def _type_text(annotation) -> str:
    """A field's type as a reader writes it: ``int``, ``none | selective | full``, ``list of
    float``, a section's class name."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_text(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return "list of " + (_type_text(args[0]) if args else "values")
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "none"
    return getattr(annotation, "__name__", str(annotation))


def _model_rows(model, prefix: str, seen: set) -> list[str]:
    from pydantic import BaseModel

    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        default = "required" if field.is_required() else repr(field.get_default())
        if len(default) > 40:
            default = default[:37] + "..."
        rows.append(f"| `{key}` | {_type_text(field.annotation)} | `{default}` |")
        args = typing.get_args(field.annotation) or (field.annotation,)
        for sub in args:
            if isinstance(sub, type) and issubclass(sub, BaseModel) and sub not in seen:
                seen.add(sub)
                rows += _model_rows(sub, key + ".", seen)
    return rows


def _scenario_page() -> str:
    from simulator.scenario.schema import Scenario

    out = [
        "# Scenario reference",
        "",
        "Every field of a scenario file, generated from the schema (`simulator/scenario/`):",
        "its key, type and default. Quantities accept units (`400 Gb/s`, `80 GB`, `5 us`,",
        "`500 W`); what each field means, with its source, is in the docstring of its section",
        "and in [Scenario format](scenario.md). `trainsim check SCENARIO` prints a scenario",
        "with every default filled in.",
        "",
        "| key | type | default |",
        "|---|---|---|",
    ]
    out += _model_rows(Scenario, "", set())
    return "\n".join(out) + "\n"


def on_files(files, config):
    """Add the generated pages to the site."""
    for name, make in (("cli.md", _cli_page), ("scenario-reference.md", _scenario_page)):
        files.append(File.generated(config, name, content=make()))
    return files
