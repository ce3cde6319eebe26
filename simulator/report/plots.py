"""Memory and power over the step (with the HBM and power-limit lines) and utilisation of the
most utilised links of each level over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def draw_power(
    power: pd.DataFrame,
    limit_w: float,
    path: str | Path,
    ranks: list[int] | None = None,
    title: str = "",
) -> Path:
    """Each shown rank's draw over the step (W), averaged over 1 ms bins (the power
    controller's window is longer still), with the power limit line."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ranks = ranks if ranks is not None else sorted(power["rank"].unique())[:16]
    for r in ranks:
        f = power[power["rank"] == r]
        if f.empty:
            continue
        end = float(f["end_s"].max())
        edges = np.linspace(0.0, end, max(2, min(2000, int(end / 1e-3) + 1)))
        mean = binned(f.rename(columns={"watts": "utilisation"}), edges)  # mean draw per bin
        ax.step(edges[:-1] * 1e3, mean, where="post", label=f"rank {r}")
    ax.axhline(limit_w, color="red", linestyle="--", linewidth=1, label=f"limit {limit_w:.0f} W")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("power per GPU (W)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "power over the step")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def draw_memory(
    memory: pd.DataFrame,
    capacity: float,
    path: str | Path,
    ranks: list[int] | None = None,
    title: str = "",
    stage_of_rank: dict | None = None,
) -> Path:
    """Memory in use per shown rank over the step (GB), with the HBM capacity line; each
    rank labelled with its pipeline stage when ``stage_of_rank`` is given."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ranks = ranks if ranks is not None else sorted(memory["rank"].unique())[:16]
    for r in ranks:
        f = memory[memory["rank"] == r].sort_values("time_s", kind="stable")
        label = f"rank {r}"
        if stage_of_rank:
            stage = stage_of_rank.get(str(r), stage_of_rank.get(r))
            label += f" (stage {stage})" if stage is not None else ""
        ax.step(f["time_s"] * 1e3, f["bytes"] / 1e9, where="post", label=label, linewidth=1.2)
    ax.axhline(
        capacity / 1e9,
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"HBM {capacity / 1e9:.0f} GB",
    )
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("memory in use (GB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "memory over the step")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def binned(f: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Mean utilisation in each time bin of piecewise-constant ``f`` (start_s, end_s, u).

    The integral of each record's load up to time t is ``u x clip(t - start, 0, end - start)``;
    a bin's mean is the difference of the summed integrals at its edges over its width.
    Vectorised over records: a 16K-GPU step has hundreds of thousands of them.

    >>> f = pd.DataFrame({"start_s": [0.0, 1.0], "end_s": [1.0, 3.0], "utilisation": [1, .5]})
    >>> binned(f, np.array([0.0, 2.0, 4.0])).tolist()
    [0.75, 0.25]
    """
    start = f["start_s"].to_numpy(dtype=float)
    end = f["end_s"].to_numpy(dtype=float)
    u = f["utilisation"].to_numpy(dtype=float)
    keep = (u > 0) & (end > start)
    start, end, u = start[keep], end[keep], u[keep]
    area = np.zeros(len(edges))
    for lo in range(0, len(start), 4096):  # bounded memory: 4,096 records x the edges
        s, e, w = start[lo : lo + 4096, None], end[lo : lo + 4096, None], u[lo : lo + 4096, None]
        area += (w * np.clip(edges[None, :] - s, 0.0, e - s)).sum(axis=0)
    return np.diff(area) / np.diff(edges)


_KIND_ORDER = ["gpu", "nvswitch", "nic", "leaf", "spine", "core"]


def node_kind(name: str) -> str:
    """The kind of a topology node from its name (``3`` a device, ``leaf0.2`` a leaf...)."""
    name = name.strip()
    if name.lstrip("-").isdigit():
        return "gpu"
    for prefix in ("nvswitch", "nic", "leaf", "spine", "core"):
        if name.startswith(prefix):
            return prefix
    return "other"


