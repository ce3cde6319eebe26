"""Pictures of a sweep: a metric against one swept key (one line per value of another), and a
heatmap over two keys. Out-of-memory points are drawn as such (a red cross; "OOM" in the cell),
infeasible and failed points too (grey; "n/a" or "error"), and the best point is marked.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from simulator.sweep.tables import best_point, higher_is_better  # noqa: E402

LABELS = {
    "step_time_s": "step time (s)",
    "mfu": "MFU",
    "hfu": "HFU",
    "tokens_per_s": "tokens/s",
    "peak_memory_bytes": "peak memory (GB)",
    "exposed_comm_fraction": "exposed communication (fraction of step)",
    "bubble_fraction": "pipeline bubble (fraction of step)",
}
_SCALE = {"peak_memory_bytes": 1e-9}


def _label(key: str) -> str:
    return LABELS.get(key, key)


def _order(values: pd.Series) -> list:
    seen: dict[str, object] = {}
    for v in values.tolist():  # lists (oversubscription) are unhashable: key by their text
        seen.setdefault(_text(v), v)
    uniq = list(seen.values())
    try:
        return sorted(uniq, key=_sort_key)
    except TypeError:
        return uniq


def _sort_key(v):
    from simulator.units import parse_quantity

    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, list) and v and isinstance(v[0], int | float):
        return float(v[0])
    if isinstance(v, str):
        for dim in ("bandwidth", "bytes", "time"):
            try:
                return parse_quantity(v, dim)
            except Exception:  # noqa: BLE001 - not that kind of quantity
                continue
    return float("inf")


def _text(v) -> str:
    """A swept value as a tick label: 2.0 -> "2", [1, 4] -> "1:4" (oversubscription)."""
    if isinstance(v, list):
        return ":".join(_text(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def line_plot(
    frame: pd.DataFrame,
    metric: str,
    x: str,
    group: str | None,
    path: Path,
    title: str = "",
) -> Path:
    """``metric`` against ``x``, one line per value of ``group``; OOM points as red crosses at
    their simulated value, infeasible and failed points as grey ticks on the x axis. Points
    that share an x and a group (other keys vary; name one as ``group``) are drawn unjoined:
    a line through them would zig-zag between unrelated points."""
    pts = frame[frame["point"] >= 0]
    xs = _order(pts[x])
    pos = {_text(v): i for i, v in enumerate(xs)}
    scale = _SCALE.get(metric, 1.0)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labelled: set[str] = set()
    for g in _order(pts[group]) if group else [None]:
        sub = pts if g is None else pts[pts[group].map(_text) == _text(g)]
        sub = sub.assign(_x=sub[x].map(lambda v: pos[_text(v)])).sort_values("_x")
        label = None if g is None else f"{group} = {_text(g)}"
        joined = not sub["_x"].duplicated().any()
        _draw_group(ax, sub, metric, scale, label, labelled, joined)
    best = best_point(frame)  # as the points table marks it
    if best is not None:
        row = pts[pts["point"] == best].iloc[0]
        ax.scatter(
            [pos[_text(row[x])]], [float(row[metric]) * scale], marker="*", s=260,
            color="gold", edgecolor="black", zorder=4, label="best",
        )  # fmt: skip
    ax.set_xticks(range(len(xs)), [_text(v) for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(_label(metric))
    ax.set_title(title or f"{_label(metric)} by {x}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _draw_group(
    ax, sub: pd.DataFrame, metric: str, scale: float, label, labelled: set, joined: bool = True
) -> None:
    """One group's line of ok points (markers alone unless ``joined``), its OOM crosses and
    its infeasible ticks (each of the last two labelled once per picture)."""

    def once(text: str) -> str | None:
        if text in labelled:
            return None
        labelled.add(text)
        return text

    ok = sub[sub["status"] == "ok"]
    ax.plot(
        ok["_x"], ok[metric].astype(float) * scale, marker="o", label=label,
        linestyle="-" if joined else "none",
    )  # fmt: skip
    oom = sub[sub["status"] == "oom"]
    if not oom.empty and metric in oom:
        ax.scatter(
            oom["_x"], oom[metric].astype(float) * scale, marker="x", color="red", s=60,
            zorder=3, label=once("out of memory"),
        )  # fmt: skip
    bad = sub[sub["status"].isin(["infeasible", "error"])]
    if not bad.empty:
        ax.scatter(
            bad["_x"], np.zeros(len(bad)), marker="|", color="grey", s=120,
            transform=ax.get_xaxis_transform(), clip_on=False, label=once("infeasible"),
        )  # fmt: skip


def heatmap(frame: pd.DataFrame, metric: str, x: str, y: str, path: Path, title: str = "") -> Path:
    """``metric`` coloured over ``x`` (columns) by ``y`` (rows); cells name OOM, infeasible and
    failed points, and the best point has a black frame."""
    pts = frame[frame["point"] >= 0]
    xs, ys = _order(pts[x]), _order(pts[y])
    xi = {_text(v): i for i, v in enumerate(xs)}
    yi = {_text(v): i for i, v in enumerate(ys)}
    scale = _SCALE.get(metric, 1.0)
    grid = np.full((len(ys), len(xs)), np.nan)
    notes: dict[tuple[int, int], str] = {}
    for row in pts.to_dict("records"):
        i, j = yi[_text(row[y])], xi[_text(row[x])]
        status = row["status"]
        if status == "ok":
            grid[i, j] = float(row[metric]) * scale
        else:
            notes[(i, j)] = {"oom": "OOM", "infeasible": "n/a", "error": "error"}[status]
    fig, ax = plt.subplots(figsize=(1.2 * len(xs) + 3, 0.8 * len(ys) + 2))
    cmap = plt.get_cmap("viridis" if higher_is_better(metric) else "viridis_r")
    cmap = cmap.with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto", origin="lower")
    fig.colorbar(im, ax=ax, label=_label(metric))
    fmt = "{:.1%}" if metric in ("mfu", "hfu") else "{:,.3g}"
    for i in range(len(ys)):
        for j in range(len(xs)):
            text = notes.get((i, j)) or ("" if np.isnan(grid[i, j]) else fmt.format(grid[i, j]))
            colour = "red" if text == "OOM" else "black" if (i, j) in notes else "white"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
    best = best_point(frame)  # as the points table marks it
    if best is not None:
        row = pts[pts["point"] == best].iloc[0]
        ax.add_patch(
            plt.Rectangle(
                (xi[_text(row[x])] - 0.5, yi[_text(row[y])] - 0.5),
                1,
                1,
                fill=False,
                edgecolor="black",
                linewidth=2.5,
            )
        )
    ax.set_xticks(range(len(xs)), [_text(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_text(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{_label(metric)} over {x} x {y} (best framed)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def default_plots(keys: list[str]) -> list[dict]:
    """Pictures drawn when the spec asks for none: a line for one key, a heatmap for two."""
    if len(keys) == 1:
        return [{"kind": "line", "metric": "step_time_s", "x": keys[0], "group": None}]
    if len(keys) == 2:
        return [{"kind": "heatmap", "metric": "step_time_s", "x": keys[0], "y": keys[1]}]
    return []


def draw(frame: pd.DataFrame, plot: dict, out_dir: Path, title: str = "") -> Path:
    """Draw one plot described like a spec's ``plots:`` entry into ``out_dir``."""
    kind, metric, x = plot["kind"], plot.get("metric", "step_time_s"), plot["x"]
    if kind == "heatmap":
        name = plot.get("file") or f"heatmap-{metric}-{x}-{plot['y']}.png"
        return heatmap(frame, metric, x, plot["y"], out_dir / name, title)
    name = plot.get("file") or f"line-{metric}-{x}.png"
    return line_plot(frame, metric, x, plot.get("group"), out_dir / name, title)
