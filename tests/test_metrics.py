"""Metrics on hand-built traces, where every number can be worked out on paper."""

import pandas as pd
import pytest

from simulator.metrics import StepFacts, rank_breakdown, step_metrics, step_time, union_length

COLS = ["rank", "stream", "kind", "phase", "name", "start_s", "end_s", "flops"]


def _frame(rows):
    return pd.DataFrame(rows, columns=COLS)


def _facts(**kw):
    base = dict(
        scenario="hand",
        num_gpus=2,
        tokens_per_step=1000.0,
        model_flops_per_step=4e12,
        peak_flops_per_s=1e12,
        hbm_bytes=10.0,
        overlapping_steps=False,
        static_memory={0: 1.0, 1: 1.0},
        stage_of={0: 0, 1: 1},
    )
    return StepFacts(**{**base, **kw})


TRACE = _frame(
    [
        # rank 0: compute 0-2, comm 1-3 (1 s hidden, 1 s exposed), idle 3-4
        (0, "compute", "compute", "forward", "a", 0.0, 2.0, 2e12),
        (0, "dp", "comm", "grad_sync", "ar", 1.0, 3.0, 0.0),
        # rank 1: idle 0-1, compute 1-4
        (1, "compute", "compute", "forward", "b", 1.0, 4.0, 3e12),
    ]
)


def test_union_and_breakdown():
    assert union_length(TRACE[["start_s", "end_s"]].to_numpy()) == 4.0
    parts = rank_breakdown(TRACE).set_index("rank")
    assert parts.loc[0, "compute_s"] == 2.0 and parts.loc[0, "overlap_s"] == 1.0
    assert parts.loc[0, "exposed_comm_s"] == 1.0
    assert parts.loc[0, "idle_s"] == 0.0  # rank 0's window ends with its own last task (3 s)
    assert parts.loc[1, "idle_s"] == 1.0


def test_step_metrics_by_hand():
    m = step_metrics(TRACE, [(0, 0.5, 4.0), (0, 2.0, -4.0), (1, 1.0, 20.0)], _facts())
    assert m.step_time_s == 4.0
    assert m.mfu == pytest.approx(4e12 / (4.0 * 2 * 1e12))  # 0.5
    assert m.hfu == pytest.approx((2e12 / 4 + 3e12 / 4) / 2 / 1e12)
    assert m.tokens_per_s == 250.0
    assert m.exposed_comm_fraction == pytest.approx((1 / 4 + 0) / 2)
    assert m.overlap_fraction == pytest.approx(0.5)
    assert m.bubble_fraction == pytest.approx((0 + 1 / 4) / 2)
    assert m.peak_memory_by_rank == {"0": 5.0, "1": 21.0}
    assert m.oom  # rank 1 holds 21 B of 10
    assert m.utilisation["compute"] == pytest.approx((2 + 3) / (2 * 4))
    assert set(m.as_dict()) >= {"step_time_s", "mfu", "oom", "stage_of_rank"}
    assert "busiest_links" not in m.as_dict()


def test_overlapping_steps_take_the_longest_span():
    t, spans = step_time(TRACE, overlapping_steps=True)
    assert t == 3.0  # rank 0 spans 0-3, rank 1 spans 1-4
    assert spans == {0: (0.0, 3.0), 1: (1.0, 4.0)}
    m = step_metrics(TRACE, [], _facts(overlapping_steps=True))
    assert m.step_time_s == 3.0 and m.bubble_fraction == 0.0


def test_the_step_is_accounted_for_in_full():
    # compute + exposed communication + bubble + waiting at the end = the step.
    m = step_metrics(TRACE, [], _facts())
    total = m.compute_fraction + m.exposed_comm_fraction + m.bubble_fraction
    assert total + m.sync_wait_fraction == pytest.approx(1.0)
    assert m.sync_wait_fraction == pytest.approx((1 / 4 + 0) / 2)  # rank 0 idles 3-4 s


