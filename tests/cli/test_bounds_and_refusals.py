"""Bad or extreme goodput, sweep and collective inputs: exit 2 naming the flag or field and
the bound, never a traceback, a hang or a silent acceptance (the G-series reproducers)."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from simulator import limits
from simulator.cli import app
from simulator.scenario import ScenarioError, load_scenario_text

runner = CliRunner()
BASE = """\
name: small
model: {name: llama3-8b, layers: 4}
cluster:
  accelerator: H100-SXM
  gpus: 16
  topology: {kind: fat_tree, nodes: 2, node: {gpus: 8}}
parallelism: {tp: 2, pp: 2, zero: 1}
training: {global_batch: 32, micro_batch: 1, seq_len: 2048}
"""
FAILURES = (
    BASE
    + """\
failures:
  causes:
    crash: {rate: "1 / 1000 / d", per: gpu}
  checkpoint: {interval: 30 min}
"""
)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _refused(args, *needles):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.stderr, result.stderr
    return result.stderr


@pytest.fixture
def job(tmp_path):
    return _write(tmp_path, "job.yaml", FAILURES)


def test_goodput_counts_are_bounded_before_any_work(job):
    _refused(["goodput", job, "--days", "inf"], "--days inf", "finite")
    _refused(["goodput", job, "--days", "1e5"], "--days 100000", "3,650", "--raise-limits")
    _refused(["goodput", job, "--seeds", "100000000"], "--seeds 100000000", "10,000")
    _refused(
        ["goodput", job, "--sweep-checkpoint-interval", "1min:2h:100000000"],
        "--sweep-checkpoint-interval", "1,000",
    )  # fmt: skip


def test_a_rate_that_would_flood_a_seed_is_refused(tmp_path):
    path = _write(tmp_path, "flood.yaml", FAILURES.replace("1 / 1000 / d", "1e300 / s"))
    _refused(["goodput", path, "--seeds", "1"], "events_per_seed", "1,000,000")


def test_raise_limits_lifts_every_bound(monkeypatch):
    monkeypatch.setattr(limits, "_factor", None)
    assert limits.beyond("seeds", 20_000, "--seeds 20000")
    limits.raise_limits(10)
    try:
        assert limits.beyond("seeds", 20_000, "--seeds 20000") is None
    finally:
        monkeypatch.setattr(limits, "_factor", None)
    with pytest.raises(ValueError, match="factor of 1 or more"):
        limits.raise_limits(0.5)


@pytest.mark.parametrize(
    "failures, field, message",
    [
        (
            'causes: {crash: {rate: "1 / d", law: weibull, shape: 0.01}}',
            "failures.causes.crash.shape",
            "greater than or equal to 0.2",
        ),
        (
            'causes: {crash: {rate: "1 / d"}}\n  repair: {law: lognormal, mean: 0}',
            "failures.repair",
            "needs a mean above 0",
        ),
        ("node_rate: 0.5", "failures.node_rate", "needs its time unit"),
    ],
)
def test_failure_laws_that_cannot_be_simulated_are_refused(failures, field, message):
    with pytest.raises(ScenarioError) as err:
        load_scenario_text(BASE + "failures:\n  " + failures + "\n")
    [problem] = err.value.problems
    assert problem.field == field and message in problem.message


def test_scientific_notation_is_a_number_in_files_and_in_set():
    s = load_scenario_text(
        BASE + "failures:\n  causes: {crash: {rate: 1e-9 / s}}\n"
        "  stragglers: {random: {fraction: 1e-4, factor: 2}}\n"
    )
    assert s.failures.causes["crash"].rate == 1e-9
    assert s.failures.stragglers.random.fraction == 1e-4
    s = load_scenario_text(
        BASE + "failures:\n  causes: {crash: {rate: 1 / d}}\n",
        overrides=["failures.stragglers.random={fraction: 5e-1, factor: 2}"],
    )
    assert s.failures.stragglers.random.fraction == 0.5
    # quoted, it stays text (a name may look like a number)
    assert load_scenario_text(BASE.replace("name: small", "name: '1e9'")).name == "1e9"


def test_sweep_keys_that_are_not_scenario_paths_are_refused(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(
        tmp_path,
        "bad.sweep.yaml",
        "base: base.yaml\ngrid:\n  '': [1]\n  parallelism..tp: [1]\n  5: [1]\n"
        "  parallelism.order.0: [tp]\n",
    )
    text = _refused(["sweep", spec, "--out", tmp_path / "o", "--no-progress"])
    for line in (":3:3: grid.:", ":4:3: grid.parallelism..tp:", ":5:3: grid.5:",
                 ":6:3: grid.parallelism.order.0: no list here to index"):  # fmt: skip
        assert line in text, text
    nested = _write(
        tmp_path,
        "nested.sweep.yaml",
        "base: base.yaml\nset: {nope.x: 1}\ngrid:\n  parallelism.tp: [1, 2]\n",
    )
    _refused(
        ["sweep", nested, "--out", tmp_path / "o2", "--no-progress"],
        ":2:7: nope.x: nope: unknown field",
    )


def test_a_sweep_of_too_many_points_is_refused_before_any_is_made(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    grid = "".join(
        f"  {k}: [{', '.join(str(v) for v in range(10))}]\n"
        for k in (
            "training.seq_len",
            "training.global_batch",
            "parallelism.fsdp_prefetch",
            "model.layers",
            "parallelism.tp",
            "parallelism.pp",
        )  # fmt: skip
    )
    spec = _write(tmp_path, "huge.sweep.yaml", "base: base.yaml\ngrid:\n" + grid)
    _refused(["sweep", spec, "--out", tmp_path / "o", "--no-progress"], "grid", "1e+06", "100,000")


def test_a_sweep_whose_every_point_is_infeasible_reports_them(tmp_path, caplog):
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(
        tmp_path,
        "none.sweep.yaml",
        "base: base.yaml\nset: {training.global_batch: 33}\ngrid:\n  parallelism.tp: [1, 2]\n",
    )
    result = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("infeasible") == 3  # the base and both points
    assert "no point was simulated" in caplog.text  # the plots say why they are missing


@pytest.mark.parametrize(
    "collectives, parallelism, message",
    [
        ("{dp: halving_doubling}", "tp: 1, pp: 1", "power-of-two group; dp groups have 6"),
        ("{pp: tree}", "tp: 1, pp: 2", "tree implements all_reduce; the pp stream runs send_recv"),
        ("{dp: tree}", "tp: 1, pp: 1, zero: 3", "the dp stream runs all_gather, reduce_scatter"),
        ("{tp: nvls}", "tp: 2, pp: 1", "nvls needs NVLink SHARP"),
        ("{dp: torus}", "tp: 1, pp: 1", "torus needs a torus topology"),
    ],
)
def test_check_refuses_collectives_that_run_would(tmp_path, collectives, parallelism, message):
    text = (
        BASE.replace("gpus: 16", "gpus: 6")
        .replace(
            "parallelism: {tp: 2, pp: 2, zero: 1}",
            f"parallelism: {{{parallelism}, collectives: {collectives}}}",
        )
        .replace("global_batch: 32", "global_batch: 6")
    )
    if "pp: 2" in parallelism:
        text = text.replace("gpus: 6", "gpus: 8").replace("global_batch: 6", "global_batch: 8")
    path = _write(tmp_path, "c.yaml", text)
    for command in ("check", "memory"):
        _refused([command, path], "parallelism.collectives.", message)


def test_a_corrupt_or_foreign_results_file_is_named_and_left_alone(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(tmp_path, "s.sweep.yaml", "base: base.yaml\ngrid:\n  parallelism.tp: [1, 2]\n")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "results.parquet").write_text("not parquet")
    _refused(["sweep", spec, "--out", junk, "--no-progress"], "results.parquet", "left as it is")
    assert (junk / "results.parquet").read_text() == "not parquet"  # untouched
    folder = tmp_path / "folder"
    (folder / "results.parquet").mkdir(parents=True)
    _refused(["sweep", spec, "--out", folder, "--no-progress"], "is not a file")


def test_a_plot_file_is_a_name_inside_out(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(
        tmp_path,
        "p.sweep.yaml",
        "base: base.yaml\ngrid:\n  parallelism.tp: [1, 2]\n"
        "plots:\n  - {kind: line, x: parallelism.tp, file: ../escaped/x.png}\n",
    )
    _refused(["sweep", spec, "--out", tmp_path / "o", "--no-progress"], "plots[0].file")
    assert not (tmp_path / "escaped").exists()


def test_sweep_results_are_the_same_bytes_on_every_run(tmp_path):
    """Wall-clock seconds go to timings.csv, not into the results (G21)."""
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(tmp_path, "s.sweep.yaml", "base: base.yaml\ngrid:\n  parallelism.zero: [0, 1]\n")
    outs = []
    for run in ("a", "b"):
        result = runner.invoke(
            app, ["sweep", str(spec), "--out", str(tmp_path / run), "--no-progress",
                  "--format", "json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        outs.append(result.stdout.replace(str(tmp_path / run), "OUT"))
    assert outs[0] == outs[1] and "sim_time_s" not in outs[0]
    a, b = ((tmp_path / r / "results.parquet").read_bytes() for r in ("a", "b"))
    assert a == b
    assert "sim_time_s" in (tmp_path / "a" / "timings.csv").read_text()


def test_goodput_interval_sweeps_that_cannot_run_are_refused(job):
    _refused(["goodput", job, "--sweep-checkpoint-interval", ""], "A:B[:N]")
    _refused(["goodput", job, "--sweep-checkpoint-interval", "1min:2h:abc"], "whole number")
    _refused(["goodput", job, "--sweep-checkpoint-interval", "1us:2us"], "below one step")


def test_duplicates_are_refused(tmp_path):
    path = _write(tmp_path, "b.yaml", BASE)
    _refused(
        ["check", path, "--set", "parallelism.collectives={tp: ring, tp: tree}"],
        "--set parallelism.collectives", "duplicate key",
    )  # fmt: skip
    _refused(
        ["check", path, "--set", "failures={causes: {c: {rate: 1 / d}}, stragglers: {gpus: "
         "[{rank: 1, factor: 2}, {rank: 1, factor: 3}]}}"],
        "failures.stragglers.gpus[1].rank", "listed twice",
    )  # fmt: skip


def test_failures_while_down_take_out_no_more_nodes_than_there_are():
    """G04: a 2-node job whose GPUs fail every few minutes, each taking out its node: the
    repair queue holds at most the job's nodes and its spares, and a seed runs in linear
    time (it grew without bound, 5,710 nodes in repair after 2 days)."""
    from simulator.failures.job import _Job
    from tests.failures.helpers import job as model

    m = model(
        nodes=2, gpus=16, dp=2, cause_rate_s=[16 / 600.0], cause_nodes_out=[1], spares=1,
        repair_law="fixed", repair_mean_s=86400.0,
    )  # fmt: skip
    j = _Job(m, 2 * 86400.0, seed=0, record=False)
    peak = 0
    original = j.failure_phases

    def watch(k):
        nonlocal peak
        out = original(k)
        peak = max(peak, len(j.returns))
        return out

    j.failure_phases = watch
    j.run()
    assert 0 < peak <= m.nodes + m.spares


def test_a_straggler_link_not_in_the_topology_is_named_at_its_line(tmp_path):
    path = _write(
        tmp_path,
        "s.yaml",
        FAILURES + "  stragglers: {links: [{src: foo, dst: bar, fraction: 0.5}]}\n",
    )
    _refused(
        ["run", path], "s.yaml:13:25:", "failures.stragglers.links[0].src", "no link foo -> bar"
    )


def test_dualpipe_on_two_stages_takes_first_and_last_that_make_the_model():
    from simulator.pipelines.base import end_chunk_sizes

    assert end_chunk_sizes(8, 2, 3, 5) == [3, 5]
    with pytest.raises(ValueError, match="must add up to the model's layers"):
        end_chunk_sizes(8, 2, 3, 4)


def test_a_sampled_range_reports_its_own_error(tmp_path):
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(
        tmp_path,
        "r.sweep.yaml",
        "base: base.yaml\nsamples:\n  count: 2\n  keys:\n"
        "    training.micro_batch: {low: 8, high: 1, integer: true}\n",
    )
    text = _refused(["sweep", spec, "--out", tmp_path / "o", "--no-progress"], "below low")
    assert "valid list" not in text


def test_a_sweep_resumes_by_default_and_fresh_simulates_again(tmp_path, monkeypatch):
    from simulator.sweep import adapter

    calls = []
    real = adapter.simulate
    monkeypatch.setattr(adapter, "simulate", lambda s: calls.append(s) or real(s))
    _write(tmp_path, "base.yaml", BASE)
    spec = _write(tmp_path, "f.sweep.yaml", "base: base.yaml\ngrid:\n  parallelism.zero: [0, 1]\n")
    out = tmp_path / "o"
    args = ["sweep", str(spec), "--out", str(out), "--no-progress", "--workers", "1"]
    assert runner.invoke(app, args).exit_code == 0
    first, simulated = (out / "results.parquet").read_bytes(), len(calls)
    assert simulated == 2  # zero 0 and zero 1 (the base is zero 1)
    assert runner.invoke(app, args).exit_code == 0
    assert len(calls) == simulated  # resumed: nothing simulated again
    fresh = runner.invoke(app, [*args, "--fresh"])
    assert fresh.exit_code == 0, fresh.output
    assert len(calls) == 2 * simulated  # every point again
    assert (out / "results.previous.parquet").read_bytes() == first  # kept aside
    assert (out / "results.parquet").read_bytes() == first  # the same results, byte for byte
