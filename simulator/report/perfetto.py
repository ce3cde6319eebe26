"""Chrome / Perfetto JSON of a step, and per-rank traces shaped like PyTorch profiler output.

Chrome JSON: a process per rank, a thread per stream (named and ordered), complete ("X")
events in microseconds, and flow arrows ("s"/"f") from each pipeline send to the stage that
receives it and from each communication to the compute that follows it on the same rank;
each rank's power draw as a counter track where the run has a power timeline.
A stream runs one task at a time, so complete events on one thread never overlap (the
viewer's nesting would break otherwise).

Per-rank files follow what Holistic Trace Analysis reads: ``distributedInfo.rank``, events
with ``cat: "kernel"``, communication kernels named ``ncclDevKernel_...`` (HTA matches
``^nccl.*Kernel``), ``args.stream``; the host stream's launches as ``cuda_runtime`` events
on a CPU thread; written with the default JSON separators because HTA finds the rank with
the pattern ``"rank":\\s+(\\d+)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.report.style import stream_rank

US = 1e6  # trace timestamps are microseconds


def _stage(stage_of_rank: dict | None, rank: int):
    if not stage_of_rank:
        return None
    return stage_of_rank.get(str(rank), stage_of_rank.get(rank))


def chrome_trace(
    frame: pd.DataFrame, stage_of_rank: dict | None = None, power: pd.DataFrame | None = None
) -> dict:
    """The Chrome/Perfetto JSON of a trace DataFrame; ``power``: the ranks' draw (counters)."""
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}
    for rank in sorted(frame["rank"].unique()):
        rank = int(rank)
        stage = _stage(stage_of_rank, rank)
        label = f"rank {rank}" + (f" (stage {stage})" if stage is not None else "")
        events.append(
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}}
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": rank,
                "tid": 0,
                "args": {"sort_index": rank},
            }
        )
        streams = sorted(frame.loc[frame["rank"] == rank, "stream"].unique(), key=stream_rank)
        for i, stream in enumerate(streams):
            tids[(rank, stream)] = i
            events.append(
                {"ph": "M", "name": "thread_name", "pid": rank, "tid": i, "args": {"name": stream}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": rank,
                    "tid": i,
                    "args": {"sort_index": i},
                }
            )
    ordered = frame.sort_values(["rank", "start_s", "end_s"], kind="stable")
    for row in ordered.itertuples(index=False):
        events.append(
            {
                "ph": "X",
                "name": row.name,
                "cat": row.kind,
                "pid": int(row.rank),
                "tid": tids[(int(row.rank), row.stream)],
                "ts": row.start_s * US,
                "dur": (row.end_s - row.start_s) * US,
                "args": {
                    "phase": row.phase,
                    "layer": int(row.layer),
                    "microbatch": int(row.microbatch),
                    "flops": row.flops,
                    "bytes": row.bytes,
                },
            }
        )
    events += _flows(ordered, tids, stage_of_rank)
    events += _power_counters(power)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _power_counters(power: pd.DataFrame | None) -> list[dict]:
    """Each rank's draw (W) as a counter track: a value at each change."""
    if power is None:
        return []
    return [
        {
            "ph": "C",
            "name": "power (W)",
            "pid": int(row.rank),
            "ts": row.start_s * US,
            "args": {"W": round(float(row.watts), 1)},
        }
        for row in power.itertuples(index=False)
    ]


def _arrow(fid: int, tids, source: tuple, target: tuple) -> list[dict]:
    """A flow event pair (Chrome trace format): from ``source`` = (rank, stream, time s) to
    the compute row of ``target`` = (rank, time s)."""
    src_rank, src_stream, t_src = source
    dst_rank, t_dst = target
    common = {"id": fid, "name": "dependency", "cat": "flow"}
    start = {"ph": "s", **common, "pid": src_rank, "tid": tids[(src_rank, src_stream)]}
    end = {"ph": "f", "bp": "e", **common, "pid": dst_rank, "tid": tids[(dst_rank, "compute")]}
    return [{**start, "ts": t_src * US}, {**end, "ts": t_dst * US}]


