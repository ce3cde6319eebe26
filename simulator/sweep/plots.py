"""Pictures of a sweep: a metric against one swept key, and a heatmap over two keys.

No swept key is hidden. A line plot draws one line per value of ``group`` - or, without a
group, per combination of every other key that varies - and a heatmap or a grouped line plot
draws one panel (small multiples) per combination of the keys beyond its axes, on one colour
or value scale. More panels than :data:`MAX_PANELS` is refused with the keys named.

Out-of-memory points are drawn as such (a red cross; "OOM" in the cell), infeasible and failed
points too (grey; "n/a" or "error"), and the best point is marked. Fractions (MFU, bubble,
exposed communication, stream utilisation) are drawn in percent; an oversubscription list reads
"4:1 leaf / 7:1 spine".
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

from simulator.sweep.columns import UTIL_PREFIX, text_column  # noqa: E402
from simulator.sweep.tables import best_point, higher_is_better  # noqa: E402

MAX_PANELS = 16  # small multiples beyond this are unreadable: the plot is refused

LABELS = {
    "step_time_s": "step time (s)",
    "mfu": "MFU (%)",
    "hfu": "HFU (%)",
    "tokens_per_s": "tokens/s",
    "model_tflops_per_gpu": "model TFLOP/s per GPU",
    "peak_memory_bytes": "peak memory (GB)",
    "exposed_comm_fraction": "exposed communication (% of step)",
    "bubble_fraction": "pipeline bubble (% of step)",
    "overlap_fraction": "overlapped communication (% of step)",
    "compute_fraction": "compute (% of step)",
    "sync_wait_fraction": "waiting at synchronisation (% of step)",
}
FRACTIONS = {
    "mfu",
    "hfu",
    "exposed_comm_fraction",
    "bubble_fraction",
    "overlap_fraction",
    "compute_fraction",
    "sync_wait_fraction",
}
_SCALE = {"peak_memory_bytes": 1e-9}
_LEVELS = ("leaf", "spine", "core")  # what each oversubscription ratio sits above


class PlotError(ValueError):
    """A plot that cannot show every swept key; the message names them."""


def _label(key: str) -> str:
    if key.startswith(UTIL_PREFIX):
        return f"{key[len(UTIL_PREFIX) :]} stream busy (% of step)"
    return LABELS.get(key, key)


def is_fraction(metric: str) -> bool:
    """A metric between 0 and 1 that is drawn in percent."""
    return metric in FRACTIONS or metric.startswith(UTIL_PREFIX)


def oversubscription_text(ratios) -> str:
    """``[4, 7]`` -> ``"4:1 leaf / 7:1 spine"``: each level's downlink:uplink ratio, named by
    the switches it sits above."""
    parts = []
    for level, r in zip(_LEVELS, ratios, strict=False):
        parts.append(f"{float(r):g}:1 {level}")
    return " / ".join(parts)


def value_label(key: str, value, written=None) -> str:
    """A swept value as a tick, legend or panel label: as written (``"400 Gb/s"``), an
    oversubscription list by level, a whole float without its ``.0``."""
    if key.endswith("oversubscription"):
        ratios = value if isinstance(value, list | tuple | np.ndarray) else None
        if ratios is None and isinstance(written, list):
            ratios = written
        if ratios is not None and len(ratios) and not isinstance(ratios[0], str):
            return oversubscription_text(list(ratios))
    if isinstance(written, str) and written:
        return written
    return _text(value)


def _text(v) -> str:
    if isinstance(v, list | tuple | np.ndarray):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    if v is None:
        return "-"
    return str(v)


def _sort_key(v):
    """Order of a swept value: by its number (the first of a list), names after numbers."""
    if isinstance(v, bool):
        return (0, float(v), "")
    if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v)):
        return (0, float(v), "")
    if isinstance(v, list | tuple | np.ndarray) and len(v):
        return (0, float(v[0]), _text(v))
    if isinstance(v, str):
        from simulator.sweep.columns import as_quantity

        si = as_quantity(v)
        if si is not None:
            return (0, si, v)
    return (1, 0.0, _text(v))


def labelled(frame: pd.DataFrame, key: str) -> tuple[pd.Series, list[str]]:
    """Each row's label for ``key`` and the labels in the key's numeric order."""
    written = frame[text_column(key)] if text_column(key) in frame else None
    labels = [
        value_label(key, v, None if written is None else written.iloc[i])
        for i, v in enumerate(frame[key].tolist())
    ]
    first: dict[str, object] = {}
    for label, v in zip(labels, frame[key].tolist(), strict=True):
        first.setdefault(label, v)
    order = sorted(first, key=lambda lab: _sort_key(first[lab]))
    return pd.Series(labels, index=frame.index), order


def swept_keys(frame: pd.DataFrame) -> list[str]:
    """The swept keys of a results frame: the columns that have a ``KEY_text`` twin."""
    suffix = text_column("")
    return [
        c[: -len(suffix)]
        for c in frame.columns
        if c.endswith(suffix) and c[: -len(suffix)] in frame
    ]


def varying(frame: pd.DataFrame, keys: list[str] | None) -> list[str]:
    """The keys (default: every swept key of ``frame``) that take more than one value over
    the points."""
    keys = swept_keys(frame) if keys is None else keys
    pts = frame[frame["point"] >= 0]
    return [k for k in keys if k in pts and labelled(pts, k)[0].nunique() > 1]


def _combinations(pts: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """(``"k = v, ..."``, rows) per combination of ``keys`` present in ``pts``, in value
    order; one unnamed group of every row without keys."""
    if not keys:
        return [("", pts)]
    labels = {k: labelled(pts, k) for k in keys}
    out = []
    for combo in itertools.product(*(labels[k][1] for k in keys)):
        mask = np.ones(len(pts), dtype=bool)
        for k, value in zip(keys, combo, strict=True):
            mask &= (labels[k][0] == value).to_numpy()
        if mask.any():
            name = ", ".join(f"{_short(k)} = {v}" for k, v in zip(keys, combo, strict=True))
            out.append((name, pts[mask]))
    return out


def _panels(pts: pd.DataFrame, facet_keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) per combination of ``facet_keys``; refused past :data:`MAX_PANELS`."""
    out = _combinations(pts, facet_keys)
    if len(out) > MAX_PANELS:
        raise PlotError(
            f"{len(out)} panels (one per value of {', '.join(facet_keys)}): more than "
            f"{MAX_PANELS}; name fewer keys in the sweep or plot a slice of results.parquet"
        )
    return out


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _grid(n: int, width: float, height: float):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=True
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _percent_axis(axis, metric: str) -> None:
    if is_fraction(metric):
        axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))


