"""Accelerator catalog against shared/validation/hardware_specs.csv."""

import pytest
from pydantic import ValidationError

from simulator.hardware import CATALOG, Accelerator, get_accelerator
from tests.conftest import published

CSV_TO_CATALOG = {
    "A100-SXM4-40GB": "A100-SXM4-40GB",
    "A100-SXM4-80GB": "A100-SXM4-80GB",
    "H100-SXM5-80GB": "H100-SXM",
    "H200-SXM-141GB": "H200-SXM",
    "TPU v4": "TPU-v4",
    "TPU v5p": "TPU-v5p",
    "TPU v5e": "TPU-v5e",
}


@pytest.mark.parametrize(
    "row", published("hardware_specs.csv").to_dict("records"), ids=lambda r: r["accelerator"]
)
def test_catalog_matches_published(row):
    name = CSV_TO_CATALOG.get(row["accelerator"])
    if name is None:
        pytest.skip("a system row (Meta's H100 servers), not a catalog part")
    acc = CATALOG[name]
    # Exact: the catalog transcribes these numbers.
    assert acc.peak_flops_per_s["bf16"] == pytest.approx(row["peak_bf16_dense_tflops"] * 1e12)
    assert acc.hbm_bandwidth_Bps == pytest.approx(row["hbm_bandwidth_GBps"] * 1e9)
    unit = 2**30 if str(row["hbm_capacity_unit"]).startswith("GiB") else 1e9
    assert acc.hbm_bytes == pytest.approx(row["hbm_capacity_value"] * unit)
    if row["scale_up_link_GBps"] == row["scale_up_link_GBps"]:  # not NaN
        # The table quotes bidirectional totals; the catalog stores one direction.
        assert acc.scale_up_bandwidth_Bps == pytest.approx(row["scale_up_link_GBps"] / 2 * 1e9)


def test_aliases_and_errors():
    assert get_accelerator("h100") is CATALOG["H100-SXM"]
    assert get_accelerator("A100_80GB") is CATALOG["A100-SXM4-80GB"]
    with pytest.raises(KeyError, match="known:"):
        get_accelerator("Z900")


def test_fp8_falls_back_to_bf16_where_missing():
    a100 = CATALOG["A100-SXM4-80GB"]
    assert a100.peak("fp8") == a100.peak("bf16")
    assert CATALOG["H100-SXM"].peak("fp8") == pytest.approx(
        2 * CATALOG["H100-SXM"].peak("bf16"), rel=1e-3
    )


def test_peak_needs_bf16_and_falls_back_only_for_narrow_dtypes():
    fields = dict(
        name="chip", hbm_bytes="80 GB", hbm_bandwidth_Bps="3 TB/s", scale_up_bandwidth_Bps=4e11
    )
    with pytest.raises(ValidationError, match="must give bf16"):
        Accelerator(peak_flops_per_s={"fp32": 6e13}, **fields)
    chip = Accelerator(peak_flops_per_s={"bf16": 1e15}, **fields)
    assert chip.peak("fp8") == 1e15 and chip.supports("fp4")  # documented fallback
    assert not chip.supports("fp32")
    with pytest.raises(KeyError, match="no peak for fp32"):
        chip.peak("fp32")  # never the bf16 peak for a wider dtype (15x too fast on H100)


def test_accelerator_quantities_share_the_scenario_bounds():
    base = dict(
        name="c", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=8e10, scale_up_bandwidth_Bps=4e11
    )
    for bad in ({"hbm_bandwidth_Bps": "1e-300 B/s"}, {"hbm_bandwidth_Bps": 3e12, "hbm_bytes": 0}):
        with pytest.raises(ValidationError):
            Accelerator(**{**base, "hbm_bandwidth_Bps": 3e12, **bad})
    with pytest.raises(ValidationError, match="1 GFLOP/s floor"):
        Accelerator(**{**base, "hbm_bandwidth_Bps": 3e12, "peak_flops_per_s": {"bf16": 1.0}})


def test_the_gb200s_sustained_fraction_is_predicted_from_the_b200s_die():
    # B200 measured: 1000 W limit, static 1000 x 121.7/700, sustained 1439/1737; its GEMM's
    # dynamic draw at boost is (limit - static) / sustained^3. The GB200 is that die at a
    # 2500/2250 higher boost clock (dynamic x ratio^3) under 1,200 W (static 1200 x 121.7/700)
    b_static, g_static = 1000 * 121.7 / 700, 1200 * 121.7 / 700
    dynamic = (1000 - b_static) / (1439 / 1737) ** 3 * (2500 / 2250) ** 3
    expected = ((1200 - g_static) / dynamic) ** (1 / 3)
    gb200 = get_accelerator("gb200")
    assert gb200.sustained_compute == pytest.approx(expected, rel=1e-12)
    assert 0.78 < expected < 0.80  # below the B200's 0.828: the higher clock draws more
    # sustained dense BF16: 1.98 PFLOP/s, above the B200's 1.86 (the same die, 200 W more)
    assert gb200.peak("bf16") * expected == pytest.approx(1.98e15, rel=0.01)
    assert gb200.hbm_bytes == 186e9 and gb200.scale_up_bandwidth_Bps == 900e9


