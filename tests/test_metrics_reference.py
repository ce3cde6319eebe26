"""The per-rank and per-stream analyses read the trace as arrays (fast); on real traces they
must give what the plain pandas ``groupby`` over sub-frames gives (the reference below, the
implementation they replaced): the same rows, in the same order, with the same numbers to the
last bit (the same intervals are summed in the same order)."""

import pandas as pd
import pytest

from simulator import api
from simulator.metrics import (
    intersection_length,
    rank_breakdown,
    stream_utilisation,
    union_length,
)


def _reference_breakdown(frame, span=None, step_end=None):
    rows = []
    for rank, f in frame.groupby("rank"):
        start, end = span[rank] if span else (0.0, f["end_s"].max())
        comp = f[(f["kind"] == "compute") & (f["end_s"] > f["start_s"])]
        comm = f[(f["kind"] == "comm") & (f["end_s"] > f["start_s"])]
        c = comp[["start_s", "end_s"]].to_numpy()
        m = comm[["start_s", "end_s"]].to_numpy()
        t_comp, t_comm = union_length(c), union_length(m)
        both = intersection_length(c, m)
        window = end - start
        rows.append(
            {
                "rank": rank,
                "window_s": window,
                "compute_s": t_comp,
                "comm_s": t_comm,
                "overlap_s": both,
                "exposed_comm_s": t_comm - both,
                "idle_s": max(window - (t_comp + t_comm - both), 0.0),
                "sync_wait_s": max((step_end or end) - end, 0.0) if not span else 0.0,
                "flops": f["flops"].sum(),
            }
        )
    return pd.DataFrame(rows)


def _reference_streams(frame, step_time):
    out = {}
    n = frame["rank"].nunique()
    for stream, f in frame.groupby("stream"):
        busy = sum(union_length(g[["start_s", "end_s"]].to_numpy()) for _, g in f.groupby("rank"))
        out[stream] = busy / (n * step_time) if step_time > 0 else 0.0
    return out


@pytest.mark.parametrize(
    "scenario",
    [
        "scenarios/examples/pipeline-interleaved.yaml",  # 4 stages, TP and PP streams
        "scenarios/examples/mixtral-8x22b.yaml",  # experts: EP all-to-alls beside compute
        "scenarios/examples/llama3-8b-fsdp.yaml",  # FSDP gathers overlapping compute
    ],
)
def test_array_analyses_equal_the_groupby_reference(scenario):
    frame = api.run(api.load(scenario)).trace
    # ranks out of order in the trace, as a merged or expanded trace may have them
    shuffled = frame.sample(frac=1.0, random_state=7)
    step_end = float(frame["end_s"].max())
    for f in (frame, shuffled):
        ours = rank_breakdown(f, step_end=step_end)
        ref = _reference_breakdown(f, step_end=step_end)
        pd.testing.assert_frame_equal(ours, ref, check_exact=True, check_dtype=False)
        assert stream_utilisation(f, step_end) == _reference_streams(f, step_end)
    span = {r: (0.001, float(g["end_s"].max())) for r, g in frame.groupby("rank")}
    pd.testing.assert_frame_equal(
        rank_breakdown(frame, span=span), _reference_breakdown(frame, span=span),
        check_exact=True, check_dtype=False,
    )  # fmt: skip