def line_plot(
    frame: pd.DataFrame,
    metric: str,
    x: str,
    group: str | None,
    path: Path,
    title: str = "",
    keys: list[str] | None = None,
) -> Path:
    """``metric`` against ``x``: one line per value of ``group`` and a panel per combination of
    the other varying keys; without ``group``, one line per combination of every other varying
    key. OOM points are red crosses at their simulated value, infeasible and failed points grey
    ticks on the x axis. Points that still share an x within a line are drawn unjoined."""
    pts = frame[frame["point"] >= 0]
    others = [k for k in varying(frame, keys) if k not in (x, group)]
    line_keys = [group] if group else others
    facet_keys = others if group else []
    xlab, xs = labelled(pts, x)
    pos = {v: i for i, v in enumerate(xs)}
    scale = _SCALE.get(metric, 1.0)
    panels = _panels(pts, facet_keys)
    fig, axes = _grid(len(panels), 7.0 if len(panels) == 1 else 5.0, 4.2)
    best = best_point(frame)  # as the points table marks it
    for ax, (panel_title, sub_pts) in zip(axes, panels, strict=True):
        labelled_once: set[str] = set()
        for name, sub in _combinations(sub_pts, line_keys):
            sub = sub.assign(_x=xlab[sub.index].map(pos)).sort_values("_x")
            joined = not sub["_x"].duplicated().any()
            _draw_group(ax, sub, metric, scale, name or None, labelled_once, joined)
        if best is not None and (sub_pts["point"] == best).any():
            row = sub_pts[sub_pts["point"] == best].iloc[0]
            ax.scatter(
                [pos[xlab[row.name]]], [float(row[metric]) * scale], marker="*", s=260,
                color="gold", edgecolor="black", zorder=4, label="best",
            )  # fmt: skip
        ax.set_xticks(range(len(xs)), xs, rotation=20 if len(xs) > 4 else 0)
        ax.set_xlabel(x)
        ax.set_title(panel_title, fontsize=9)
        ax.grid(alpha=0.3)
        _percent_axis(ax.yaxis, metric)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0].set_ylabel(_label(metric))
    fig.suptitle(title or f"{_label(metric)} by {x}")
    fig.tight_layout()
    return _save(fig, path)


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


