"""Accelerator catalog against shared/validation/hardware_specs.csv."""

import pytest

from simulator.hardware import CATALOG, get_accelerator
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
