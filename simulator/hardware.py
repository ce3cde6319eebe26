"""Accelerator catalog: peak dense FLOP/s per dtype, HBM capacity and bandwidth, scale-up bandwidth.

Every figure is dense (no 2:4 sparsity) and comes from the vendor's datasheet as transcribed in
``shared/validation/hardware_specs.csv``; B200, which that table lacks, is from NVIDIA's DGX B200
datasheet (HGX B200, 1000 W). "GB" in a datasheet is 1e9 bytes, and so it is here: an
"80 GB" A100 holds 80e9 bytes of model state in the ZeRO paper's and the lecture's arithmetic.

``scale_up_bandwidth_Bps`` is what one device can send into its scale-up domain (NVLink through
NVSwitch, or all its ICI links together), per direction. Vendors quote NVLink as the
bidirectional sum (H100: "900 GB/s" = 450 GB/s each way) and so does Google for ICI, so the
catalog halves those.

A user may define an accelerator inline in a scenario with the same fields (quantities may be
unit strings), or start from a catalog entry by ``name`` and override some fields.

Examples
--------
>>> h100 = get_accelerator("H100-SXM")
>>> h100.peak_flops_per_s["bf16"]
989400000000000.0
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simulator.units import Bandwidth, Bytes, FlopsRate

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8"]


class Accelerator(BaseModel):
    """One accelerator's peak capabilities, in SI units.

    Attributes
    ----------
    name : catalog or user name.
    kind : ``gpu`` or ``tpu`` (the node kind in topology graphs).
    peak_flops_per_s : dense peak FLOP/s per dtype; ``bf16`` is required.
    hbm_bytes : HBM capacity (B).
    hbm_bandwidth_Bps : HBM bandwidth (B/s).
    scale_up_bandwidth_Bps : per-direction bandwidth into the scale-up domain (B/s).
    source : where the figures come from.
    calibration : a folder of microbenchmarks measured on this device (``trainsim
        calibrate``); None uses the H200 curves scaled by this device's peaks.
    architecture : the GPU generation ("ampere", "hopper", "blackwell"), where a kernel's
        published speed depends on it (FlashAttention-2 on Hopper); "" when unknown.
    sustained_compute : the rate a compute-bound kernel holds in a long run, as a fraction
        of its rate in a short burst (the calibration's regime: a few back-to-back runs at
        the boost clock). A dense GEMM that fills the SMs draws the card's whole power limit,
        and the clock settles below boost within seconds; a training step is one long such
        run. 1.0 where unmeasured. See :data:`SUSTAINED_COMPUTE`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str
    kind: Literal["gpu", "tpu"] = "gpu"
    peak_flops_per_s: dict[Dtype, FlopsRate]
    hbm_bytes: Bytes
    hbm_bandwidth_Bps: Bandwidth
    scale_up_bandwidth_Bps: Bandwidth
    source: str = "user-defined"
    calibration: str | None = None
    architecture: Literal["", "ampere", "hopper", "blackwell", "tpu"] = ""
    sustained_compute: Annotated[float, Field(gt=0, le=1)] = 1.0

    @field_validator("peak_flops_per_s")
    @classmethod
    def bf16_given(cls, table: dict) -> dict:
        # bf16 is the default compute dtype and the fallback of fp8/fp4 (see ``peak``); an
        # override of peak_flops_per_s replaces the catalog's whole table, so say so.
        if "bf16" not in table:
            raise ValueError(
                f"must give bf16 (the default compute dtype and the fallback for fp8/fp4); "
                f"got {', '.join(table) or 'nothing'} (a mapping here replaces the catalog's "
                f"whole table)"
            )
        return table

    def supports(self, dtype: str) -> bool:
        """Whether :meth:`peak` has a figure for ``dtype`` (fp8/fp4 fall back to bf16)."""
        return dtype in self.peak_flops_per_s or dtype in FALLBACK_TO_BF16

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; fp8/fp4 fall back to bf16 where the device lacks them
        (the run is then costed as if the narrow GEMMs ran at bf16 speed)."""
        if dtype in self.peak_flops_per_s:
            return self.peak_flops_per_s[dtype]
        if dtype in FALLBACK_TO_BF16:
            return self.peak_flops_per_s["bf16"]
        raise KeyError(f"{self.name} has no peak for {dtype}")


FALLBACK_TO_BF16 = ("fp8", "fp4")


_CSV = "shared/validation/hardware_specs.csv"


# Sustained / burst dense BF16 GEMM rate, measured: Stas Bekman's ml-engineering,
# compute/accelerator/README.md (commit fe12f4e), "Maximum Achievable and Sustainable Matmul
# FLOPS" table, mamf-finder.py v4, every GPU of the node measured while the others ran a
# continuous matmul, the node's median GPU. MAMF is the burst (idle 0.25 s, then 20
# back-to-back iterations at the boost clock); MSMF the rate held over a 2-4 s window after
# up to 20 s of matmuls settled the clock. H200 SXM: MAMF 850 at 1980 MHz, MSMF 755 at
# 1860-1918 MHz and 685-688 W: 0.888. The H100 SXM is the same die at the same 700 W (its
# MSMF is not measured there): 0.888. B200: 1439 / 1737 = 0.828 (1000 W, 1399-1443 MHz
# sustained against 1965). A100 SXM: not measured (the 300 W A100 PCIe card's 258 / 285 =
# 0.905 is of another power budget), so 1.0: the A100 runs at the calibration's burst rate.
# The ratio depends on the method: an earlier version of the same benchmark gave the H200
# 702.9 / 828 = 0.849, and the same author elsewhere quotes its burst as 834 (0.905); we take
# the table's pair, measured together in one run with the node's other GPUs busy.
SUSTAINED_COMPUTE = {"H100": 755 / 850, "H200": 755 / 850, "B200": 1439 / 1737}


def _entry(name, kind, flops_tflops, hbm_bytes, hbm_GBps, scale_up_GBps_per_dir, source):
    arch = "tpu" if kind == "tpu" else _ARCHITECTURE[name.split("-")[0]]
    return Accelerator(
        name=name,
        kind=kind,
        peak_flops_per_s={k: v * 1e12 for k, v in flops_tflops.items()},
        hbm_bytes=hbm_bytes,
        hbm_bandwidth_Bps=hbm_GBps * 1e9,
        scale_up_bandwidth_Bps=scale_up_GBps_per_dir * 1e9,
        source=source,
        architecture=arch,
        sustained_compute=SUSTAINED_COMPUTE.get(name.split("-")[0], 1.0),
    )


_ARCHITECTURE = {"A100": "ampere", "H100": "hopper", "H200": "hopper", "B200": "blackwell"}
_AMPERE = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "int8": 624.0}
_HOPPER = {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9}
_BLACKWELL = {
    "fp32": 75.0,
    "tf32": 1100.0,
    "fp16": 2250.0,
    "bf16": 2250.0,
    "fp8": 4500.0,
    "fp4": 9000.0,
    "int8": 4500.0,
}

CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in (
        _entry("A100-SXM4-40GB", "gpu", _AMPERE, 40e9, 1555, 300, _CSV),
        _entry("A100-SXM4-80GB", "gpu", _AMPERE, 80e9, 2039, 300, _CSV),
        _entry("H100-SXM", "gpu", _HOPPER, 80e9, 3350, 450, _CSV),
        _entry("H200-SXM", "gpu", _HOPPER, 141e9, 4800, 450, _CSV),
        _entry(
            "B200",
            "gpu",
            _BLACKWELL,
            180e9,
            8000,
            900,
            "NVIDIA DGX B200 datasheet (HGX B200, dense); NVLink5 1.8 TB/s bidirectional",
        ),
        # TPU ICI figures are Google's per-chip bidirectional totals, halved; v4's doc gives
        # 2,400 Gb/s = 300 GB/s per chip.
        _entry("TPU-v4", "tpu", {"bf16": 275.0, "int8": 275.0}, 32 * 2**30, 1200, 150, _CSV),
        _entry("TPU-v5e", "tpu", {"bf16": 197.0, "int8": 394.0}, 16e9, 819, 200, _CSV),
        _entry(
            "TPU-v5p",
            "tpu",
            {"bf16": 459.0, "fp8": 459.0, "int8": 918.0},
            95 * 2**30,
            2765,
            600,
            _CSV,
        ),
    )
}

ALIASES: dict[str, str] = {
    "A100": "A100-SXM4-80GB",
    "A100-40GB": "A100-SXM4-40GB",
    "A100-80GB": "A100-SXM4-80GB",
    "H100": "H100-SXM",
    "H100-SXM5-80GB": "H100-SXM",
    "H200": "H200-SXM",
    "H200-SXM-141GB": "H200-SXM",
    "v4": "TPU-v4",
    "v5e": "TPU-v5e",
    "v5p": "TPU-v5p",
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


_LOOKUP = {_key(n): n for n in CATALOG} | {_key(a): n for a, n in ALIASES.items()}


def known_accelerators() -> list[str]:
    """Catalog names, sorted."""
    return sorted(CATALOG)


def get_accelerator(name: str) -> Accelerator:
    """Look up a catalog accelerator by name or alias (case-insensitive).

    Raises
    ------
    KeyError
        If the name is unknown; the message lists the known names.
    """
    try:
        return CATALOG[_LOOKUP[_key(name)]]
    except KeyError:
        raise KeyError(
            f"unknown accelerator {name!r}; known: {', '.join(known_accelerators())}"
        ) from None