def link_level(link: str) -> str:
    """``"nic3->leaf0.3"`` -> ``"nic-leaf up"``: the pair of node kinds and the direction
    (up = away from the devices), as in ``trainsim topology``'s level table."""
    u, _, v = link.partition("->")
    a, b = node_kind(u), node_kind(v)
    ra = _KIND_ORDER.index(a) if a in _KIND_ORDER else 99
    rb = _KIND_ORDER.index(b) if b in _KIND_ORDER else 99
    if ra == rb:
        return f"{a}-{b}"
    return f"{a}-{b} up" if ra < rb else f"{b}-{a} down"


def mean_utilisation(links: pd.DataFrame) -> pd.Series:
    """Time-weighted mean utilisation (0-1) of each link over the span of ``links``."""
    if not len(links):
        return pd.Series(dtype=float)
    start, end = 0.0, float(links["end_s"].max())  # the step starts at 0
    busy = (links["end_s"] - links["start_s"]) * links["utilisation"]
    return busy.groupby(links["link"], sort=False).sum() / max(end - start, 1e-300)


def most_utilised_per_level(utilisation: pd.Series, per_level: int = 2) -> list[str]:
    """The ``per_level`` most utilised links of each level, levels bottom up; of equally
    utilised links the first by name (not by their order in ``utilisation``, which follows
    how the links were numbered: a 16-way spread loads 16 links alike)."""
    frame = pd.DataFrame({"u": utilisation, "name": utilisation.index})
    frame["level"] = [link_level(n) for n in frame.index]
    frame = frame[frame["u"] > 0].sort_values(["u", "name"], ascending=[False, True])
    chosen = frame.groupby("level", sort=False).head(per_level)
    order = {lv: i for i, lv in enumerate(sorted(set(chosen["level"]), key=_level_key))}
    return sorted(chosen.index, key=lambda n: (order[chosen.at[n, "level"]], -chosen.at[n, "u"]))


def _level_key(level: str) -> tuple:
    kinds, _, direction = level.partition(" ")
    first = kinds.split("-")[-1]
    return (_KIND_ORDER.index(first) if first in _KIND_ORDER else 99, direction)


def draw_links(
    links: pd.DataFrame, path: str | Path, title: str = "", bins: int = 200, per_level: int = 1
) -> Path:
    """Utilisation (0-1) over the step of the most utilised links of each level, ``per_level``
    of each, in ``bins`` slices; the title names the busiest link (highest mean utilisation), which
    is a bottleneck only when it is busy most of the step."""
    mean = mean_utilisation(links)
    names = most_utilised_per_level(mean, per_level) or list(dict.fromkeys(links["link"]))[:1]
    end = float(links["end_s"].max()) if len(links) else 1.0
    edges = np.linspace(0.0, end, bins + 1)
    fig, axes = plt.subplots(
        max(len(names), 1), 1, figsize=(11, 1.3 + 0.9 * len(names)), sharex=True, squeeze=False
    )
    by_link = links.groupby("link", sort=False)
    for ax, name in zip(axes[:, 0], names, strict=False):
        u = binned(by_link.get_group(name), edges)
        ax.stairs(u, edges * 1e3, fill=True, color="#4c72b0", linewidth=0)
        ax.set_ylim(0, 1.05)
        ax.set_yticks([0, 0.5, 1])
        ax.set_ylabel(
            f"{name}\n{link_level(name)}", rotation=0, ha="right", va="center", fontsize=7
        )
        ax.tick_params(axis="y", labelsize=6)
        ax.text(
            1.005,
            0.5,
            f"mean {mean.get(name, 0.0):.0%}\npeak {u.max():.0%}",
            transform=ax.transAxes,
            fontsize=7,
            va="center",
        )
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xlabel("time (ms)")
    fig.supylabel("utilisation (load / capacity)", fontsize=8)
    heading = title or "link utilisation"
    if len(mean) and mean.max() > 0:
        worst = mean.idxmax()
        heading += (
            f"\nbusiest link: {worst} ({link_level(worst)}), {mean[worst]:.0%} busy on average; "
            + (
                "the most utilised link of each level"
                if per_level == 1
                else f"the {per_level} most utilised links of each level"
            )
            + f" (mean per 1/{bins} of the step)"
        )
    axes[0, 0].set_title(heading, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
