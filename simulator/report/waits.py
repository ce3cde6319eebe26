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


PACED_S = 1e-6  # a collective starting this soon after its pacer's compute ended waited on it


def step_waits(
    frame: pd.DataFrame,
    ranks: list[int],
    stage_of_rank: dict | None = None,
    min_wait_s: float = 0.0,
) -> pd.DataFrame:
    """The waits among ``ranks`` (columns: source rank and stream, the time it released the
    wait, the waiting rank and stream, when it went on, the wait in s, and the kind:
    "collective" or "pipeline"), the longest first, at least ``min_wait_s`` each. A transfer
    releases the rank of the same place in the stage it goes to (``stage_of_rank``, every
    rank's; without it, any other shown rank)."""
    shown = frame[frame["rank"].isin(ranks)]
    busy = _busy(shown)
    rows = collective_waits(shown, busy) + _pipeline_waits(shown, busy, stage_of_rank)
    out = pd.DataFrame(rows, columns=_COLUMNS)
    out = out[out["wait_s"] >= max(min_wait_s, _EPS_S)]
    return out.sort_values("wait_s", ascending=False, kind="stable").reset_index(drop=True)


def _busy(frame: pd.DataFrame) -> dict[int, np.ndarray]:
    """Each rank's compute tasks with work, as (start, end) rows by start (s)."""
    compute = frame[(frame["kind"] == "compute") & (frame["end_s"] > frame["start_s"])]
    return {
        int(r): g.sort_values("start_s")[["start_s", "end_s"]].to_numpy()
        for r, g in compute.groupby("rank", sort=False)
    }


def slow_pacers(frame: pd.DataFrame, share: float = 0.01) -> pd.DataFrame:
    """:func:`pacers` of the collective waits among every rank of ``frame``, those that held
    others back at least ``share`` of the step in all (rounding-level waits of an evenly
    paced step are not a slow GPU)."""
    rows = collective_waits(frame, _busy(frame))
    held = pacers(pd.DataFrame(rows, columns=_COLUMNS))
    return held[held["total_s"] >= share * float(frame["end_s"].max())]


def collective_waits(shown: pd.DataFrame, busy: dict) -> list[tuple]:
    """Each member of a collective run by two or more shown ranks that sat idle until its
    pacer's compute ended (``busy``: each rank's compute (start, end) rows, by start). A
    member still computing when the collective starts did not wait (an overlapped bucket
    reduction); nor did any member of a collective that started well after its pacer's
    compute ended (it waited for something else: its stream, a transfer)."""
    comm = shown[(shown["kind"] == "comm") & ~shown["stream"].isin(["pp_fwd", "pp_bwd"])]
    # instances run by two or more shown ranks (in symmetric mode, one rank a stage: none)
    comm = comm[comm.groupby(_INSTANCE, sort=False)["rank"].transform("size") >= 2]
    if comm.empty:
        return []
    start = comm["start_s"].to_numpy()
    ready = np.full(len(comm), np.nan)  # the end of the member's last compute before it
    idle = np.zeros(len(comm), bool)
    for r, at in comm.groupby("rank", sort=False).indices.items():
        tasks = busy.get(int(r))
        if tasks is None:
            continue
        t = start[at]
        ends = np.sort(tasks[:, 1])
        k = np.searchsorted(ends, t + _EPS_S, side="right")
        ready[at[k > 0]] = ends[k[k > 0] - 1]
        j = np.searchsorted(tasks[:, 0], t - _EPS_S, side="right") - 1  # last to start by t
        running = (j >= 0) & (tasks[np.maximum(j, 0), 1] > t + _EPS_S)
        idle[at] = ~running
    frame = comm.assign(_ready=ready, _idle=idle, _i=np.arange(len(comm)))
    frame = frame[frame["_ready"].notna()]
    group = frame.groupby(_INSTANCE, sort=False)
    latest = group["_ready"].transform("max")
    first = frame.loc[group["_ready"].idxmax(), _INSTANCE + ["rank"]]
    pacer = frame[_INSTANCE].merge(first, on=_INSTANCE, how="left")["rank"].to_numpy()
    waited = (
        frame["_idle"].to_numpy()
        & (frame["rank"].to_numpy() != pacer)
        & (frame["start_s"].to_numpy() - latest.to_numpy() <= PACED_S)
    )
    w = frame[waited]
    return list(
        zip(
            pacer[waited].astype(int).tolist(),
            ["compute"] * len(w),
            latest[waited].tolist(),
            w["rank"].astype(int).tolist(),
            w["stream"].tolist(),
            w["start_s"].tolist(),
            (latest[waited] - w["_ready"]).tolist(),
            ["collective"] * len(w),
            strict=True,
        )
    )


def _pipeline_waits(shown: pd.DataFrame, busy: dict, stage_of_rank: dict | None) -> list[tuple]:
    """Each compute task of the receiving rank that starts as a transfer ends, after an idle
    gap of its compute stream: ``pp_fwd`` goes to the next stage, ``pp_bwd`` to the one
    before (round the ends where chunks loop round, as interleaved schedules do)."""
    pp = shown[shown["stream"].isin(["pp_fwd", "pp_bwd"]) & (shown["kind"] == "comm")]
    target = _receivers(stage_of_rank, list(busy))
    out = []
    for row in pp.itertuples(index=False):
        if row.microbatch < 0:
            continue
        to = target(int(row.rank), row.stream) if target else [r for r in busy if r != row.rank]
        for r in to:
            tasks = busy.get(r)
            if tasks is None:
                continue
            k = np.searchsorted(tasks[:, 0], row.end_s - _EPS_S)
            if k >= len(tasks) or abs(tasks[k, 0] - row.end_s) > _EPS_S:
                continue
            gap = row.end_s - (tasks[k - 1, 1] if k else 0.0)
            if gap > 0:
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


def _receivers(stage_of_rank: dict | None, ranks: list[int]):
    """A function (rank, stream) -> the shown ranks a transfer of it goes to: the same place
    (among its stage's ranks, in rank order) in the next stage for ``pp_fwd``, the previous
    one for ``pp_bwd``, counting the stages of every rank (keys as saved runs write them:
    text or int); None without ``stage_of_rank``."""
    if not stage_of_rank:
        return None
    stage = {int(r): int(s) for r, s in stage_of_rank.items()}
    stages = max(stage.values()) + 1
    members: dict[int, list[int]] = {}
    for r in sorted(stage):
        members.setdefault(stage[r], []).append(r)
    shown = set(ranks)

    def to(rank: int, stream: str) -> list[int]:
        if rank not in stage:
            return []
        s = stage[rank]
        place = members[s].index(rank)
        nxt = members.get((s + (1 if stream == "pp_fwd" else -1)) % stages, [])
        return [nxt[place]] if place < len(nxt) and nxt[place] in shown else []

    return to


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
