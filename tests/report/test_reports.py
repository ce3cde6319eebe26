"""Run reports: Gantt charts, Perfetto JSON, per-rank traces that Holistic Trace Analysis reads
and agrees with, comparison of runs."""

import json
import re

import pytest
from typer.testing import CliRunner

from simulator import api, metrics
from simulator.cli import app
from simulator.report.gantt import default_ranks
from simulator.report.perfetto import chrome_trace

runner = CliRunner()


@pytest.fixture(scope="module")
def report(tmp_path_factory, root):
    out = tmp_path_factory.mktemp("run")
    result = runner.invoke(
        app, ["run", str(root / "scenarios/examples/pipeline-1f1b.yaml"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_run_writes_every_report_file(report):
    for name in (
        "summary.json",
        "summary.md",
        "memory.csv",
        "memory.png",
        "trace.json",
        "gantt.png",
        "gantt.svg",
        "links.parquet",
        "links.png",
    ):
        assert (report / name).stat().st_size > 100, name
    assert (report / "trace.parquet").exists() or (report / "trace.csv").exists()
    assert sorted(p.name for p in (report / "hta").iterdir()) == [
        "rank-0.json",
        "rank-2.json",
        "rank-4.json",
        "rank-6.json",
    ]
    md = (report / "summary.md").read_text()
    assert "![Gantt chart](gantt.png)" in md and "MFU" in md


def test_perfetto_threads_never_overlap_and_have_names(report):
    trace = json.loads((report / "trace.json").read_text())
    events = trace["traceEvents"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {n for n in names.values()} >= {"compute", "tp", "pp_fwd", "pp_bwd"}
    spans: dict = {}
    for e in events:
        if e["ph"] == "X":
            spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for key, s in spans.items():
        s.sort()
        for (_, end), (start, _) in zip(s, s[1:], strict=False):
            assert start >= end - 1e-6, key  # microseconds; float rounding only
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert flows and len([e for e in flows if e["ph"] == "s"]) == len(
        [e for e in flows if e["ph"] == "f"]
    )
    cross = {e["id"] for e in flows if e["ph"] == "s"} & {e["id"] for e in flows if e["ph"] == "f"}
    assert cross  # pipeline sends point at another rank's compute


def test_a_run_written_over_another_leaves_no_rank_trace_of_it(tmp_path):
    # QA: a 2-rank run written into a 4-rank run's folder kept rank-4 and rank-6, and HTA
    # would read the two runs as one job
    import pandas as pd

    from simulator.report.perfetto import write_rank_traces
    from simulator.trace import COLUMNS

    def frame(ranks):
        row = ("compute", "compute", "forward", "attention", 0, 0, 0.0, 1.0, 1, 0)
        return pd.DataFrame([(r, *row) for r in ranks], columns=COLUMNS)

    write_rank_traces(frame([0, 2, 4, 6]), tmp_path, 8)
    (tmp_path / "rank-notes.json").write_text("{}")  # not a rank trace: kept
    write_rank_traces(frame([0, 2]), tmp_path, 4)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["rank-0.json", "rank-2.json", "rank-notes.json"]


def test_rank_files_match_hta_expectations(report):
    text = (report / "hta" / "rank-2.json").read_text()
    assert re.search(r'"rank":\s+(\d+)', text).group(1) == "2"
    data = json.loads(text)
    kinds = {e["cat"] for e in data["traceEvents"]}
    assert kinds == {"kernel", "cuda_runtime"}  # GPU kernels, and the CPU's launches
    kernels = [e for e in data["traceEvents"] if e["cat"] == "kernel"]
    assert any(e["name"].startswith("ncclDevKernel") for e in kernels)
    assert all("stream" in e["args"] for e in kernels)
    launches = [e for e in data["traceEvents"] if e["cat"] == "cuda_runtime"]
    assert launches and all(e["name"] == "cudaLaunchKernel" for e in launches)


def test_hta_agrees_with_our_metrics(report):
    hta = pytest.importorskip("hta.trace_analysis")
    from simulator.report.run_report import load_run

    _, trace, _ = load_run(report)
    analysis = hta.TraceAnalysis(trace_dir=str(report / "hta"))
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    gpu = trace[trace["kind"] != "host"]  # HTA's breakdown is of the GPU's kernels
    spans = {r: (f["start_s"].min(), f["end_s"].max()) for r, f in gpu.groupby("rank")}
    ours = metrics.rank_breakdown(trace, spans).set_index("rank")
    for rank, row in ours.iterrows():
        # HTA works in whole microseconds (it rounds each event down): 1 us per event.
        n_events = int((gpu["rank"] == rank).sum())
        assert breakdown.loc[rank, "idle_time(us)"] == pytest.approx(
            row["idle_s"] * 1e6, abs=n_events
        )
        ratio = overlap.loc[rank].iloc[0]
        ratio = ratio / 100 if ratio > 1 else ratio
        assert ratio == pytest.approx(row["overlap_s"] / row["comm_s"], abs=0.01)


def test_gantt_redraw_and_compare(report, tmp_path, root):
    out = tmp_path / "again.png"
    result = runner.invoke(app, ["gantt", str(report), "--ranks", "0,6", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
    other = tmp_path / "interleaved"
    runner.invoke(
        app,
        ["run", str(root / "scenarios/examples/pipeline-interleaved.yaml"), "--out", str(other)],
    )
    png = tmp_path / "cmp.png"
    result = runner.invoke(
        app, ["compare", str(report), str(other), "--out", str(png), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = {r["run"]: r for r in json.loads(result.stdout)}
    assert rows["interleaved"]["bubble_fraction"] < rows[report.name]["bubble_fraction"]
    assert png.stat().st_size > 20_000
    # the table in the terminal's units (QA: it printed raw floats and bytes)
    result = runner.invoke(app, ["compare", str(report), str(other), "--out", str(png)])
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("interleaved"))
    step, tokens, mfu = line.split()[1:4]
    assert float(step) == pytest.approx(rows["interleaved"]["step_time_s"], rel=1e-3)
    assert tokens == f"{rows['interleaved']['tokens_per_s']:,.0f}"
    assert mfu == f"{rows['interleaved']['mfu']:.1%}"
    assert "peak_memory_GB" in result.stdout


def test_default_gantt_shows_one_rank_per_stage():
    s = api.load("scenarios/examples/pipeline-1f1b.yaml", ["simulation.mode=full"])
    result = api.run(s)
    ranks = default_ranks(result.trace, result.summary["stage_of_rank"])
    assert ranks == [0, 2, 4, 6]  # the tp = 0 rank of each of the 4 stages
    assert len(chrome_trace(result.trace)["traceEvents"]) > len(result.trace)
