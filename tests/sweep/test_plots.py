"""Sweep pictures: list-valued keys, OOM and infeasible cells, the best point."""

from __future__ import annotations

import pandas as pd

from simulator.sweep import plots
from simulator.sweep.tables import best_point, deltas_table


def _frame() -> pd.DataFrame:
    rows = [{"point": -1, "nic": None, "over": None, "status": "ok", "step_time_s": 2.0}]
    i = 0
    for nic in ("100 Gb/s", "400 Gb/s"):
        for over in ([1], [4]):
            status = "ok"
            if nic == "100 Gb/s" and over == [4]:
                status = "oom"
            rows.append(
                {"point": i, "nic": nic, "over": over, "status": status, "step_time_s": 1.0 + i}
            )
            i += 1
    rows.append(
        {"point": i, "nic": "800 Gb/s", "over": [1], "status": "infeasible", "step_time_s": None}
    )
    return pd.DataFrame(rows)


def test_heatmap_and_lines_take_list_values(tmp_path):
    frame = _frame()
    path = plots.heatmap(frame, "step_time_s", "nic", "over", tmp_path / "h.png")
    assert path.stat().st_size > 5_000
    path = plots.line_plot(frame, "step_time_s", "nic", "over", tmp_path / "l.png")
    assert path.stat().st_size > 5_000


def test_best_point_skips_oom_and_the_base():
    frame = _frame()
    assert best_point(frame, "step_time_s") == 0  # 1.0 s; the base (2.0 s) is not a point
    frame.loc[frame["point"] == 0, "status"] = "oom"
    assert best_point(frame, "step_time_s") == 2  # point 1 is OOM too


def test_deltas_are_relative_to_the_base():
    d = deltas_table(_frame(), ["nic", "over"]).set_index("point")
    assert d.loc[0, "d_step_time_s"] == -0.5  # (1 - 2) / 2
    assert d.loc[3, "d_step_time_s"] == 1.0  # (4 - 2) / 2


def test_the_best_point_by_default_does_the_most_work_per_gpu_not_the_least():
    # QA: a global-batch sweep marked batch 8 best (the shortest step) though batch 64 moved
    # 2.6x the tokens per second; the default is model FLOP/s per GPU
    rows = [{"point": -1, "status": "ok", "step_time_s": 1.0, "model_tflops_per_gpu": 100.0}]
    for i, (batch, step) in enumerate([(8, 0.2), (16, 0.3), (64, 0.6)]):
        work = batch * 1e12  # model FLOPs per step, per GPU
        rows.append(
            {
                "point": i,
                "status": "ok",
                "step_time_s": step,
                "model_tflops_per_gpu": work / step / 1e12,
            }
        )
    frame = pd.DataFrame(rows)
    assert best_point(frame, "step_time_s") == 0  # the shortest step, when asked for
    assert best_point(frame) == 2  # 64 / 0.6 = 107 TFLOP/s against 40 and 53
    # without the column (older results), the shortest step
    assert best_point(frame.drop(columns="model_tflops_per_gpu")) == 0


def test_a_line_over_points_that_differ_in_another_key_is_not_joined(tmp_path, monkeypatch):
    # QA: a 2-D sweep's line plot without a group zig-zagged between unrelated points
    joined = []
    original = plots._draw_group

    def spy(ax, sub, metric, scale, label, labelled, joined_=True):
        joined.append(joined_)
        return original(ax, sub, metric, scale, label, labelled, joined_)

    monkeypatch.setattr(plots, "_draw_group", spy)
    frame = _frame()
    plots.line_plot(frame, "step_time_s", "nic", None, tmp_path / "a.png")
    plots.line_plot(frame, "step_time_s", "nic", "over", tmp_path / "b.png")
    assert joined == [False, True, True]  # two points per nic alone; one per nic in a group


def test_json_records_are_strict_json():
    import json

    from simulator.sweep.tables import json_records

    frame = pd.DataFrame(
        [
            {"point": 0.0, "num_gpus": 8.0, "step_time_s": float("inf"), "utilisation": "{}"},
            {"point": 1.0, "num_gpus": None, "step_time_s": float("nan"), "utilisation": None},
        ]
    )
    rows = json_records(frame)
    assert rows[0] == {"point": 0, "num_gpus": 8, "step_time_s": None, "utilisation": {}}
    assert rows[1]["step_time_s"] is None and rows[1]["num_gpus"] is None
    json.dumps(rows, allow_nan=False)  # raises on NaN or inf
