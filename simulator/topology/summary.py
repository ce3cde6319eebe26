"""What a topology offers: device and switch counts, links per level, bisection bandwidth."""

from __future__ import annotations

from collections import Counter, defaultdict

import pandas as pd

from simulator.topology.graph import Topology

_LEVEL_ORDER = ["gpu-nvswitch", "tpu-tpu", "gpu-nic", "nic-leaf", "leaf-spine", "spine-core"]


def _level(g, u, v) -> str:
    a, b = g.nodes[u]["kind"], g.nodes[v]["kind"]
    pair = (a, b) if _rank(a) <= _rank(b) else (b, a)
    return f"{pair[0]}-{pair[1]}"


def _rank(kind: str) -> int:
    return ["gpu", "tpu", "nvswitch", "nic", "leaf", "spine", "core"].index(kind)


def link_levels(topo: Topology) -> pd.DataFrame:
    """One row per level (pair of node kinds): links (counted one way), bandwidth per link
    and in total, per direction (B/s), and payload efficiency."""
    g = topo.graph
    rows: dict[str, dict] = defaultdict(
        lambda: {"links": 0, "total_Bps": 0.0, "link_Bps": set(), "efficiency": set()}
    )
    for u, v, d in g.edges(data=True):
        if _rank(g.nodes[u]["kind"]) > _rank(g.nodes[v]["kind"]):
            continue  # count each bidirectional link once, by its upward direction
        if g.nodes[u]["kind"] == g.nodes[v]["kind"] and str(u) > str(v):
            continue
        r = rows[_level(g, u, v)]
        r["links"] += 1
        r["total_Bps"] += d["bandwidth"]
        r["link_Bps"].add(round(d["bandwidth"], 3))
        r["efficiency"].add(round(d.get("efficiency", 1.0), 4))
    out = []
    for level in sorted(rows, key=lambda x: _LEVEL_ORDER.index(x) if x in _LEVEL_ORDER else 99):
        r = rows[level]
        out.append(
            {
                "level": level,
                "links": r["links"],
                "link_Bps": min(r["link_Bps"])
                if len(r["link_Bps"]) == 1
                else f"{min(r['link_Bps']):.3g}-{max(r['link_Bps']):.3g}",
                "total_Bps": r["total_Bps"],
                "efficiency": max(r["efficiency"]),
            }
        )
    return pd.DataFrame(out)


def bisection_bandwidth(topo: Topology) -> float:
    """Per-direction bandwidth (B/s) across the worst cut into two halves of the devices.

    NVSwitch domain: n/2 device links. Fat-tree: half the capacity of its thinnest level of
    scale-out links (a symmetric Clos is cut evenly at every level). Torus: the links crossing
    a cut through the middle of its longest dimension.
    """
    g = topo.graph
    kind = topo.meta.get("kind")
    if kind == "torus":
        shape = topo.meta["shape"]
        longest = max(shape)
        others = 1
        for s in shape:
            others *= s
        others //= longest
        link = next(iter(g.edges(data=True)))[2]["bandwidth"]
        rings = 2 if topo.meta["wraparound"] and longest > 2 else 1
        return rings * others * link
    per_level = Counter()
    for u, v, d in g.edges(data=True):
        ku, kv = g.nodes[u]["kind"], g.nodes[v]["kind"]
        if (ku, kv) in (("nic", "leaf"), ("leaf", "spine"), ("spine", "core")):
            per_level[(ku, kv)] += d["bandwidth"]
        elif ku in ("gpu", "tpu") and kv == "nvswitch":
            per_level["nvlink"] += d["bandwidth"]
    if kind == "nvswitch" or not any(k != "nvlink" for k in per_level):
        return per_level["nvlink"] / 2
    if "nic" in (k[0] for k in per_level if k != "nvlink") and topo.meta.get("leaves", 1) == 1:
        return per_level[("nic", "leaf")] / 2
    return min(v for k, v in per_level.items() if k != "nvlink") / 2


def summary(topo: Topology) -> dict:
    """Counts and headline bandwidths of ``topo`` (B/s per direction)."""
    kinds = Counter(d["kind"] for _, d in topo.graph.nodes(data=True))
    return {
        "name": topo.name,
        "kind": topo.meta.get("kind"),
        "devices": topo.num_devices,
        "hosts": len(set(topo.host_of.values())),
        "switches": {k: v for k, v in kinds.items() if k not in ("gpu", "tpu", "nic")},
        "nics": kinds.get("nic", 0),
        "links": topo.graph.number_of_edges(),
        "bisection_Bps": bisection_bandwidth(topo),
        **{k: v for k, v in topo.meta.items() if k not in ("kind",)},
    }
