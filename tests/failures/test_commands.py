"""``trainsim goodput``: the JSON contract, the files of --out, the sweep, exit code 2."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.failures.commands import parse_interval_range

runner = CliRunner()
KEYS = {
    "step_time_s",
    "days",
    "seeds",
    "interruptions_mean",
    "interruptions_by_cause",
    "mtti_hours",
    "ettr_mean",
    "ettr_p5",
    "ettr_p95",
    "ettr_ci95",
    "goodput_tokens_per_s",
    "goodput_tokens_per_s_ci95",
    "lost_hours_by_category",
    "lost_hours_ci95_by_category",
    "fleet",
    "checkpoint_interval_s",
    "optimal_checkpoint_interval_s",
    "unplanned_interruptions_mean",
    "planned_interruptions_mean",
    "spares",
    "spares_auto",
    "checkpoint_write_Bps",
    "checkpoint_interval_requested_s",
}
# 32 A100 in 4 nodes; one failure per node-day so a few days see some
SCENARIO = """\
include: {root}/scenarios/examples/ddp-megatron-1.7b.yaml
failures:
  node_rate: 1 / d
  spares: 1
  repair: {{law: fixed, mean: 12 h}}
  restart: {{scheduling: 1 min}}
  checkpoint: {{interval: 10 min}}
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, root):
    path = tmp_path_factory.mktemp("goodput") / "job.yaml"
    path.write_text(SCENARIO.format(root=root))
    return path


def _run(*args):
    return runner.invoke(app, ["goodput", *map(str, args)])


def test_json_has_exactly_the_issues_keys(scenario):
    result = _run(scenario, "--days", 5, "--seeds", 4, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == KEYS
    assert data["seeds"] == 4 and data["days"] == 5
    assert data["interruptions_by_cause"].keys() == {"node", "maintenance"}
    assert 0 < data["ettr_p5"] <= data["ettr_mean"] <= data["ettr_p95"] <= 1
    assert set(data["optimal_checkpoint_interval_s"]) == {"young", "daly", "drain_bound"}
    assert data["checkpoint_interval_requested_s"] == 600  # as given; the simulated one below
    # 600 s of training rounded up to whole steps
    steps = data["checkpoint_interval_s"] / data["step_time_s"]
    assert steps == pytest.approx(round(steps)) and 600 <= data["checkpoint_interval_s"] < 601


def test_out_writes_timeline_and_ettr_distribution(scenario, tmp_path):
    out = tmp_path / "gp"
    result = _run(
        scenario,
        "--days",
        3,
        "--seeds",
        3,
        "--out",
        out,
        "--sweep-checkpoint-interval",
        "2min:1h:3",
    )
    assert result.exit_code == 0, result.output
    for name in ("timeline.png", "ettr.png", "checkpoint_interval.png", "summary.json"):
        assert (out / name).stat().st_size > 0
    timeline = pd.read_parquet(out / "timeline.parquet")
    assert set(timeline["state"]) >= {"training", "checkpoint"}
    # segments tile the 3 days of seed 0 without overlap
    spans = timeline.sort_values("start_s")
    assert (spans["start_s"].to_numpy()[1:] >= spans["end_s"].to_numpy()[:-1] - 1e-6).all()
    assert (spans["end_s"] - spans["start_s"]).sum() == pytest.approx(3 * 86400, rel=1e-9)
    assert len(pd.read_parquet(out / "ettr.parquet")) == 3
    assert "ETTR against the checkpoint interval" in result.stdout
    assert len(pd.read_parquet(out / "checkpoint_interval.parquet")) == 3


def test_interval_shorter_than_a_step_exits_2_naming_the_option(scenario):
    result = _run(scenario, "--days", 1, "--seeds", 1, "--set", "failures.checkpoint.interval=0.1")
    assert result.exit_code == 2
    assert (
        "--set failures.checkpoint.interval=0.1: failures.checkpoint.interval: checkpoint "
        "interval 0.1 s is shorter than one step" in result.stderr
    )


def test_too_many_spares_exits_2_at_file_line_col(tmp_path, root):
    path = tmp_path / "job.yaml"
    path.write_text(SCENARIO.format(root=root).replace("spares: 1", "spares: 5"))
    result = _run(path, "--days", 1, "--seeds", 1)
    assert result.exit_code == 2
    assert f"{path}:4:3: failures.spares: 5 hot spares exceed the job's 4 nodes" in result.stderr


def test_scenario_without_failures_exits_2(root):
    result = _run(root / "scenarios/examples/ddp-megatron-1.7b.yaml", "--days", 1)
    assert result.exit_code == 2
    assert "failures: no failures: section" in result.stderr


def test_bad_sweep_range_exits_2(scenario):
    result = _run(scenario, "--sweep-checkpoint-interval", "1h:5min")
    assert result.exit_code == 2 and "0 < A < B" in result.stderr


def test_interval_range_is_log_spaced():
    assert parse_interval_range("1min:100min:3") == pytest.approx([60, 600, 6000])
    assert len(parse_interval_range("5min:4h")) == 12
    with pytest.raises(ValueError):
        parse_interval_range("5min")


def test_the_step_time_line_shows_random_stragglers_slowdown(tmp_path, root):
    # QA: the table's step time ignored failures.stragglers.random though ETTR counted it;
    # 32 GPUs, each slow 1% of steps at half speed: 1 + (1 - 0.99^32) x (2 - 1) = x1.275
    path = tmp_path / "job.yaml"
    path.write_text(
        SCENARIO.format(root=root) + "  stragglers: {random: {fraction: 0.01, factor: 2}}\n"
    )
    result = _run(path, "--days", 1, "--seeds", 2)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if "step time" in x)
    slowdown = 1 + (1 - 0.99**32)
    assert f"with random stragglers, x{slowdown:.3f}" in line
    plain = _run(path, "--days", 1, "--seeds", 2, "--set", "failures.stragglers.random=null")
    assert plain.exit_code == 0, plain.output
    assert "random stragglers" not in plain.stdout


