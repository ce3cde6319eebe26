"""MkDocs hook: the command-line and scenario references, generated from the sources at build
time (``trainsim``'s Typer commands; the scenario's pydantic schema), so they cannot go stale."""

from __future__ import annotations

import os
import typing


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


def _meaning(field, name: str, doc: str) -> str:
    """A field's meaning: its own docstring (the line under it in the schema), else its entry
    in its section's "Attributes" list, else the sentences of the section's documentation
    that name it; one table cell."""
    import re

    text = field.description
    entry = re.search(rf"^{name} : (.*?)(?=^\w+ : |^\S|\Z)", doc, re.M | re.S)
    if not text and entry:  # a numpy-style "Attributes" entry
        text = entry.group(1)
    if not text:
        sentences = re.split(r"(?<=[.;])\s+", " ".join(doc.split()))
        text = " ".join(s for s in sentences if f"`{name}`" in s)
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def _sections(model, prefix: str, seen: set) -> list[str]:
    """One section per model: its key, its docstring (what each field means, with sources and
    units), and a table of its own fields; nested sections follow."""
    import inspect

    from pydantic import BaseModel

    title = prefix.rstrip(".") or "scenario"
    doc = inspect.cleandoc(model.__doc__ or "").replace("``", "`")
    from simulator.units import si_unit

    head = "| key | type | unit | default | meaning |"
    out = [f"## `{title}`", "", doc, "", head, "|---|---|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        default = "required" if field.is_required() else repr(field.get_default())
        if len(default) > 40:
            default = default[:37] + "..."
        meaning = _meaning(field, name, doc)
        unit = si_unit(field.annotation, field.metadata)
        kind = _type_text(field.annotation)
        out.append(f"| `{key}` | {kind} | {unit} | `{default}` | {meaning} |")
        for sub in typing.get_args(field.annotation) or (field.annotation,):
            if isinstance(sub, type) and issubclass(sub, BaseModel) and sub not in seen:
                seen.add(sub)
                nested.append((sub, key + "."))
    out.append("")
    for sub, key in nested:
        out += _sections(sub, key, seen)
    return out


def _scenario_page() -> str:
    from simulator.scenario.schema import Scenario

    out = [
        "# Scenario reference",
        "",
        "Every field of a scenario file, generated from the schema (`simulator/scenario/`):",
        "each section with its own documentation (what its fields mean, their units and the",
        "sources of their defaults), then its fields' keys, types and defaults. Quantities",
        "accept units (`400 Gb/s`, `80 GB`, `5 us`, `500 W`); see also",
        "[Scenario format](scenario.md). `trainsim check SCENARIO` prints a scenario with",
        "every default filled in.",
        "",
    ]
    out += _sections(Scenario, "", set())
    return "\n".join(out) + "\n"


def _validation_page() -> str:
    """Every validation row, from the table ``benchmarks/validation_table.py`` writes (the
    slow validation test holds it to a fresh run)."""
    from pathlib import Path

    import pandas as pd

    data = Path(__file__).resolve().parents[1] / "data"
    frame = pd.read_csv(data / "validation-rows.csv", keep_default_na=False)
    made = (data / "validation-rows.txt").read_text().strip()
    out = [
        "# Validation rows",
        "",
        f"Every row of `trainsim validate`, as run on {made}. The published value, ours, the",
        "error, the tolerance, and for a row that misses, why (the summary and discussion are",
        "in [Validation](validation.md); sources per group in",
        "`scenarios/validation/published/rows.yaml`).",
        "",
    ]
    for group, rows in frame.groupby("group", sort=False):
        out += [f"## {group}", "", "| row | published | simulated | error | within | unit |"]
        out.append("|---|---|---|---|---|---|")
        for r in rows.itertuples():
            miss = "expected miss" if r.expected_miss else "no"
            within = "yes" if str(r.within) == "True" else miss
            out.append(
                f"| {r.row} | {float(r.published):.4g} | {float(r.simulated):.4g} | "
                f"{float(r.error):+.1%} | {within} | {r.unit} |"
            )
        misses = [(r.row, r.expected_miss) for r in rows.itertuples() if r.expected_miss]
        out.append("")
        out += [f"- {row}: {why}" for row, why in misses]
        out.append("")
    return "\n".join(out) + "\n"


SPEED_MARK = "<!-- speed-table -->"


def _speed_table() -> str:
    """The speed targets' table from ``benchmarks/bench_targets.py --docs``, with its
    machine, date and command."""
    from pathlib import Path

    import pandas as pd

    data = Path(__file__).resolve().parents[1] / "data"
    frame = pd.read_csv(data / "speed.csv")
    made = (data / "speed.txt").read_text().strip()
    out = [
        "| case | run s | x heapq loop | peak RSS MB | tasks | ranks simulated | step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in frame.itertuples():
        out.append(
            f"| {r.case} | {r.run_s:.2f} | {r.x_heapq:.1f} | {r.rss_MB:.0f} | {r.tasks:,} | "
            f"{r.ranks:,} | {r.step_s:.4g} |"
        )
    return "\n".join(out) + f"\n\nMeasured on {made}.\n"


def on_page_markdown(markdown, page, config, files):
    """The speed page's table, from the benchmark's last ``--docs`` run."""
    if SPEED_MARK in markdown:
        return markdown.replace(SPEED_MARK, _speed_table())
    return markdown


def on_files(files, config):
    """Add the generated pages to the site (mkdocs imported here: the pages' makers run
    without it, in the tests)."""
    from mkdocs.structure.files import File

    pages = (
        ("cli.md", _cli_page),
        ("scenario-reference.md", _scenario_page),
        ("validation-rows.md", _validation_page),
    )
    for name, make in pages:
        files.append(File.generated(config, name, content=make()))
    return files
