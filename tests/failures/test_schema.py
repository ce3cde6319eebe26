"""The failures section: the preset's arithmetic, and bad input named by file:line:col."""

import textwrap

import pytest

from simulator.failures.model import resolve_job
from simulator.failures.montecarlo import simulate_seeds
from simulator.scenario import ScenarioError, load_scenario, load_scenario_text
from simulator.scenario.failures import check_failures
from simulator.scenario.located import located_error
from tests.conftest import ROOT, published

BASE = """\
name: t
model: llama3-8b
cluster: {accelerator: H100, gpus: 16}
parallelism: {tp: 2, pp: 2}
training: {global_batch: 64, micro_batch: 2, seq_len: 4096}
"""
DAY = 86400.0


def _error(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(BASE + textwrap.dedent(text), "s.yaml")
    return info.value


@pytest.mark.parametrize(
    ("text", "where", "field", "words"),
    [
        (
            "failures:\n  causes:\n    gpu: {rate: -1 / d}\n",
            "s.yaml:8:11",
            "failures.causes.gpu.rate",
            "finite and non-negative",
        ),
        (
            "failures:\n  causes:\n    gpu: {rate: 1 / d, law: weibull, shape: 0.1}\n",
            "s.yaml:8:38",
            "failures.causes.gpu.shape",
            "greater than or equal to 0.2",
        ),
        (
            "failures:\n  causes:\n    gpu: {rate: 1 / d, law: weibull}\n",
            "s.yaml:8:5",
            "failures.causes.gpu",
            "needs a shape",
        ),
        ("failures:\n  spares: -2\n", "s.yaml:7:3", "failures.spares", "greater than or equal"),
        ("failures:\n  node_rat: 1 / d\n", "s.yaml:7:3", "failures.node_rat", "unknown field"),
        ("failures:\n  preset: llama2\n", "s.yaml:6:1", "failures", "unknown failures preset"),
        (
            "failures:\n  node_rate: 6.5 / 1000 / d\n  causes: {x: {rate: 1 / d}}\n",
            "s.yaml:6:1",
            "failures",
            "not both",
        ),
        (
            "failures:\n  checkpoint: {write_bandwidth: 2 TB}\n",
            "s.yaml:7:16",
            "failures.checkpoint.write_bandwidth",
            "not a bandwidth unit",
        ),
    ],
)
def test_bad_input_names_position_and_field(text, where, field, words):
    err = _error(text)
    problem = err.problems[0]
    assert str(problem.position) == where
    assert problem.field == field
    assert words in problem.message


def _write(tmp_path, failures: str):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + textwrap.dedent(failures))
    return path


def test_more_spares_than_nodes_is_blamed_on_spares(tmp_path):
    path = _write(tmp_path, "failures:\n  node_rate: 1 / d\n  spares: 3\n")  # 16 GPUs: 2 nodes
    # the loader itself refuses it, for every command
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}:8:3: failures.spares: 3 hot spares exceed the job's 2 nodes"


def test_checkpoint_interval_shorter_than_a_step(tmp_path):
    path = _write(tmp_path, "failures:\n  checkpoint:\n    interval: 2 s\n")
    s = load_scenario(path)
    assert check_failures(s) == []  # fine until the step time is known
    err = located_error(path, [], check_failures(s, step_time_s=3.5))
    assert str(err) == (
        f"{path}:8:5: failures.checkpoint.interval: checkpoint interval 2 s is shorter "
        "than one step (3.5 s)"
    )


def test_override_is_blamed_on_the_set_option(tmp_path):
    path = _write(tmp_path, "failures:\n  node_rate: 1 / d\n")
    over = ["failures.checkpoint.interval=1"]
    s = load_scenario(path, over)
    err = located_error(path, over, check_failures(s, step_time_s=3.5))
    assert str(err).startswith("--set failures.checkpoint.interval=1: failures.checkpoint.interval")


def test_llama3_preset_rates_are_the_table5_counts():
    table = published("llama3_table5_interruptions.csv")
    s = load_scenario(ROOT / "scenarios/examples/llama3-405b-16k-failures.yaml")
    m = resolve_job(s, step_time_s=10.0, state_bytes=5.7e12)
    expected = m.cause_rate_s * 54 * DAY
    assert expected.sum() == pytest.approx(table["interruption_count"].sum(), rel=1e-12)  # 419
    # every cause's expected count is its Table 5 count (same order as the table)
    assert expected == pytest.approx(table["interruption_count"].to_numpy(), rel=1e-12)
    assert m.maintenance_rate_s * 54 * DAY == pytest.approx(47, rel=1e-12)  # planned (sec. 3.3.4)


def test_llama3_preset_gives_about_419_unexpected_interruptions_in_54_days():
    s = load_scenario(ROOT / "scenarios/examples/llama3-405b-16k-failures.yaml")
    m = resolve_job(s, step_time_s=10.0, state_bytes=5.7e12)
    seeds = 100
    r = simulate_seeds(m, 54, seeds)
    unexpected = r.by_cause[r.by_cause["cause"] != "maintenance"].groupby("seed")["count"].sum()
    # Poisson: the mean over 100 seeds has standard error sqrt(419 / 100) ~ 2; 4 sigma
    assert abs(unexpected.mean() - 419) < 4 * (419 / seeds) ** 0.5
