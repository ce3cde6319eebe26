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
