"""The run report's writing: the pictures drawn in a forked child give the same files as
drawn here, the link-load binning equals its direct sum, and progress goes to a terminal
only."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.cli_progress import Stages
from simulator.report import run_report
from simulator.report.gantt import merged_spans
from simulator.report.plots import binned


def _binned_directly(f: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Each record's overlap with each bin, summed: the definition binned() vectorises."""
    out = np.zeros(len(edges) - 1)
    for s, e, u in f[["start_s", "end_s", "utilisation"]].itertuples(index=False):
        for b in range(len(out)):
            out[b] += u * max(0.0, min(e, edges[b + 1]) - max(s, edges[b]))
    return out / np.diff(edges)


records = st.lists(
    st.tuples(st.floats(0, 10, allow_nan=False), st.floats(0, 5, allow_nan=False), st.floats(0, 1)),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(records, st.integers(1, 12))
def test_binned_equals_the_direct_sum(recs, bins):
    f = pd.DataFrame(
        [(s, s + d, u) for s, d, u in recs], columns=["start_s", "end_s", "utilisation"]
    )
    edges = np.linspace(0.0, 16.0, bins + 1)
    # float sums in another order: equal to 1e-9 of the largest possible bin mean (1)
    np.testing.assert_allclose(binned(f, edges), _binned_directly(f, edges), atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 3)), max_size=40), st.floats(0.01, 2))
def test_merged_bars_cover_the_same_time_as_the_widened_bars(bars, min_width):
    start = np.array([s for s, _ in bars])
    end = start + np.array([d for _, d in bars])
    starts, widths = merged_spans(start, end, min_width)
    # every widened bar lies inside one merged bar, and merged bars do not touch
    for s, e in zip(start, np.maximum(end, start + min_width), strict=True):
        assert any(a - 1e-9 <= s and e <= a + w + 1e-9 for a, w in zip(starts, widths, strict=True))
    assert all(starts[1:] > starts[:-1] + widths[:-1])


def test_forked_and_serial_reports_write_the_same_files(root, tmp_path, monkeypatch):
    scenario = api.load_scenario(root / "scenarios/examples/pipeline-1f1b.yaml")
    result = api.run(scenario, track_links=True)
    forked = api.write_run(result, tmp_path / "forked")
    monkeypatch.setattr("multiprocessing.get_all_start_methods", lambda: ["spawn"])
    serial = api.write_run(result, tmp_path / "serial")
    assert [p.name for p in forked] == [p.name for p in serial]
    assert {p.name for p in forked} >= {"gantt.png", "gantt.svg", "memory.png", "links.png"}
    for a, b in zip(forked, serial, strict=True):
        if a.suffix in (".json", ".csv", ".md"):
            assert a.read_bytes() == b.read_bytes(), a.name  # deterministic


def test_the_gantt_title_carries_step_time_and_mfu(root, tmp_path, monkeypatch):
    titles = []
    monkeypatch.setattr(
        run_report, "draw_gantt", lambda trace, paths, shown, stages, title: titles.append(title)
        or [paths[0]],
    )  # fmt: skip
    monkeypatch.setattr("multiprocessing.get_all_start_methods", lambda: ["spawn"])
    result = api.run(api.load_scenario(root / "scenarios/examples/pipeline-1f1b.yaml"))
    api.write_run(result, tmp_path)
    s = result.summary
    assert titles == [
        f"pipeline-1f1b: step {s['step_time_s']:.4g} s, MFU {s['mfu']:.1%}, "
        f"bubble {s['bubble_fraction']:.1%}"
    ]


def test_progress_is_silent_off_a_terminal_and_counts_stages_on_one():
    quiet = io.StringIO()
    with Stages(2, stream=quiet).stage("building"):
        pass
    assert quiet.getvalue() == ""  # a StringIO is not a terminal
    loud = io.StringIO()
    stages = Stages(2, enabled=True, stream=loud)
    with stages.stage("building"):
        pass
    with stages.stage("writing") as stage:
        stage.item("trace.json")
    text = loud.getvalue()
    assert "[1/2] building" in text and "[2/2] writing, 1 files:" in text
    assert text.endswith(" s\x1b[K\n")
