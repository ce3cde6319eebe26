"""Pictures of a topology: the whole graph when small, a per-level summary when large."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

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


def draw_topology(topo: Topology, path: str | Path) -> Path:
    """Write a PNG of ``topo`` to ``path``: the graph itself up to 400 nodes, else a bar chart
    of per-level link counts and bandwidth."""
    path = Path(path)
    g = topo.graph
    fig, ax = plt.subplots(figsize=(10, 6))
    if g.number_of_nodes() <= MAX_DRAWN_NODES:
        if topo.meta.get("kind") == "torus":
            pos = {n: _torus_pos(d["coords"]) for n, d in g.nodes(data=True)}
        else:
            for _node, d in g.nodes(data=True):
                d["layer"] = _LAYER[d["kind"]]
            pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
        colors = [_COLOR[d["kind"]] for _, d in g.nodes(data=True)]
        nx.draw_networkx(
            g.to_undirected(as_view=True),
            pos,
            ax=ax,
            node_color=colors,
            node_size=60,
            with_labels=g.number_of_nodes() <= 40,
            font_size=6,
            width=0.4,
            edge_color="#999999",
        )
        ax.set_title(f"{topo.name}: {topo.num_devices} devices")
        ax.axis("off")
    else:
        levels = link_levels(topo)
        ax.bar(levels["level"], levels["total_Bps"] / 1e12, color="#4c72b0")
        for i, row in levels.iterrows():
            ax.text(
                i,
                row["total_Bps"] / 1e12,
                f"{row['links']:,} links",
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_yscale("log")
        ax.set_ylabel("aggregate bandwidth per direction (TB/s, log scale)")
        ax.set_title(
            f"{topo.name}: {topo.num_devices:,} devices, {g.number_of_edges():,} directed links"
        )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _torus_pos(coords):
    x, y, z = (list(coords) + [0, 0])[:3]
    return (x + 0.35 * z, y + 0.25 * z)