def heatmap(
    frame: pd.DataFrame,
    metric: str,
    x: str,
    y: str,
    path: Path,
    title: str = "",
    keys: list[str] | None = None,
) -> Path:
    """``metric`` coloured over ``x`` (columns) by ``y`` (rows), one panel per combination of
    the other varying keys on one colour scale; cells name OOM, infeasible and failed points,
    and the best point has a black frame."""
    pts = frame[frame["point"] >= 0]
    facet_keys = [k for k in varying(frame, keys) if k not in (x, y)]
    xlab, xs = labelled(pts, x)
    ylab, ys = labelled(pts, y)
    xi = {v: i for i, v in enumerate(xs)}
    yi = {v: i for i, v in enumerate(ys)}
    scale = _SCALE.get(metric, 1.0)
    panels = _panels(pts, facet_keys)
    grids, notes = [], []
    for _, sub in panels:
        grid, note = _cells(sub, metric, scale, (ylab, yi), (xlab, xi))
        grids.append(grid)
        notes.append(note)
    finite = np.concatenate([g[np.isfinite(g)] for g in grids]) if grids else np.array([])
    vmin, vmax = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    fig, axes = _grid(len(panels), 1.2 * len(xs) + 2.5, 0.8 * len(ys) + 1.8)
    cmap = plt.get_cmap("viridis" if higher_is_better(metric) else "viridis_r")
    cmap = cmap.with_extremes(bad="#dddddd")
    fmt = "{:.1%}" if is_fraction(metric) else "{:,.3g}"
    best = best_point(frame)
    im = None
    for ax, (panel_title, sub), grid, note in zip(axes, panels, grids, notes, strict=True):
        im = ax.imshow(
            np.ma.masked_invalid(grid), cmap=cmap, aspect="auto", origin="lower",
            vmin=vmin, vmax=vmax,
        )  # fmt: skip
        _cell_texts(ax, grid, note, fmt, cmap, (vmin, vmax))
        if best is not None and (sub["point"] == best).any():
            idx = sub.index[sub["point"] == best][0]
            ax.add_patch(
                plt.Rectangle(
                    (xi[xlab[idx]] - 0.5, yi[ylab[idx]] - 0.5), 1, 1,
                    fill=False, edgecolor="black", linewidth=2.5,
                )
            )  # fmt: skip
        ax.set_xticks(range(len(xs)), xs, rotation=20 if len(xs) > 4 else 0)
        ax.set_yticks(range(len(ys)), ys)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(panel_title, fontsize=9)
    bar = fig.colorbar(im, ax=axes, label=_label(metric))
    _percent_axis(bar.ax.yaxis, metric)
    fig.suptitle(title or f"{_label(metric)} over {x} x {y} (best framed)")
    return _save(fig, path)


def _cells(sub: pd.DataFrame, metric: str, scale: float, rows: tuple, cols: tuple):
    """One panel's grid of ``metric`` x ``scale`` (NaN where no point ran) and the notes of
    its points that did not run ok, by (row, column); ``rows`` and ``cols``: each point's
    label and each label's position."""
    (ylab, yi), (xlab, xi) = rows, cols
    grid = np.full((len(yi), len(xi)), np.nan)
    note: dict[tuple[int, int], str] = {}
    for idx, row in sub.iterrows():
        i, j = yi[ylab[idx]], xi[xlab[idx]]
        if row["status"] == "ok":
            grid[i, j] = float(row[metric]) * scale
        else:
            note[(i, j)] = {"oom": "OOM", "infeasible": "n/a", "error": "error"}[row["status"]]
    return grid, note


def _cell_texts(ax, grid: np.ndarray, note: dict, fmt: str, cmap, limits: tuple) -> None:
    """Each cell's value (or note) in ink that reads on its colour."""
    vmin, vmax = limits
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            text = note.get((i, j)) or ("" if np.isnan(grid[i, j]) else fmt.format(grid[i, j]))
            colour = "red" if text == "OOM" else "black"
            if (i, j) not in note and not np.isnan(grid[i, j]):
                colour = _ink(cmap, (grid[i, j] - vmin) / ((vmax - vmin) or 1.0))
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)


def _ink(cmap, level: float) -> str:
    """Black on a light cell, white on a dark one (ITU-R BT.601 luma of the cell's colour)."""
    r, g, b, _ = cmap(float(np.clip(level, 0.0, 1.0)))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def default_plots(keys: list[str], metric: str = "step_time_s") -> list[dict]:
    """Pictures drawn when the spec asks for none: ``metric`` against each swept key (lines by
    the next key, panels by the rest), and a heatmap of the first two keys (panels by the
    rest)."""
    out = []
    for i, key in enumerate(keys):
        group = keys[(i + 1) % len(keys)] if len(keys) > 1 else None
        out.append({"kind": "line", "metric": metric, "x": key, "group": group})
    if len(keys) >= 2:
        out.append({"kind": "heatmap", "metric": metric, "x": keys[0], "y": keys[1]})
    return out


def draw(
    frame: pd.DataFrame,
    plot: dict,
    out_dir: Path,
    title: str = "",
    keys: list[str] | None = None,
) -> Path:
    """Draw one plot described like a spec's ``plots:`` entry into ``out_dir``; ``keys`` are
    every swept key (default: the frame's, from its ``KEY_text`` columns); those beyond the
    plot's axes become panels or lines. PlotError when they would need more than
    :data:`MAX_PANELS` panels."""
    kind, metric, x = plot["kind"], plot.get("metric", "step_time_s"), plot["x"]
    simulated = frame[frame["status"].isin(["ok", "oom"])] if "status" in frame else frame
    if metric not in frame or not simulated[metric].notna().any():
        raise PlotError(f"no point was simulated, so there is no {metric} to draw")
    if kind == "heatmap":
        name = plot.get("file") or f"heatmap-{metric}-{x}-{plot['y']}.png"
        return heatmap(frame, metric, x, plot["y"], out_dir / name, title, keys)
    name = plot.get("file") or f"line-{metric}-{x}.png"
    return line_plot(frame, metric, x, plot.get("group"), out_dir / name, title, keys)
