"""Memory over the step (with the HBM line) and utilisation of the busiest links over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def draw_memory(
    memory: pd.DataFrame,
    capacity: float,
    path: str | Path,
    ranks: list[int] | None = None,
    title: str = "",
) -> Path:
    """Memory in use per shown rank over the step (GB), with the HBM capacity line."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ranks = ranks if ranks is not None else sorted(memory["rank"].unique())[:16]
    for r in ranks:
        f = memory[memory["rank"] == r].sort_values("time_s", kind="stable")
        ax.step(f["time_s"] * 1e3, f["bytes"] / 1e9, where="post", label=f"rank {r}", linewidth=1.2)
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
    """Mean utilisation in each time bin of piecewise-constant ``f`` (start_s, end_s, u)."""
    out = np.zeros(len(edges) - 1)
    for s, e, u in f[["start_s", "end_s", "utilisation"]].itertuples(index=False):
        if u <= 0:
            continue
        lo, hi = np.searchsorted(edges, s, "right") - 1, np.searchsorted(edges, e, "left")
        for b in range(max(lo, 0), min(hi, len(out))):
            overlap = min(e, edges[b + 1]) - max(s, edges[b])
            if overlap > 0:
                out[b] += u * overlap
    return out / np.diff(edges)


def draw_links(links: pd.DataFrame, path: str | Path, title: str = "", bins: int = 200) -> Path:
    """Mean utilisation (0-1) of the busiest links in ``bins`` slices of the step."""
    names = list(dict.fromkeys(links["link"]))
    end = float(links["end_s"].max()) if len(links) else 1.0
    edges = np.linspace(0.0, end, bins + 1)
    fig, axes = plt.subplots(
        max(len(names), 1), 1, figsize=(11, 0.9 + 0.9 * len(names)), sharex=True, squeeze=False
    )
    for ax, name in zip(axes[:, 0], names, strict=False):
        u = binned(links[links["link"] == name], edges)
        ax.bar(
            edges[:-1] * 1e3,
            u,
            width=np.diff(edges) * 1e3,
            align="edge",
            color="#4c72b0",
            linewidth=0,
        )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=7)
        ax.tick_params(axis="y", labelsize=6)
    axes[-1, 0].set_xlabel("time (ms)")
    axes[0, 0].set_title(
        title or f"utilisation of the busiest links (mean per 1/{bins} of the step)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
