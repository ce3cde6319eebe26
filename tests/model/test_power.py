"""The power model: the clock a step holds under its power limit, and the step's energy."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simulator import api
from simulator.cli import app
from simulator.hardware import SUSTAINED_COMPUTE, get_accelerator
from simulator.model.power import power_model_of
from simulator.scenario import load_scenario_text

EX = "scenarios/examples/llama3-8b-fsdp.yaml"


@pytest.mark.parametrize("name", ["H100", "H200", "B200", "GB200"])
def test_a_long_large_gemm_run_holds_the_measured_sustained_rate(name):
    # the one measured long GEMM run (Bekman's MSMF / MAMF) comes back from the model at
    # activity 1 and the rated power; nothing else in the model is fitted to it
    model = power_model_of(get_accelerator(name))
    assert model.clock(1.0) == pytest.approx(SUSTAINED_COMPUTE[name], rel=1e-12)


def test_the_clock_at_a_power_cap_is_the_cubic_law_s():
    model = power_model_of(get_accelerator("H100"))
    # static 121.7 W; the GEMM's dynamic draw at boost: (700 - 121.7) / (755/850)^3
    dynamic = (700 - 121.7) / (755 / 850) ** 3
    expected = ((500 - 121.7) / dynamic) ** (1 / 3)
    assert model.with_limit(500).clock(1.0) == pytest.approx(expected, rel=1e-12)
    assert 0.76 < expected < 0.78
    clocks = [model.with_limit(w).clock(1.0) for w in (300, 400, 500, 600, 700, 800, 1000)]
    assert clocks == sorted(clocks) and clocks[-1] == 1.0  # 1000 W: above the GEMM's draw


def test_memory_bound_kernels_do_not_throttle():
    model = power_model_of(get_accelerator("H200"))
    # 300 W at boost (decode's measured top), far under 700 W
    assert model.clock(0.0) == 1.0
    assert model.power_w(0.0, 1.0) == pytest.approx(300.0)
    assert model.clock(0.5) > model.clock(0.9) > model.clock(1.0)


def test_a_power_cap_slows_a_step_and_lowers_its_draw():
    full = api.run(api.load(EX))
    capped = api.run(api.load(EX, ['cluster.accelerator.power_limit="500 W"']))
    f, c = full.summary, capped.summary
    assert c["step_time_s"] > 1.03 * f["step_time_s"]
    assert c["clock"] < f["clock"] < 1.0
    assert c["power_limit_w"] == 500 and f["power_limit_w"] == 700
    assert c["power_per_gpu_w"] < f["power_per_gpu_w"]
    # the GEMMs' time grows as 1 / clock, the rest does not: the step by less than that
    assert c["step_time_s"] / f["step_time_s"] < f["clock"] / c["clock"]


def test_energy_adds_up_from_the_power_timeline():
    result = api.run(api.load(EX))
    s, power = result.summary, result.power
    step = s["step_time_s"]
    for _, f in power.groupby("rank"):
        covered = (f["end_s"] - f["start_s"]).sum()
        assert covered == pytest.approx(step, rel=1e-9)  # every instant of the step, once
    per_gpu = ((power["end_s"] - power["start_s"]) * power["watts"]).sum() / step
    per_gpu /= power["rank"].nunique()
    assert s["power_per_gpu_w"] == pytest.approx(per_gpu, rel=1e-12)
    assert s["cluster_power_w"] == pytest.approx(per_gpu * s["num_gpus"], rel=1e-12)
    assert s["energy_per_step_j"] == pytest.approx(s["cluster_power_w"] * step, rel=1e-12)
    tokens = s["tokens_per_s"] * step
    assert s["joules_per_token"] == pytest.approx(s["energy_per_step_j"] / tokens, rel=1e-9)
    assert s["facility_power_w"] == pytest.approx(1.10 * s["cluster_power_w"], rel=1e-12)
    # between the static draw and the GEMMs' draw at the step's clock
    acc = get_accelerator("H100")
    assert acc.static_power < s["power_per_gpu_w"] < s["peak_power_per_gpu_w"]


def test_devices_without_power_figures_report_no_energy():
    result = api.run(
        load_scenario_text("""
model: {name: llama3-8b, layers: 2}
cluster: {accelerator: v5p, topology: {kind: torus, shape: [2, 2, 2]}}
training: {global_batch: 8, micro_batch: 1, seq_len: 1024}
""")
    )
    assert "clock" not in result.summary and result.power is None


def test_a_limit_under_the_static_draw_is_refused():
    out = CliRunner().invoke(app, ["run", EX, "--set", "cluster.accelerator.power_limit=100 W"])
    assert out.exit_code == 2
    assert "power_limit 100 W is not above the static draw 121.7 W" in out.output


def test_run_writes_the_power_timeline(tmp_path):
    out = CliRunner().invoke(app, ["run", EX, "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "J/token" in out.stdout and "GEMM clock" in out.stdout
    assert (tmp_path / "power.csv").stat().st_size > 0
    assert (tmp_path / "power.png").stat().st_size > 10_000
    assert '"power (W)"' in (tmp_path / "trace.json").read_text()