def test_goodput_builds_the_topology_once(tmp_path, root, monkeypatch):
    """The step, the checkpoint and the switch count share one build of the topology."""
    path = tmp_path / "switches.yaml"
    path.write_text(
        SCENARIO.format(root=root).replace(
            "node_rate: 1 / d", "causes: {switch: {rate: 1 / 300 d, per: switch}}"
        )
    )
    from simulator.topology import build as builder

    built = []  # counted at the builder, whichever name a caller imported it by
    build = builder._build
    monkeypatch.setattr(builder, "_build", lambda c: built.append(c) or build(c))
    result = _run(path, "--days", 1, "--seeds", 2, "--format", "json")
    assert result.exit_code == 0, result.output
    assert len(built) == 1


def test_seeds_auto_stops_when_the_interval_is_narrow(scenario):
    """--seeds auto runs tens of seeds until the 95% interval of the mean ETTR is within
    --ci; the JSON says how many and how wide."""
    result = _run(scenario, "--days", 2, "--seeds", "auto", "--ci", 0.05, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["seeds"] % 10 == 0
    assert data["ettr_ci95"] <= 0.05


@pytest.mark.parametrize(
    "args, says",
    [
        (["--seeds", "many"], "--seeds many"),
        (["--seeds", "0"], "--seeds 0"),
        (["--sweep", "spares=1,2"], "--sweep spares"),
        (["--sweep", "failures.spares=1"], "KEY=V1,V2"),
    ],
)
def test_bad_seeds_and_sweeps_exit_2(scenario, args, says):
    result = _run(scenario, "--days", 1, *args)
    assert result.exit_code == 2
    assert says in result.output


def test_a_failures_field_swept_with_the_same_seeds(scenario, tmp_path):
    """ETTR against the spare pool: the same seeds at every value, so more spares never
    lose (one spare vs four on a 4-node job with 12 h repairs), and the files of --out."""
    out = tmp_path / "sweep"
    result = _run(
        scenario, "--days", 3, "--seeds", 6, "--sweep", "failures.spares=0,1,4",
        "--out", out, "--format", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["failures.spares"] for r in rows] == ["0", "1", "4"]
    ettr = [r["ettr_mean"] for r in rows]
    assert ettr[0] <= ettr[1] <= ettr[2] and ettr[0] < ettr[2]
    assert (out / "goodput-sweep.csv").exists() and (out / "goodput-sweep.png").exists()
