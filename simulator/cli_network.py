"""``trainsim topology`` and ``trainsim collective``: a fabric's shape, and one collective's
time on it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_args import Format, FormatOpt, TopoSetOpt
from simulator.cli_common import api, checked, fail
from simulator.cli_options import check_out_file
from simulator.scenario import ScenarioError

log = logging.getLogger("trainsim")

TopologyOpt = Annotated[Path, typer.Option("--topology", help="Topology YAML (topologies/).")]


AccelOpt = Annotated[
    str,
    typer.Option(
        "--accelerator", help="Accelerator whose NVLink rate applies where the file gives none."
    ),
]


def _topology(path: Path, accelerator: str, overrides: list[str] | None):
    try:
        return api.topology_from_file(path, accelerator, overrides or [])
    except ScenarioError as exc:
        fail(exc)
    except (KeyError, ValueError) as exc:
        typer.echo(f"error: {path}: {exc.args[0] if exc.args else exc}", err=True)
        raise typer.Exit(2) from None


def _built_shape(meta: dict) -> str:
    """ " AxBxC": the torus shape built, beside the file's name (which --set may contradict)."""
    shape = meta.get("shape")
    return " " + "x".join(map(str, shape)) if shape else ""


def topology(
    file: Annotated[Path, typer.Argument(help="Topology YAML.", show_default=False)],
    accelerator: AccelOpt = "H100-SXM",
    set_: TopoSetOpt = None,
    draw: Annotated[
        Path | None,
        typer.Option("--draw", help="Write a PNG: the graph if small, a per-level summary if not."),
    ] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Devices, links per level, and bisection bandwidth of a topology."""
    checked(check_out_file, draw, "--draw")
    topo = _topology(file, accelerator, set_)
    info, levels = api.topology_report(topo)
    if draw is not None:
        from simulator.topology.draw import draw_topology

        draw_topology(topo, draw)
        log.info("wrote %s", draw)
    if format is Format.json:
        typer.echo(json.dumps({**info, "levels": levels.to_dict("records")}, indent=2, default=str))
        return
    typer.echo(
        f"{info['name']} ({info['kind']}{_built_shape(info)}): {info['devices']:,} devices on "
        f"{info['hosts']:,} hosts, {info['links']:,} directed links"
    )
    switches = ", ".join(f"{v:,} {k}" for k, v in info["switches"].items()) or "none"
    typer.echo(f"switches: {switches}; NICs: {info['nics']:,}")
    if info.get("kind") == "fat_tree":
        typer.echo(api.fabric_line(info))
    typer.echo(f"bisection bandwidth: {info['bisection_Bps'] / 1e12:,.2f} TB/s per direction")
    shown = levels.copy()
    shown["link_GBps"] = shown["link_Bps"].map(
        lambda v: f"{v / 1e9:,.1f}" if isinstance(v, float) else v
    )
    shown["total_TBps"] = (shown["total_Bps"] / 1e12).map(lambda v: f"{v:,.2f}")
    typer.echo(
        shown[["level", "links", "link_GBps", "total_TBps", "efficiency"]].to_string(index=False)
    )


def collective(
    topology: TopologyOpt,
    op: Annotated[
        str,
        typer.Option(
            "--op",
            help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, send_recv",
        ),
    ] = "all_reduce",
    ranks: Annotated[
        int | None,
        typer.Option("--ranks", min=2, help="Ranks (the first N devices, 2 or more); default all."),
    ] = None,
    algo: Annotated[
        str | None,
        typer.Option(
            "--algo",
            help="ring, tree, direct, halving_doubling, hierarchical, "
            "torus, nvls, or auto (NCCL's choice by size: NVLS, ring or tree); default ring "
            "(direct for all_to_all).",
        ),
    ] = None,
    sizes: Annotated[
        str, typer.Option("--sizes", help="MIN:MAX[:FACTOR] or one size, e.g. 1MiB:8GiB.")
    ] = "1MiB:8GiB",
    groups: Annotated[
        int,
        typer.Option(
            "--groups", min=1, help="Identical groups running at once (next device blocks)."
        ),
    ] = 1,
    accelerator: AccelOpt = "H100-SXM",
    set_: TopoSetOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Time one collective over a topology for a range of sizes, like nccl-tests."""
    try:
        size_list = api.parse_sizes(sizes)
    except ValueError as exc:
        fail(f"--sizes {sizes}: {exc}")
    topo = _topology(topology, accelerator, set_)
    try:
        table = api.collective_table(topo, op, ranks, algo, size_list, groups)
    except ValueError as exc:
        fail(str(exc))
    if format is Format.json:
        typer.echo(table.to_json(orient="records", indent=2))
        return
    _echo_collective_table(table, topo, op, ranks or topo.num_devices, algo, groups)


def _echo_collective_table(table, topo, op: str, n: int, algo: str | None, groups: int) -> None:
    """The table as nccl-tests prints it: size, time (us), algorithm and bus bandwidth
    (GB/s), protocol; under a line naming the collective, its ``n`` ranks and fabric."""
    shown = table.copy()
    shown["size"] = shown["size_bytes"].map(_human_bytes)
    shown["time_us"] = (shown["time_s"] * 1e6).map(lambda v: f"{v:,.1f}")
    shown["algbw_GBps"] = (shown["algbw_Bps"] / 1e9).map(lambda v: f"{v:,.2f}")
    shown["busbw_GBps"] = (shown["busbw_Bps"] / 1e9).map(lambda v: f"{v:,.2f}")
    shape = _built_shape(topo.meta)
    name = f"{topo.name} ({topo.meta['kind']}{shape})" if shape else topo.name
    chosen = table["algorithm"].unique()
    how = f"algorithm {chosen[0]}" if len(chosen) == 1 else "algorithm chosen per size"
    typer.echo(
        f"{op} over {n} ranks of {name}, {how}"
        + ("" if algo else " (the default; --algo chooses)")
        + (f", {groups} groups at once" if groups > 1 else "")
    )
    columns = ["size", "time_us", "algbw_GBps", "busbw_GBps", "protocol"]
    if len(chosen) > 1:
        columns.insert(4, "algorithm")
    typer.echo(shown[columns].to_string(index=False))


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if n == int(n) else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def register(app: typer.Typer) -> None:
    """Add ``topology`` and ``collective`` to ``app``."""
    app.command()(topology)
    app.command()(collective)
