"""Reproduce published results and report the error of each (``trainsim validate``).

Rows (``scenarios/validation/published/rows.yaml`` and the tables in
``scenarios/validation/published/``):

- Megatron SC21 Table 1 (all ten rows, 1.7B to 1T parameters) and Table 2 (PTD-P vs
  ZeRO-3 for GPT-3 175B): achieved
  TFLOP/s per GPU, counted with the paper's own FLOP
  formula (Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), full attention and recompute included)
  over the simulated step time;
- nccl-tests bus bandwidths of single nodes and NICs, and all-reduce times from 1 MiB to 4 GiB
  on one A100 node and two H100 nodes (:mod:`simulator.validation_nccl`);
- the zero-bubble paper's Table 4: throughput of ZB-H1 / ZB-H2 relative to 1F1B, against the
  paper's ZB-1p / ZB-2p (rows the model cannot meet say why, in ``expected_miss``);
- ZeRO Table 1: model-state memory per device, every cell, at the table's printed precision;
- Korthikanti et al. 2022: activation memory per layer, formula by formula (22B model), and
  Table 4's forward and backward time of one layer of that model on A100 (TP 8);
- NVIDIA's DGX Cloud benchmarking recipes: tokens/s per GPU of NeMo runs on H100 and GB200
  NVL72 (BF16);
- MoE: parallel folding's gains (ratios), DeepEP's all-to-all bandwidths
  (:mod:`simulator.validation_deepep`), Qwen3-235B recipes on H100 and GB200.

Each row carries its tolerance; ``within`` says whether it is met.
A row with ``expected_miss`` is shown but not counted as a failure: the reason says why the
model cannot meet it.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import yaml
from tqdm import tqdm

from simulator import api
from simulator.model.activations import MicroBatch, layer_activation_bytes
from simulator.model.ops import Sharding
from simulator.plan.plan import zero_sharded
from simulator.scenario.loader import PROJECT_ROOT
from simulator.scenario.schema import ModelConfig
from simulator.trace import gpu_rows
from simulator.validation_deepep import deepep_rows
from simulator.validation_nccl import nccl_rows, nccl_time_rows

VALIDATION = PROJECT_ROOT / "scenarios" / "validation"
COLUMNS = [
    "group",
    "row",
    "published",
    "simulated",
    "error",
    "tolerance",
    "within",
    "unit",
    "expected_miss",
]


Each = Callable[[Callable, Iterable], list]  # how a group's simulations are run


def in_turn(fn: Callable, jobs: Iterable) -> list:
    """``[fn(job) for job in jobs]``, in this process."""
    return [fn(job) for job in jobs]


def on_pool(pool: ProcessPoolExecutor) -> Each:
    """Run a group's simulations on ``pool``'s processes, results in job order (each
    simulation is deterministic, so they are the same as :func:`in_turn`'s)."""

    def each(fn: Callable, jobs: Iterable) -> list:
        jobs = list(jobs)
        return in_turn(fn, jobs) if len(jobs) < 2 else list(pool.map(fn, jobs))

    return each


def _summary(job: tuple[str, tuple[str, ...]]) -> dict:
    """The ``trainsim run`` summary of the scenario file ``job[0]`` with overrides ``job[1]``."""
    path, overrides = job
    return api.run(api.load(PROJECT_ROOT / path, list(overrides))).summary


def _scenario_summaries(rows: list[dict], each: Each) -> list[tuple[object, dict]]:
    """(scenario, run summary) of each row's ``scenario`` file."""
    summaries = each(_summary, [(r["scenario"], ()) for r in rows])
    return [
        (api.load(PROJECT_ROOT / r["scenario"]), m) for r, m in zip(rows, summaries, strict=True)
    ]


def _row(group, row, published, simulated, tolerance, unit, within=None):
    error = simulated / published - 1 if published else math.nan
    if within is None:
        within = abs(error) <= tolerance
    return {
        "group": group,
        "row": row,
        "published": published,
        "simulated": simulated,
        "error": error,
        "tolerance": tolerance,
        "within": bool(within),
        "unit": unit,
        "expected_miss": "",
    }


def _within(simulated: float, published: float, tolerance: float, summary: dict) -> bool:
    """A published run is reproduced when the simulated value is within ``tolerance``
    (relative) and the simulated run fits in memory, as the published one did."""
    return abs(simulated / published - 1) <= tolerance and not summary["oom"]


def megatron_rows(
    spec: dict, group: str = "Megatron SC21 Table 1", each: Each = in_turn
) -> list[dict]:
    """Achieved TFLOP/s per GPU by the paper's FLOP count over the simulated step time; a run
    that does not fit in memory does not reproduce the row, whatever its speed."""
    out = []
    for r, (s, summary) in zip(spec["rows"], _scenario_summaries(spec["rows"], each), strict=True):
        m, t = s.model, s.training
        flops = (
            96
            * t.global_batch
            * t.seq_len
            * m.layers
            * m.hidden**2
            * (1 + t.seq_len / (6 * m.hidden) + m.vocab / (16 * m.layers * m.hidden))
        )
        achieved = flops / (summary["step_time_s"] * s.num_gpus) / 1e12
        row = _row(
            group, s.name, r["published"], achieved, spec["tolerance"], "TFLOP/s per GPU",
            _within(achieved, r["published"], spec["tolerance"], summary),
        )  # fmt: skip
        row["expected_miss"] = r.get("expected_miss", "")
        out.append(row)
    return out


def _baseline(row: dict) -> tuple[int, int]:
    """(micro-batch size, micro-batches) of a zero-bubble row's 1F1B run: the row's own, or
    ``baseline_micro_batch`` and the count that keeps its batch (the paper's ZB-2p* halves
    the micro-batch to hold ZB-1p's memory). The run is of ``baseline_scenario`` when the row
    gives one (ZB-V's scenarios lay their layers out in a V)."""
    mb = row.get("baseline_micro_batch", row["micro_batch"])
    count, rest = divmod(row["microbatches"] * row["micro_batch"], mb)
    if rest:
        raise ValueError(
            f"{row['scenario']}: baseline_micro_batch {mb} does not divide the row's batch of "
            f"{row['microbatches']} x {row['micro_batch']}"
        )
    return mb, count


def zero_bubble_rows(spec: dict, each: Each = in_turn) -> list[dict]:
    """Throughput of a zero-bubble schedule relative to 1F1B on the same pipeline (a row's
    ``table``, 4 unless given, names its group; other tables' names carry the micro-batch
    size, which tells apart runs of one model and micro-batch count)."""
    out = []
    jobs = {}  # (scenario, micro-batches, micro-batch size, schedule) -> its run, each once
    for r in spec["rows"]:
        for schedule, mb, m in (
            ("1f1b", *_baseline(r)),
            (r["schedule"], r["micro_batch"], r["microbatches"]),
        ):
            scenario = (
                r["scenario"] if schedule != "1f1b" else r.get("baseline_scenario", r["scenario"])
            )
            jobs[(scenario, m, mb, schedule)] = (
                scenario,
                (
                    f"training.micro_batch={mb}",
                    f"training.global_batch={m * mb}",
                    f"parallelism.pipeline.schedule={schedule}",
                ),
            )
    summaries = each(_summary, jobs.values())
    times = {key: m["step_time_s"] for key, m in zip(jobs, summaries, strict=True)}
    for r in spec["rows"]:
        mb, m = _baseline(r)
        base = times[(r.get("baseline_scenario", r["scenario"]), m, mb, "1f1b")]
        ours = base / times[(r["scenario"], r["microbatches"], r["micro_batch"], r["schedule"])]
        published = r["published"] / r["published_1f1b"]
        table = r.get("table", 4)
        size = "" if table == 4 else f" b={r['micro_batch']}"
        name = (
            f"{r['scenario'].split('/')[-1][:-5]} m={r['microbatches']}{size}: "
            f"{r['schedule']} vs {r['paper_schedule']}"
        )
        row = _row(
            f"Zero-bubble Table {table} (ratio to 1F1B)",
            name,
            published,
            ours,
            spec["tolerance"],
            "x 1F1B",
        )
        row["expected_miss"] = r.get("expected_miss", "")
        out.append(row)
    return out


def _printed(value: float, printed: str) -> bool:
    """``value`` prints as ``printed`` at its precision, rounded half up or truncated."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    scale = 10**decimals
    target = round(float(printed) * scale)
    return (
        math.floor(value * scale + 0.5 + 1e-9) == target
        or math.floor(value * scale + 1e-9) == target
    )


def zero_rows() -> list[dict]:
    table = pd.read_csv(VALIDATION / "published" / "zero_table1_memory_per_device.csv", dtype=str)
    out = []
    for r in table.to_dict("records"):
        psi, n, k = (
            float(r["params_billion"]),
            int(r["data_parallel_Nd"]),
            float(r["K_optimizer_bytes_per_param"]),
        )
        for stage, col in [(1, "P_os_GB"), (2, "P_os_g_GB"), (3, "P_os_g_p_GB")]:
            gigabytes = psi * sum(zero_sharded((2, 2, k), stage, n))
            out.append(
                _row(
                    "ZeRO Table 1",
                    f"{r['params_billion']}B, N={n}, stage {stage}",
                    float(r[col]),
                    gigabytes,
                    0.0,
                    "GB",
                    within=_printed(gigabytes, r[col]),
                )
            )
    return out


KORTHIKANTI = [
    ("no parallelism", {"tp": 1}, "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    (
        "tensor parallel",
        {"tp": 8},
        "none",
        lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
    ),
    (
        "tensor + sequence parallel",
        {"tp": 8, "sp": True},
        "none",
        lambda s, b, h, a, t: s * b * h / t * (34 + 5 * a * s / h),
    ),
    (
        "tensor parallel + selective recompute",
        {"tp": 8},
        "selective",
        lambda s, b, h, a, t: s * b * h * (10 + 24 / t),
    ),
    (
        "tensor + sequence parallel + selective",
        {"tp": 8, "sp": True},
        "selective",
        lambda s, b, h, a, t: s * b * h * 34 / t,
    ),
    ("full recompute", {"tp": 1}, "full", lambda s, b, h, a, t: 2 * s * b * h),
]


def korthikanti_rows() -> list[dict]:
    a, h, layers, s, b = 64, 6144, 48, 2048, 1  # the paper's 22B model
    model = ModelConfig(
        layers=layers,
        hidden=h,
        heads=a,
        ffn=4 * h,
        vocab=51200,
        activation="gelu",
        norm="layernorm",
        bias=True,
        tied_embeddings=True,
        position_embedding="learned",
        max_positions=2048,
        dropout=0.1,
    )
    out = []
    for name, shard, recompute, formula in KORTHIKANTI:
        ours = layer_activation_bytes(
            model, 0, MicroBatch(b, s, 2.0, flash=False), Sharding(**shard), recompute
        )
        out.append(
            _row(
                "Korthikanti activations (22B)",
                name,
                formula(s, b, h, a, shard["tp"]) / 1e6,
                ours / 1e6,
                1e-9,
                "MB/layer",
            )
        )
    return out


def layer_times(frame: pd.DataFrame, layer: int) -> tuple[float, float]:
    """(forward s, backward s) of ``layer`` on the first simulated rank of a one-micro-batch
    step: from its first forward GPU task's start to the next layer's, and from its first
    backward one's (input or weight gradient, recompute) to the previous layer's: all the rank
    does for the layer, exposed TP communication included, as a timer around it would see."""
    f = gpu_rows(frame[frame["rank"] == frame["rank"].min()])
    fwd = f[f["phase"] == "forward"].groupby("layer")["start_s"].min()
    bwd = f[f["phase"].isin(["input_grad", "weight_grad", "recompute"])]
    bwd = bwd.groupby("layer")["start_s"].min()
    return float(fwd[layer + 1] - fwd[layer]), float(bwd[layer - 1] - bwd[layer])


def _middle_layer_times(job: tuple[str, tuple[str, ...]]) -> tuple[float, float]:
    """:func:`layer_times` of the middle layer of the scenario ``job`` (as :func:`_summary`)."""
    path, overrides = job
    s = api.load(PROJECT_ROOT / path, list(overrides))
    return layer_times(api.run(s).trace, s.model.layers // 2)


def layer_timing_rows(spec: dict, each: Each = in_turn) -> list[dict]:
    """Forward and backward time of one transformer layer (a middle one) against the paper's
    per-layer timings."""
    out = []
    group = "Korthikanti Table 4 (layer time)"
    timed = each(_middle_layer_times, [(spec["scenario"], tuple(r["set"])) for r in spec["rows"]])
    for r, (fwd, bwd) in zip(spec["rows"], timed, strict=True):
        for name, published, ours in (
            ("forward", r["forward_ms"], fwd),
            ("backward", r["backward_ms"], bwd),
        ):
            row = _row(
                group, f"{r['name']}: {name}", published, ours * 1e3, spec["tolerance"], "ms"
            )
            row["expected_miss"] = r.get(f"{name}_miss", "")
            out.append(row)
    return out


def throughput_rows(
    spec: dict, group: str = "Public throughput", each: Each = in_turn, tflops: bool = False
) -> list[dict]:
    """Tokens per second per GPU of published runs, from the simulated step time (``tflops``:
    model TFLOP/s per GPU, as Llama 3's Table 4 gives them); a run that does not fit in memory
    does not reproduce the row, whatever its speed."""
    out = []
    for r, (s, summary) in zip(spec["rows"], _scenario_summaries(spec["rows"], each), strict=True):
        ours = summary["model_tflops_per_gpu"] if tflops else summary["tokens_per_s"] / s.num_gpus
        row = _row(
            group, s.name, r["published"], ours, spec["tolerance"],
            "TFLOP/s per GPU" if tflops else "tokens/s/GPU",
            _within(ours, r["published"], spec["tolerance"], summary),
        )  # fmt: skip
        row["expected_miss"] = r.get("expected_miss", "")
        out.append(row)
    return out


def ratio_rows(spec: dict, group: str, each: Each = in_turn) -> list[dict]:
    """Throughput of a row's ``scenario`` relative to the same scenario with the overrides
    ``baseline_set`` (the same model, batch and GPUs, so the ratio of their MFUs as the
    source reports them is the ratio of their step times): ``published`` / ``published_
    baseline`` against our baseline step time / the row's. Neither run may run out of
    memory, as the source's both ran."""
    jobs = []
    for r in spec["rows"]:
        jobs += [(r["scenario"], ()), (r["scenario"], tuple(r["baseline_set"]))]
    summaries = each(_summary, jobs)
    out = []
    for k, r in enumerate(spec["rows"]):
        ours, base = summaries[2 * k], summaries[2 * k + 1]
        ratio = base["step_time_s"] / ours["step_time_s"]
        published = r["published"] / r["published_baseline"]
        fits = not (ours["oom"] or base["oom"])
        within = fits and abs(ratio / published - 1.0) <= spec["tolerance"]
        row = _row(group, r["name"], published, ratio, spec["tolerance"], r["unit"], within)
        row["expected_miss"] = r.get("expected_miss", "")
        out.append(row)
    return out


def llama3_rows(spec: dict, each: Each = in_turn) -> list[dict]:
    """Model TFLOP/s per GPU of the Llama 3 405B runs (:func:`throughput_rows`)."""
    return throughput_rows(spec, "Llama 3 Table 4", each, tflops=True)


GROUPS = (
    "megatron", "megatron_table2", "nccl", "nccl_time", "zero_bubble", "throughput", "llama3",
    "zero", "korthikanti", "layer_timing", "nvidia_h100", "nvidia_gb200", "moe_folding", "deepep",
    "moe_recipes",
)  # fmt: skip


class UnknownGroup(ValueError):
    """A validation group that does not exist."""


def validate(groups: list[str] | None = None, workers: int | None = None) -> pd.DataFrame:
    """Every validation row: published, simulated, relative error, tolerance, within.
    ``groups`` picks some of :data:`GROUPS` (:class:`UnknownGroup` naming any unknown one).
    ``workers``: processes that simulate a group's rows side by side, at most one per usable
    core (default: one per usable core; 1 simulates them in turn, in this process). The rows
    are the same either way."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    unknown = sorted(set(groups or ()) - set(GROUPS))
    if unknown:
        raise UnknownGroup(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    cores = api.usable_cores()
    workers = cores if workers is None else min(workers, cores)
    if workers == 1:
        return _validate(groups, in_turn)
    # fork: workers inherit the imported simulator instead of importing it again
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=api.quiet_pool_worker) as pool:
        return _validate(groups, on_pool(pool))


def _validate(groups: list[str] | None, each: Each) -> pd.DataFrame:
    spec = yaml.safe_load((VALIDATION / "published" / "rows.yaml").read_text())

    def recipes(key: str, title: str):
        return lambda: throughput_rows(spec[key], title, each)

    makers = {
        "megatron": lambda: megatron_rows(spec["megatron_table1"], each=each),
        "megatron_table2": lambda: megatron_rows(
            spec["megatron_table2"], "Megatron SC21 Table 2", each
        ),
        "nccl": lambda: nccl_rows(spec["nccl_busbw"], _row),
        "nccl_time": lambda: nccl_time_rows(spec["nccl_times"], _row),
        "zero_bubble": lambda: zero_bubble_rows(spec["zero_bubble"], each),
        "throughput": lambda: throughput_rows(spec["public_throughput"], each=each),
        "llama3": lambda: llama3_rows(spec["llama3_table4"], each),
        "zero": zero_rows,
        "korthikanti": korthikanti_rows,
        "layer_timing": lambda: layer_timing_rows(spec["korthikanti_table4"], each),
        "nvidia_h100": recipes("nvidia_h100", "NVIDIA H100 recipes (BF16)"),
        "nvidia_gb200": recipes("nvidia_gb200", "NVIDIA GB200 recipes (BF16)"),
        "moe_folding": lambda: ratio_rows(
            spec["moe_folding"], "MoE parallel folding (ratio to unfolded)", each
        ),
        "deepep": lambda: deepep_rows(spec["deepep"], _row),
        "moe_recipes": recipes("moe_recipes", "MoE recipes (Qwen3)"),
    }
    chosen = [(n, make) for n, make in makers.items() if groups is None or n in groups]
    rows = []
    bar = tqdm(chosen, desc="validate", unit="group", disable=None, leave=False)
    for name, make in bar:  # progress on stderr, on a terminal only
        bar.set_postfix_str(name)
        rows += make()
    return pd.DataFrame(rows, columns=COLUMNS)


def summary_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Per group: rows, rows within tolerance, median and worst |relative error|."""
    out = []
    for group, f in frame.groupby("group", sort=False):
        err = f["error"].abs()
        out.append(
            {
                "group": group,
                "rows": len(f),
                "within": int(f["within"].sum()),
                "expected_misses": int((f["expected_miss"] != "").sum()),
                "median_abs_error": float(err.median()),
                "worst_abs_error": float(err.max()),
                "worst_row": f.loc[err.idxmax(), "row"],
            }
        )
    return pd.DataFrame(out)