def test_a_real_pipeline_step_sums_to_one():
    from simulator import api
    from simulator.scenario import load_scenario

    m = api.run(load_scenario("scenarios/examples/pipeline-1f1b.yaml")).metrics
    parts = m.compute_fraction + m.exposed_comm_fraction + m.bubble_fraction
    assert parts + m.sync_wait_fraction == pytest.approx(1.0, rel=1e-9)
    assert m.sync_wait_fraction > 0  # the last stage ends before the first one's optimizer


def _union_by_sweep(iv):
    """The plain merge the vectorised union_length replaced, as the reference."""
    iv = sorted(map(tuple, iv))
    total, (cur_s, cur_e) = 0.0, iv[0]
    for s, e in iv[1:]:
        if s > cur_e:
            total, cur_s, cur_e = total + cur_e - cur_s, s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


def test_union_length_equals_the_sweep():
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pair = st.tuples(st.floats(0, 100), st.floats(0, 10)).map(lambda p: (p[0], p[0] + p[1]))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(pair, min_size=1, max_size=40))
    def check(rows):
        iv = np.array(rows, dtype=float)
        assert union_length(iv) == pytest.approx(_union_by_sweep(iv), rel=1e-12, abs=1e-12)

    check()


def test_breakdown_and_stream_busy_time_equal_the_sweep_per_group():
    # rank_breakdown sorts each rank's rows once and splits them by kind; stream_utilisation
    # takes each stream's rows as sorted when they are (a stream runs one task at a time)
    # and sorts them when not. Both against the plain merge per group, on random traces:
    # ranks not from 0, streams back to back, overlapping or out of order, zero-length rows.
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from simulator.metrics import stream_utilisation

    row = st.tuples(
        st.sampled_from([3, 5, 40_000]),  # rank (a 16-bit key range and one beyond)
        st.sampled_from(["compute", "tp", "dp"]),  # stream ("compute" is the compute kind)
        st.floats(0, 50),  # start
        st.sampled_from([0.0, 0.5, 1.0, 2.5]),  # duration
    )

    @settings(max_examples=200, deadline=None)
    @given(st.lists(row, min_size=1, max_size=30))
    def check(rows):
        frame = _frame(
            [
                (r, s, "compute" if s == "compute" else "comm", "p", "n", t, t + d, 1.0)
                for r, s, t, d in rows
            ]
        )
        end = float(frame["end_s"].max())
        parts = rank_breakdown(frame, None, step_end=end).set_index("rank")
        busy = {}
        for rank, f in frame.groupby("rank"):
            live = f[f["end_s"] > f["start_s"]]
            c = live[live["kind"] == "compute"][["start_s", "end_s"]].to_numpy()
            m = live[live["kind"] == "comm"][["start_s", "end_s"]].to_numpy()
            t_c = _union_by_sweep(c) if len(c) else 0.0
            t_m = _union_by_sweep(m) if len(m) else 0.0
            both = t_c + t_m - _union_by_sweep(np.vstack([c, m])) if len(c) and len(m) else 0.0
            got = parts.loc[rank]
            assert got["compute_s"] == pytest.approx(t_c, rel=1e-12, abs=1e-12)
            assert got["comm_s"] == pytest.approx(t_m, rel=1e-12, abs=1e-12)
            assert got["overlap_s"] == pytest.approx(both, rel=1e-12, abs=1e-12)
            for stream, g in f.groupby("stream"):
                iv = g[["start_s", "end_s"]].to_numpy()
                busy.setdefault(stream, []).append(_union_by_sweep(iv))
        n = frame["rank"].nunique()
        want = {s: sum(v) / (n * end) for s, v in busy.items()} if end > 0 else {}
        got = stream_utilisation(frame, end)
        assert got.keys() == want.keys() or end == 0
        for s in want:
            assert got[s] == pytest.approx(want[s], rel=1e-12, abs=1e-12)

    check()
