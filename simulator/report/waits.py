"""Who waits on whom in a simulated step: the waits a Gantt chart draws as arrows.

Two kinds, read off the trace alone (a saved run redraws them):

- **a collective's members** start it together (the engine's rendezvous); a member whose
  compute ended earlier waits for the one whose compute ended last, the *pacer* (a slow GPU in
  a tensor-parallel group makes its partners wait at every collective of every layer);
- **a pipeline stage** whose compute stream was idle until a transfer from its neighbour
  (``pp_fwd``, ``pp_bwd``) ended waits on that neighbour: the arrow runs from the end of the
  transfer to the compute that starts then.

A wait is the idle time of the waiting rank's compute stream before the task it waited for
(s). Only the longest are drawn (:data:`MAX_ARROWS`), and none shorter than a share of the
span shown (a bar's width at the chart's resolution).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_ARROWS = 40  # waits drawn at most: more would hide the bars they point at
_COLUMNS = ["src_rank", "src_stream", "src_s", "dst_rank", "dst_stream", "dst_s", "wait_s", "kind"]
_INSTANCE = ["stream", "name", "layer", "microbatch", "phase", "start_s"]
_EPS_S = 1e-9  # a compute task starting within this of a transfer's end starts because of it


def step_waits(
    frame: pd.DataFrame,
    ranks: list[int],
    stage_of_rank: dict | None = None,
    min_wait_s: float = 0.0,
) -> pd.DataFrame:
    """The waits among ``ranks`` (columns: source rank and stream, the time it released the
    wait, the waiting rank and stream, when it went on, the wait in s, and the kind:
    "collective" or "pipeline"), the longest first, at least ``min_wait_s`` each. A transfer
    releases a rank of a neighbouring stage (``stage_of_rank``; without it, any other rank)."""
    shown = frame[frame["rank"].isin(ranks)]
    compute = shown[(shown["kind"] == "compute") & (shown["end_s"] > shown["start_s"])]
    ends = {r: np.sort(g["end_s"].to_numpy()) for r, g in compute.groupby("rank", sort=False)}
    starts = {
        r: g.sort_values("start_s")[["start_s", "end_s"]].to_numpy()
        for r, g in compute.groupby("rank", sort=False)
    }
    stage = _stages(stage_of_rank, ranks)
    rows = _collective_waits(shown, ends) + _pipeline_waits(shown, starts, stage)
    out = pd.DataFrame(rows, columns=_COLUMNS)
    out = out[out["wait_s"] >= max(min_wait_s, _EPS_S)]
    return out.sort_values("wait_s", ascending=False, kind="stable").reset_index(drop=True)


def _ready(ends: dict, rank: int, t: float) -> float | None:
    """The end of ``rank``'s last compute task ending by ``t`` (None: none did)."""
    e = ends.get(rank)
    if e is None:
        return None
    k = np.searchsorted(e, t + _EPS_S, side="right")
    return float(e[k - 1]) if k else None


def _collective_waits(shown: pd.DataFrame, ends: dict) -> list[tuple]:
    """Each member of a collective run by two or more shown ranks that waited for its pacer."""
    comm = shown[(shown["kind"] == "comm") & ~shown["stream"].isin(["pp_fwd", "pp_bwd"])]
    # instances run by two or more shown ranks (in symmetric mode, one rank a stage: none)
    comm = comm[comm.groupby(_INSTANCE, sort=False)["rank"].transform("size") >= 2]
    out = []
    for key, g in comm.groupby(_INSTANCE, sort=False):
        start = key[-1]
        ready = {int(r): _ready(ends, int(r), start) for r in g["rank"]}
        known = {r: t for r, t in ready.items() if t is not None}
        if len(known) < 2:
            continue
        pacer = max(known, key=known.get)
        for r, t in known.items():
            if r != pacer:  # idle for the pacer's compute, not for whatever came after it
                wait = known[pacer] - t
                out.append((pacer, "compute", known[pacer], r, key[0], start, wait, "collective"))
    return out


def _stages(stage_of_rank: dict | None, ranks: list[int]) -> dict[int, tuple] | None:
    """Each shown rank's (pipeline stage, place among the shown ranks of its stage): a
    transfer goes to the rank of the same place in the next or previous stage (keys as saved
    runs write them: text or int)."""
    if not stage_of_rank:
        return None
    stage = {r: int(stage_of_rank.get(str(r), stage_of_rank.get(r, -9))) for r in ranks}
    place = {r: sorted(q for q in ranks if stage[q] == stage[r]).index(r) for r in ranks}
    return {r: (stage[r], place[r]) for r in ranks}


def _pipeline_waits(shown: pd.DataFrame, starts: dict, stage: dict | None) -> list[tuple]:
    """Each compute task of a neighbouring stage that starts as a transfer ends, after an
    idle gap of its rank's compute stream."""
    pp = shown[shown["stream"].isin(["pp_fwd", "pp_bwd"]) & (shown["kind"] == "comm")]
    out = []
    stages = len({s for s, _ in stage.values()}) if stage else 0
    for row in pp.itertuples(index=False):
        for r, tasks in starts.items():
            if r == row.rank:
                continue
            if stage and not _neighbours(stage[int(row.rank)], stage[r], stages):
                continue
            k = np.searchsorted(tasks[:, 0], row.end_s - _EPS_S)
            if k >= len(tasks) or abs(tasks[k, 0] - row.end_s) > _EPS_S:
                continue
            idle_from = tasks[k - 1, 1] if k else 0.0
            gap = row.end_s - idle_from
            if gap > 0 and row.microbatch >= 0:
                out.append(
                    (
                        int(row.rank),
                        row.stream,
                        row.end_s,
                        r,
                        "compute",
                        tasks[k, 0],
                        gap,
                        "pipeline",
                    )
                )
    return out


def _neighbours(a: tuple, b: tuple, stages: int) -> bool:
    """Whether (stage, place) ``b`` is next to ``a`` in a pipeline of ``stages``: the same
    place, the stage after or before (the last and the first are next to each other when
    chunks loop round, as interleaved schedules do)."""
    return a[1] == b[1] and (b[0] - a[0]) % stages in (1, stages - 1)


def arrows(waits: pd.DataFrame, most: int = MAX_ARROWS) -> pd.DataFrame:
    """The waits to draw: the longest of each (kind, pacer, waiting rank), in turn, up to
    ``most`` in all, so that a slow GPU's many short waits are not hidden behind a pipeline's
    few long ones."""
    if waits.empty:
        return waits
    rank = waits.groupby(["kind", "src_rank", "dst_rank"], sort=False).cumcount()
    return (
        waits.assign(_k=rank)
        .sort_values(["_k", "wait_s"], ascending=[True, False])
        .head(most)
        .drop(columns="_k")
    )


def pacers(waits: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, pacer, waiting rank): how many waits and their total (s), the largest
    total first: who holds whom back, and by how much."""
    out = waits.groupby(["kind", "src_rank", "dst_rank"], as_index=False)["wait_s"].agg(
        waits="size", total_s="sum"
    )
    return out.sort_values("total_s", ascending=False, kind="stable").reset_index(drop=True)
