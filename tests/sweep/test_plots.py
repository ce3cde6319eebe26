"""Sweep pictures: list-valued keys, OOM and infeasible cells, the best point."""

from __future__ import annotations

import pandas as pd
import pytest

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


def _three_keys(n_third: int = 2) -> pd.DataFrame:
    """A 2 x 2 x n_third sweep over NIC, oversubscription and rails, step time rising with
    each key so that every point differs."""
    rows = [{"point": -1, "nic": 50e9, "oversubscription": [1.0], "rails": True, "status": "ok",
             "step_time_s": 9.0}]  # fmt: skip
    i = 0
    for nic, nic_text in ((25e9, "200 Gb/s"), (50e9, "400 Gb/s")):
        for over in ([1.0, 1.0], [4.0, 7.0]):
            for third in range(n_third):
                rows.append(
                    {"point": i, "nic": nic, "nic_text": nic_text, "oversubscription": over,
                     "rails": third, "status": "ok", "step_time_s": 1.0 + i}
                )  # fmt: skip
                i += 1
    return pd.DataFrame(rows)


def test_a_heatmap_draws_a_panel_per_value_of_a_third_key(tmp_path, monkeypatch):
    # QA: the heatmap kept whichever row came last per cell and hid the third swept key
    seen = []
    original = plots._panels

    def spy(pts, facet_keys):
        out = original(pts, facet_keys)
        seen.append((facet_keys, [title for title, _ in out], [len(rows) for _, rows in out]))
        return out

    monkeypatch.setattr(plots, "_panels", spy)
    frame = _three_keys()
    plots.draw(
        frame,
        {"kind": "heatmap", "x": "nic", "y": "oversubscription"},
        tmp_path,
        keys=["nic", "oversubscription", "rails"],
    )
    [(keys, titles, sizes)] = seen
    assert keys == ["rails"]
    assert titles == ["rails = 0", "rails = 1"]
    assert sizes == [4, 4]  # each panel holds its own 2 x 2 cells, none overwritten


def test_a_line_plot_without_group_has_a_line_per_other_key_combination(tmp_path, monkeypatch):
    labels = []
    original = plots._draw_group

    def spy(ax, sub, metric, scale, label, labelled, joined=True):
        labels.append((label, joined, len(sub)))
        return original(ax, sub, metric, scale, label, labelled, joined)

    monkeypatch.setattr(plots, "_draw_group", spy)
    plots.line_plot(
        _three_keys(),
        "step_time_s",
        "nic",
        None,
        tmp_path / "l.png",
        keys=["nic", "oversubscription", "rails"],
    )
    assert [lab for lab, _, _ in labels] == [
        "oversubscription = 1:1 leaf / 1:1 spine, rails = 0",
        "oversubscription = 1:1 leaf / 1:1 spine, rails = 1",
        "oversubscription = 4:1 leaf / 7:1 spine, rails = 0",
        "oversubscription = 4:1 leaf / 7:1 spine, rails = 1",
    ]
    assert all(joined and n == 2 for _, joined, n in labels)  # one point per NIC per line


def test_too_many_panels_is_refused_with_the_keys_named(tmp_path):
    frame = _three_keys(n_third=17)
    with pytest.raises(plots.PlotError, match="17 panels .* rails"):
        plots.draw(
            frame, {"kind": "heatmap", "x": "nic", "y": "oversubscription"}, tmp_path,
            keys=["nic", "oversubscription", "rails"],
        )  # fmt: skip


def test_labels_keep_units_and_order_by_value():
    frame = _three_keys()
    pts = frame[frame["point"] >= 0]
    _, order = plots.labelled(pts, "nic")
    assert order == ["200 Gb/s", "400 Gb/s"]
    _, order = plots.labelled(pts, "oversubscription")
    assert order == ["1:1 leaf / 1:1 spine", "4:1 leaf / 7:1 spine"]


def test_default_plots_show_every_key():
    wanted = plots.default_plots(["a", "b", "c"])
    assert [(p["kind"], p["x"], p.get("group") or p.get("y")) for p in wanted] == [
        ("line", "a", "b"),
        ("line", "b", "c"),
        ("line", "c", "a"),
        ("heatmap", "a", "b"),
    ]


def test_without_keys_the_frame_says_which_are_swept(tmp_path, monkeypatch):
    """An API user who calls draw() without keys still sees every swept key: the results
    frame names them by its KEY_text columns."""
    frame = _three_keys()
    frame["oversubscription_text"] = frame["oversubscription"].map(str)
    frame["rails_text"] = frame["rails"].map(str)
    assert plots.swept_keys(frame) == ["nic", "oversubscription", "rails"]
    seen = []
    original = plots._panels
    monkeypatch.setattr(
        plots, "_panels", lambda pts, keys: seen.append(keys) or original(pts, keys)
    )
    plots.draw(frame, {"kind": "heatmap", "x": "nic", "y": "oversubscription"}, tmp_path)
    assert seen == [["rails"]]
