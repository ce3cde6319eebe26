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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.units import Bandwidth, Bytes, FlopsRate, Watts

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
    sustained_compute : the rate a large GEMM held over a long run at the power limit, as a
        fraction of its rate in a short burst (the calibration's regime: a few back-to-back
        runs at the boost clock), measured. 1.0 where unmeasured. See
        :data:`SUSTAINED_COMPUTE`. It calibrates the power model
        (:mod:`simulator.model.power`), which sets each step's clock from its own kernels.
    matmul_efficiency : the fraction of its peak a GEMM reaches on this device against the
        fraction the calibrated device's GEMMs reach of theirs, measured in one benchmark on
        both (:data:`MATMUL_EFFICIENCY`); scales the H200 calibration's GEMM efficiencies where
        the device has no ``calibration`` of its own. 1.0 where unmeasured.
    rated_power : the board's rated power (W, its TDP): the limit ``sustained_compute``
        was measured at.
    power_limit : the power limit the GPU runs under (W); None: ``rated_power`` (a cap is a
        what-if: ``--set cluster.accelerator.power_limit="500 W"``).
    static_power : the draw with clocks up and nothing running (W).
    memory_power : a memory-bound kernel's draw at the boost clock (W).
    The power figures: see :data:`POWER`; None where unknown (no power model: the clock is
    ``sustained_compute``). A large GEMM's draw at the boost clock follows from them
    (:attr:`compute_power`).
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
    matmul_efficiency: Annotated[float, Field(gt=0, le=2)] = 1.0
    rated_power: Watts | None = None
    power_limit: Watts | None = None
    static_power: Watts | None = None
    memory_power: Watts | None = None

    @property
    def compute_power(self) -> float | None:
        """A large GEMM's draw (W) at the boost clock with no limit: the one that, at the
        rated power, holds ``sustained_compute`` of its burst rate
        (:func:`compute_power_from_sustained`); None without power figures."""
        if self.rated_power is None or self.static_power is None:
            return None
        return compute_power_from_sustained(
            self.rated_power, self.static_power, self.sustained_compute
        )

    @property
    def limit(self) -> float | None:
        """The power limit in force (W): ``power_limit``, else ``rated_power``."""
        return self.power_limit if self.power_limit is not None else self.rated_power

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

    @model_validator(mode="after")
    def limit_above_static(self) -> Accelerator:
        if (
            self.limit is not None
            and self.static_power is not None
            and (self.limit <= self.static_power)
        ):
            raise ValueError(
                f"power_limit {self.limit:g} W is not above the static draw "
                f"{self.static_power:g} W (clocks up, nothing running): nothing could run"
            )
        return self

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

# A GEMM's best fraction of peak against the calibrated H200's, from one table that measured
# both: ml-engineering's "Maximum Achievable Matmul FLOPS comparison table" (a mean of 100
# iterations after 50 warm-up ones, the best shape of a sweep), where the H100 SXM (the
# H200's die) reaches 794.5 of 989 TFLOP/s (80.3%) and the B200 SXM 1745 of 2250 (77.6%):
# 0.965. The GB200 is the B200's die: the same factor; its own row there (1822 of its nominal
# 2500, 72.9%) is the B200's rate per clock at the GB200's 2062 MHz maximum SM clock (1745 x
# 2062 / 1965 = 1831, the same table's clocks), so it agrees. Others: 1.0 (the Hopper parts
# are the calibration's die; the A100 and TPUs are not compared).
MATMUL_EFFICIENCY = {"B200": (1745 / 2250) / (794.5 / 989), "GB200": (1745 / 2250) / (794.5 / 989)}

# (power limit, static, memory-bound) W per family; a large GEMM's draw follows from the
# sustained rate above (simulator.model.power).
# - Limits: H100 SXM and H200 SXM 700 W (datasheets; nvidia-smi's default and maximum limit),
#   B200 1000 W (HGX B200; MLCommons submissions' hw_notes), A100 SXM4 400 W (nvidia-smi's
#   default, NVIDIA/DCGM#152).
# - Static, H100/H200: 121.7 W with a CUDA context holding the clock at 1980 MHz (arXiv
#   2605.23918; nvidia-smi idles at 71-79 W once the clock falls to 345 MHz, which a training
#   step's gaps are too short for). A100: 20% of TDP at an iteration boundary, the lowest of
#   POLCA's (ASPLOS 2024) training traces: 80 W. B200: not published; H100's share of its
#   limit (17.4%), 174 W.
# - Memory-bound, H200: decode draws 137-300 W of 700 W (Ma et al., "The Illusion of Power
#   Capping in LLM Decode", arXiv 2605.11999): 300 W, the top of the range (large batches,
#   HBM streaming); H100 the same die and HBM power class. A100 and B200: not published; the
#   H200's share of the limit (43%), 171 W and 429 W.
# A100 at 400 W: no long-run GEMM rate is measured (SUSTAINED_COMPUTE 1.0), so its GEMM draw
# is taken as the limit (it does not throttle). GB200 1200 W (NVIDIA Mission Control's
# per-GPU maximum): static and memory-bound draws at the H100's and H200's shares of the
# limit as for the B200 (209 W and 514 W; the B200's 174 W static would be the same die's,
# and gives a sustained fraction 1.2% higher).
POWER = {
    "H100": (700.0, 121.7, 300.0),
    "H200": (700.0, 121.7, 300.0),
    "B200": (1000.0, 1000.0 * 121.7 / 700.0, 1000.0 * 300.0 / 700.0),
    "A100": (400.0, 80.0, 400.0 * 300.0 / 700.0),
    "GB200": (1200.0, 1200.0 * 121.7 / 700.0, 1200.0 * 300.0 / 700.0),
}


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
        matmul_efficiency=MATMUL_EFFICIENCY.get(name.split("-")[0], 1.0),
        **_power(name.split("-")[0]),
    )