def test_blackwell_gemms_reach_the_published_share_of_hopper_s():
    from simulator.model.compute import ComputeModel

    # ml-engineering's MAMF comparison table: H100 SXM 794.5 of 989, B200 1745 of 2250
    ratio = (1745 / 2250) / (794.5 / 989)
    assert 0.96 < ratio < 0.97
    for name in ("B200", "GB200"):
        acc = get_accelerator(name)
        assert acc.matmul_efficiency == pytest.approx(ratio, rel=1e-12)
        hopper = ComputeModel.for_accelerator(get_accelerator("H100")).gemm
        assert ComputeModel.for_accelerator(acc).gemm.e_max == pytest.approx(hopper.e_max * ratio)
    assert get_accelerator("H200").matmul_efficiency == 1.0
    # the GB200's own row (1822) is the B200's rate per clock at its 2062 MHz (B200: 1965)
    assert 1745 * 2062 / 1965 == pytest.approx(1822, rel=0.01)


def test_sustained_compute_is_the_published_msmf_over_mamf():
    # ml-engineering's MAMF/MSMF table (commit fe12f4e): H200 SXM 850 burst, 755 sustained;
    # the H100 is the same die at the same 700 W; B200 1737 -> 1439; A100 SXM unmeasured.
    assert get_accelerator("H200").sustained_compute == pytest.approx(755 / 850)
    assert get_accelerator("H100").sustained_compute == pytest.approx(0.888, abs=5e-4)
    assert get_accelerator("B200").sustained_compute == pytest.approx(1439 / 1737)
    assert get_accelerator("A100").sustained_compute == 1.0
    assert get_accelerator("v5p").sustained_compute == 1.0
    with pytest.raises(ValidationError, match="sustained_compute"):
        Accelerator(**{**get_accelerator("H100").model_dump(), "sustained_compute": 0.0})
    with pytest.raises(ValidationError, match="sustained_compute"):
        Accelerator(**{**get_accelerator("H100").model_dump(), "sustained_compute": 1.2})


def test_sustained_compute_slows_compute_bound_kernels_only():
    from simulator.model.compute import ComputeModel, gemm_shape
    from simulator.model.ops import Op

    h100 = get_accelerator("H100")
    burst = ComputeModel.for_accelerator(h100.model_copy(update={"sustained_compute": 1.0}))
    held = ComputeModel.for_accelerator(h100)
    m = n = k = 8192.0
    flops = 2 * m * n * k
    gemm = Op("fc", "gemm", flops, flops, flops, 6 * m * k, 6 * m * k, 6 * m * k, (m, n, k))
    copy = Op("cast", "elementwise", 0.0, 0.0, 0.0, 4e9, 4e9, 0.0)
    for phase in "fbw":
        e = held.gemm.efficiency(*gemm_shape(gemm, phase))
        # compute-bound: FLOPs over the peak at the burst efficiency times 755/850
        want = flops / (989.4e12 * e * 755 / 850) + held.launch_s
        assert held.op_seconds(gemm, phase) == pytest.approx(want, rel=1e-12)
        assert burst.op_seconds(gemm, phase) < held.op_seconds(gemm, phase)
    assert held.op_seconds(copy, "f") == burst.op_seconds(copy, "f")  # HBM-bound: unchanged


def test_a_scenario_can_run_at_the_burst_rate():
    from simulator import api
    from simulator.scenario import load_scenario_text

    text = """
model: {{name: llama3-8b, layers: 2}}
cluster:
  accelerator: {acc}
  topology: {{kind: nvswitch, node: {{gpus: 8}}}}
parallelism: {{tp: 8}}
training: {{global_batch: 8, micro_batch: 1, seq_len: 2048}}
"""
    held = api.run(load_scenario_text(text.format(acc="H100")))
    burst = api.run(load_scenario_text(text.format(acc="{name: H100, sustained_compute: 1.0}")))
    # held: at the clock its kernels draw the power limit at; burst: the GEMMs' draw taken
    # as the rated power, so nothing throttles. Slower held, by at most a pure GEMM run's
    # 850/755 (this small step's memory-bound kernels lower its draw)
    ratio = held.metrics.step_time_s / burst.metrics.step_time_s
    assert 1.0 < ratio <= 850 / 755 + 1e-12
    assert burst.summary["clock"] == 1.0 and held.summary["clock"] < 1.0
