"""The command line's reference commands: ``validate`` against published rows, ``calibrate``
a GPU, ``check`` a scenario, the ``models`` and ``accelerators`` catalogs, and one layer's
kernel ``costs``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli_args import Format, FormatOpt, ScenarioArg, SetOpt
from simulator.cli_common import api, load


def validate(
    format: FormatOpt = Format.table,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            help="megatron, megatron_table2, nccl, nccl_time, zero_bubble, throughput, llama3, "
            "zero, korthikanti, layer_timing, nvidia_h100, nvidia_gb200, moe_folding, deepep, "
            "moe_recipes (repeatable; default all).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Processes simulating rows side by side (default: one per usable core).",
        ),
    ] = None,
) -> None:
    """Reproduce published results: per row the published value, ours, and the error."""
    from simulator.validation import UnknownGroup, summary_frame
    from simulator.validation import validate as run_validation

    try:
        frame = run_validation(group, workers)
    except UnknownGroup as exc:
        typer.echo(f"error: --group: {exc}", err=True)
        raise typer.Exit(2) from None
    if format is Format.json:
        typer.echo(
            json.dumps(
                {
                    "rows": frame.to_dict("records"),
                    "groups": summary_frame(frame).to_dict("records"),
                },
                indent=2,
                default=float,
            )
        )
        return
    shown = frame.copy()
    for col in ("published", "simulated"):
        shown[col] = shown[col].map(lambda v: f"{v:,.4g}")
    shown["error"] = shown["error"].map(lambda v: f"{v:+.2%}")
    shown["tolerance"] = shown["tolerance"].map(lambda v: f"{v:.0%}" if v else "printed")
    shown["within"] = [
        ("yes" if w else ("expected miss" if e else "NO"))
        for w, e in zip(frame["within"], frame["expected_miss"], strict=True)
    ]
    typer.echo(shown.drop(columns=["expected_miss"]).to_string(index=False))
    for row in frame[(~frame["within"]) & (frame["expected_miss"] != "")].itertuples():
        typer.echo(f"expected miss, {row.row}: {row.expected_miss}")
    typer.echo("")
    summary = summary_frame(frame)
    for col in ("median_abs_error", "worst_abs_error"):
        summary[col] = summary[col].map(lambda v: f"{v:.2%}")
    typer.echo(summary.to_string(index=False))
    if not (frame["within"] | (frame["expected_miss"] != "")).all():
        raise typer.Exit(1)


def calibrate(
    out: Annotated[Path, typer.Option("--out", help="Folder to write.")],
    peak: Annotated[
        str, typer.Option("--peak", help="The GPU's dense bf16 peak, e.g. '989 TFLOP/s'.")
    ],
    hbm: Annotated[str, typer.Option("--hbm", help="Its HBM bandwidth, e.g. '3.35 TB/s'.")],
    repeats: int = 10,
    warmup: int = 3,
) -> None:
    """Measure GEMM, copy, GeLU and fused AdamW kernels with PyTorch on this GPU; write a
    calibration folder that an accelerator can name (``calibration: DIR``); print the fitted
    efficiencies."""
    from simulator.calibrate import CalibrationUnavailable, run_microbenchmarks, torch_timer
    from simulator.model.calibration import CalibrationError, device_fits
    from simulator.units import UnitError, parse_quantity

    try:
        peak_flops = parse_quantity(peak, "flops_rate")
        hbm_bps = parse_quantity(hbm, "bandwidth")
        timer, meta = torch_timer(repeats, warmup)
    except (UnitError, CalibrationUnavailable) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    run_microbenchmarks(out, timer, meta)
    try:
        gemm, mem = device_fits(str(out), peak_flops, hbm_bps)
    except CalibrationError as exc:  # e.g. copies faster than the --hbm given
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"wrote {out}: GEMM e_max {gemm.e_max:.2f}, x {gemm.x_half:.0f}, "
        f"RMS log error {gemm.rms_log_error:.1%}; HBM efficiency: copies {mem.e_mem:.2f}, "
        f"GeLU {mem.efficiency(2.0):.2f}, fused AdamW {mem.optimizer:.2f}"
    )
    typer.echo(_host_lines(json.loads((out / "host.json").read_text())))


def _host_lines(host: dict) -> str:
    """host.json as the scenario lines that use it."""
    held = host.get("held_power_w")
    board = (
        f" (the board drew {held:.0f} W at {host['held_sm_clock_mhz']:.0f} MHz)"
        if held is not None
        else ""
    )
    return (
        f"framework: {{cpu_launch_s: {host['cpu_launch_s'] * 1e6:.2f} us, "
        f"cpu_op_forward_s: {host['cpu_op_forward_s'] * 1e6:.2f} us}}\n"
        f"cluster.accelerator.sustained_compute: {host['sustained_compute']:.3f}"
        f"  # a long GEMM run's rate over a short one's{board}"
    )


def check(scenario: ScenarioArg, set_: SetOpt = None) -> None:
    """Validate a scenario and print it with every default filled in, as JSON."""
    s = load(scenario, set_)
    typer.echo(s.model_dump_json(indent=2))


def models(format: FormatOpt = Format.table) -> None:
    """The model catalog: names usable as ``model: NAME`` and their parameter counts."""
    from simulator.model.params import count_params

    rows = []
    from simulator.scenario.model_catalog import MODEL_CATALOG
    from simulator.scenario.schema import ModelConfig

    for name in sorted(MODEL_CATALOG):
        m = ModelConfig(name=name)
        c = count_params(m)
        rows.append(
            {
                "name": name,
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "kv_heads": m.n_kv_heads,
                "experts": m.moe.experts if m.moe else 0,
                "params": c.total,
                "active_params": c.active,
            }
        )
    if format is Format.json:
        typer.echo(json.dumps(rows, indent=2))
        return
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame["params"] = (frame["params"] / 1e9).map(lambda v: f"{v:,.2f}B")
    frame["active_params"] = (frame["active_params"] / 1e9).map(lambda v: f"{v:,.2f}B")
    typer.echo(frame.to_string(index=False))


def costs(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    layer: Annotated[int, typer.Option("--layer", help="Layer index (default 0).")] = 0,
    format: FormatOpt = Format.table,
) -> None:
    """One layer's kernels for one micro-batch on one rank, per pass (forward, input gradient,
    weight gradient, recompute): FLOPs, bytes, time and whether compute or memory bounds each,
    to hold against a profiler trace."""
    s = load(scenario, set_)
    try:
        frame = api.layer_costs(s, layer)
    except ValueError as exc:
        typer.echo(f"error: --layer: {exc}", err=True)
        raise typer.Exit(2) from None
    if format is Format.json:
        typer.echo(frame.to_json(orient="records", indent=2))
        return
    shown = frame.assign(
        GFLOP=frame["flops"] / 1e9, MB=frame["bytes"] / 1e6, us=frame["seconds"] * 1e6
    )[["pass", "op", "kind", "GFLOP", "MB", "us", "bound"]]
    typer.echo(f"{s.name or scenario.name}: layer {layer}, one micro-batch on one rank")
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    totals = frame.groupby("pass", sort=False)["seconds"].sum() * 1e6
    typer.echo("per pass (us): " + ", ".join(f"{k} {v:,.1f}" for k, v in totals.items()))
    for note in api.costs_notes(s, frame):
        typer.echo(note)


def accelerators(format: FormatOpt = Format.json) -> None:
    """The accelerator catalog (SI units in json: FLOP/s, bytes, B/s; the table in TFLOP/s,
    GB and GB/s)."""
    from simulator.hardware import CATALOG

    entries = [a.model_dump() for a in CATALOG.values()]
    if format is Format.json:
        typer.echo(json.dumps(entries, indent=2))
        return
    import pandas as pd

    rows = [
        {
            "name": a["name"],
            "kind": a["kind"],
            "architecture": a["architecture"],
            "bf16 TFLOP/s": a["peak_flops_per_s"].get("bf16", float("nan")) / 1e12,
            "fp8 TFLOP/s": a["peak_flops_per_s"].get("fp8", float("nan")) / 1e12,
            "HBM GB": a["hbm_bytes"] / 1e9,
            "HBM GB/s": a["hbm_bandwidth_Bps"] / 1e9,
            "scale-up GB/s": a["scale_up_bandwidth_Bps"] / 1e9,
        }
        for a in entries
    ]
    frame = pd.DataFrame(rows)
    for col in frame.columns[3:]:  # the numbers; "-": the accelerator has no such format
        frame[col] = frame[col].map(lambda v: "-" if v != v else f"{v:,.0f}")
    # a long run's compute-bound rate / the burst's, and GEMMs against the calibrated H200's
    frame["sustained"] = [f"{a['sustained_compute']:.3f}" for a in entries]
    frame["matmul"] = [f"{a['matmul_efficiency']:.3f}" for a in entries]
    typer.echo(frame.to_string(index=False))


def register(app: typer.Typer) -> None:
    """Add the reference commands to ``app``."""
    for command in (validate, calibrate, check, models, costs, accelerators):
        app.command()(command)