DVFS_EXPONENT = 3.0  # dynamic power ~ C V^2 f, V rising with f (simulator.model.power)


def compute_power_from_sustained(limit_w: float, static_w: float, sustained: float) -> float:
    """A large GEMM's draw (W) at the boost clock, from the fraction ``sustained`` of its burst
    rate it held over a long run at the power limit ``limit_w``: the clock the power model
    gives such a run is ``((limit - static) / (compute - static))^(1/3)``, inverted."""
    return static_w + (limit_w - static_w) / sustained**DVFS_EXPONENT


def sustained_from_sibling(family: str, sibling: str, clock_ratio: float) -> float:
    """The sustained fraction of a device whose long GEMM run is not measured, predicted from
    a measured ``sibling`` of the same die: the sibling's GEMM draw above static (W, at its
    boost clock, from :func:`compute_power_from_sustained`) scaled by ``clock_ratio`` cubed
    to ``family``'s boost clock, then held under ``family``'s limit by the same DVFS law."""
    limit, static, _ = POWER[sibling]
    dynamic = compute_power_from_sustained(limit, static, SUSTAINED_COMPUTE[sibling]) - static
    f_limit, f_static, _ = POWER[family]
    scaled = dynamic * clock_ratio**DVFS_EXPONENT
    return min(1.0, ((f_limit - f_static) / scaled) ** (1 / DVFS_EXPONENT))


# GB200 (1,200 W): no long-run GEMM rate is published. It is the B200's die at a higher boost
# clock (dense BF16 2.5 PFLOP/s against 2.25: 1.11x), so its sustained fraction is predicted
# from the B200's measured one, not measured: 0.792, a sustained 1.98 PFLOP/s against the
# B200's 1.86 (before either's matmul_efficiency). The sustained rate is the B200's rate per
# clock times the clock at which the die's GEMM draw meets 1,200 W, so it does not depend on
# which boost clock the nominal 2.5 PFLOP/s assumes (the device reports 2062 MHz at most).
SUSTAINED_COMPUTE["GB200"] = sustained_from_sibling("GB200", "B200", 2500 / 2250)


def _power(family: str) -> dict:
    if family not in POWER:
        return {}
    rated, static, memory = POWER[family]
    return {"rated_power": rated, "static_power": static, "memory_power": memory}


_ARCHITECTURE = {
    "A100": "ampere", "H100": "hopper", "H200": "hopper", "B200": "blackwell", "GB200": "blackwell"
}  # fmt: skip
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
# GB200 NVL72 datasheet, rack totals with sparsity halved and divided by 72 GPUs: FP16/BF16
# 360 PF -> 2.5 PF dense per GPU, FP8 720 PF, FP4 1,440 PF, TF32 180 PF, FP32 5,760 TF.
_GB200 = {
    "fp32": 80.0,
    "tf32": 1250.0,
    "fp16": 2500.0,
    "bf16": 2500.0,
    "fp8": 5000.0,
    "fp4": 10000.0,
    "int8": 5000.0,
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
        _entry(
            "GB200",
            "gpu",
            _GB200,
            186e9,
            8000,
            900,
            "NVIDIA GB200 NVL72 datasheet (rack totals / 72: HBM3e 13.4 TB, 576 TB/s; "
            "NVLink5 1.8 TB/s bidirectional per GPU; 1,200 W)",
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

    >>> h100 = get_accelerator("h100-sxm")
    >>> h100.name, h100.hbm_bytes / 1e9, h100.peak("bf16") / 1e12  # GB, TFLOP/s dense
    ('H100-SXM', 80.0, 989.4)
    """
    try:
        return CATALOG[_LOOKUP[_key(name)]]
    except KeyError:
        raise KeyError(
            f"unknown accelerator {name!r}; known: {', '.join(known_accelerators())}"
        ) from None
