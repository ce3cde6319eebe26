"""Pictures of a topology: the whole graph when small (with a legend of node kinds and the
links of each level), a per-level summary when large."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from simulator.topology.graph import Topology  # noqa: E402
from simulator.topology.summary import link_levels  # noqa: E402

MAX_DRAWN_NODES = 400
_LAYER = {"nvswitch": 0, "gpu": 1, "tpu": 1, "nic": 2, "leaf": 3, "spine": 4, "core": 5}
_COLOR = {
    "gpu": "#76b900",
    "tpu": "#4285f4",
    "nvswitch": "#555555",
    "nic": "#f0a030",
    "leaf": "#8e44ad",
    "spine": "#c0392b",
    "core": "#2c3e50",
}


_LABEL = {
    "gpu": "GPU",
    "tpu": "TPU",
    "nvswitch": "NVSwitch",
    "nic": "NIC",
    "leaf": "leaf switch",
    "spine": "spine switch",
    "core": "core switch",
}


def _natural(node) -> tuple:
    """Sort key placing ``nic10`` after ``nic9`` and ``leaf1.0`` after ``leaf0.7``."""
    return tuple(int(x) for x in re.findall(r"\d+", str(node))) or (0,)


def _layered_positions(g: nx.DiGraph) -> dict:
    """One row per node kind (NVSwitch at the bottom, devices above it, switches on top),
    nodes of a row in natural order so that device i sits under NIC i."""
    rows: dict[int, list] = {}
    for n, d in g.nodes(data=True):
        rows.setdefault(_LAYER[d["kind"]], []).append(n)
    pos = {}
    for layer, nodes in rows.items():
        nodes.sort(key=_natural)
        for i, n in enumerate(nodes):
            pos[n] = ((i + 0.5) / len(nodes), float(layer))
    return pos


def _level_lines(topo: Topology) -> list[str]:
    lines = []
    for row in link_levels(topo).itertuples():
        per_link = f"{row.link_Bps / 1e9:,.0f} GB/s" if isinstance(row.link_Bps, float) else ""
        lines.append(f"{row.level}: {row.links:,} links x {per_link} per direction")
    return lines


def draw_topology(topo: Topology, path: str | Path) -> Path:
    """Write a PNG of ``topo`` to ``path``: the graph itself up to 400 nodes (a legend of node
    kinds and the links of each level), else a bar chart of per-level link bandwidth."""
    path = Path(path)
    fig, ax = plt.subplots(figsize=(11, 6.5))
    if topo.graph.number_of_nodes() <= MAX_DRAWN_NODES:
        _draw_graph(ax, topo)
    else:
        _draw_level_bars(ax, topo)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _draw_graph(ax, topo: Topology) -> None:
    """The graph, nodes coloured by kind, with legends of node kinds and link levels."""
    g = topo.graph
    if topo.meta.get("kind") == "torus":
        pos = {n: _torus_pos(d["coords"]) for n, d in g.nodes(data=True)}
    else:
        pos = _layered_positions(g)
    colors = [_COLOR[d["kind"]] for _, d in g.nodes(data=True)]
    nx.draw_networkx(
        g.to_undirected(as_view=True), pos, ax=ax, node_color=colors, node_size=60,
        with_labels=g.number_of_nodes() <= 40, font_size=6, width=0.4, edge_color="#999999",
    )  # fmt: skip
    counts = Counter(d["kind"] for _, d in g.nodes(data=True))
    handles = [
        Line2D(
            [], [], marker="o", linestyle="", color=_COLOR[k], label=f"{_LABEL[k]} ({counts[k]:,})"
        )
        for k in sorted(counts, key=lambda k: -_LAYER[k])
    ]
    nodes_legend = ax.legend(
        handles=handles, loc="upper left", fontsize=8, title="nodes", title_fontsize=8
    )
    ax.add_artist(nodes_legend)
    lines = [Line2D([], [], color="#999999", label=t) for t in _level_lines(topo)]
    ax.legend(handles=lines, loc="upper right", fontsize=7, title="links", title_fontsize=8)
    ys = [y for _, y in pos.values()]
    ax.set_ylim(min(ys) - 0.3, max(ys) + 0.45 * (max(ys) - min(ys) + 1))  # room for legends
    ax.set_title(f"{topo.name}: {topo.num_devices:,} devices, {g.number_of_edges() // 2:,} links")
    ax.set_axis_off()


def _draw_level_bars(ax, topo: Topology) -> None:
    """Aggregate bandwidth per link level, for topologies too large to draw."""
    levels = link_levels(topo)
    ax.bar(levels["level"], levels["total_Bps"] / 1e12, color="#4c72b0")
    for i, row in levels.iterrows():
        per_link = (
            f" x {row['link_Bps'] / 1e9:,.0f} GB/s" if isinstance(row["link_Bps"], float) else ""
        )
        ax.text(
            i, row["total_Bps"] / 1e12, f"{row['links']:,} links" + per_link,
            ha="center", va="bottom", fontsize=8,
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("link level (pair of node kinds)")
    ax.set_ylabel("aggregate bandwidth per direction (TB/s, log scale)")
    ax.set_title(
        f"{topo.name}: {topo.num_devices:,} devices, {topo.graph.number_of_edges():,} directed "
        "links (too many nodes to draw: per-level totals)"
    )


def _torus_pos(coords):
    x, y, z = (list(coords) + [0, 0])[:3]
    return (x + 0.35 * z, y + 0.25 * z)