def _flows(frame: pd.DataFrame, tids, stage_of_rank) -> list[dict]:
    """Arrows: pipeline send -> the neighbour's first compute of that micro-batch after it;
    a communication -> the compute on its rank that starts when it ends."""
    out: list[dict] = []
    compute = frame[frame["kind"] == "compute"]
    starts = {
        key: np.sort(g["start_s"].to_numpy()) for key, g in compute.groupby(["rank", "microbatch"])
    }
    begins = set(
        zip(
            compute["rank"].astype(int),
            np.round(compute["start_s"] * 1e12).astype(np.int64),
            strict=True,
        )
    )
    rank_of_stage: dict[int, int] = {}
    for r, st in (stage_of_rank or {}).items():
        rank_of_stage.setdefault(int(st), int(r))
    n_stages = len(rank_of_stage)

    def arrow(src_rank, src_stream, t_src, dst_rank, t_dst):
        source, target = (src_rank, src_stream, t_src), (dst_rank, t_dst)
        out.extend(_arrow(len(out) // 2 + 1, tids, source, target))

    comm = frame[(frame["kind"] == "comm") & (frame["end_s"] > frame["start_s"])]
    for row in comm.itertuples(index=False):
        rank = int(row.rank)
        if row.stream in ("pp_fwd", "pp_bwd") and n_stages > 1:
            step = 1 if row.stream == "pp_fwd" else -1
            target = rank_of_stage.get((int(_stage(stage_of_rank, rank)) + step) % n_stages)
            later = starts.get((target, row.microbatch))
            if later is None:
                continue
            k = np.searchsorted(later, row.end_s - 1e-12)
            if k < len(later):
                arrow(rank, row.stream, row.end_s, target, later[k])
        elif (rank, round(row.end_s * 1e12)) in begins:
            arrow(rank, row.stream, row.end_s, rank, row.end_s)
    return out


def write_chrome_trace(
    frame: pd.DataFrame,
    path: str | Path,
    stage_of_rank: dict | None = None,
    power: pd.DataFrame | None = None,
) -> Path:
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(frame, stage_of_rank, power)))
    return path


def write_rank_traces(frame: pd.DataFrame, folder: str | Path, world_size: int) -> list[Path]:
    """One ``rank-N.json`` per simulated rank, in the shape PyTorch's profiler writes. The
    folder's other ``rank-N.json`` files (an earlier run's) are removed: HTA reads every trace
    in the folder as one job."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ranks = {int(r) for r in frame["rank"].unique()}
    for old in folder.glob("rank-*.json"):
        if old.stem[5:].isdigit() and int(old.stem[5:]) not in ranks:
            old.unlink()
    paths = []
    for rank, f in frame.groupby("rank"):
        streams = sorted(f["stream"].unique(), key=stream_rank)
        stream_id = {s: 7 + i for i, s in enumerate(streams)}  # CUDA stream ids, 7 = default
        events = []
        for row in f.sort_values("start_s").itertuples(index=False):
            if row.kind == "host":  # the CPU's launch: a runtime call on the host thread
                events.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernel",
                        "pid": 0,
                        "tid": 1,
                        "ts": row.start_s * US,
                        "dur": (row.end_s - row.start_s) * US,
                        "args": {"correlation": len(events), "op": row.name},
                    }
                )
                continue
            # HTA counts a kernel as communication when its name matches ^nccl.*Kernel
            name = row.name if row.kind == "compute" else f"ncclDevKernel_{row.name}"
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream_id[row.stream],
                    "ts": row.start_s * US,
                    "dur": (row.end_s - row.start_s) * US,
                    "args": {
                        "stream": stream_id[row.stream],
                        "device": 0,
                        "correlation": len(events),
                        "phase": row.phase,
                    },
                }
            )
        trace = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": int(rank), "world_size": world_size},
            "deviceProperties": [{"id": 0, "name": "simulated"}],
            "traceEvents": events,
        }
        path = folder / f"rank-{int(rank)}.json"
        path.write_text(json.dumps(trace))  # default separators: '"rank": 0' (HTA's regex)
        paths.append(path)
    return paths
