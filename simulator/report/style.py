"""Colours and labels shared by the pictures: compute by phase, communication by purpose."""

from __future__ import annotations

PHASE_COLOURS = {
    "forward": "#4c72b0",
    "input_grad": "#dd8452",
    "weight_grad": "#c44e52",
    "recompute": "#8172b3",
    "optimizer": "#937860",
}
STREAM_COLOURS = {
    "host": "#b0b0b0",
    "tp": "#55a868",
    "dp": "#da8bc3",
    "pp_fwd": "#8c8c8c",
    "pp_bwd": "#595959",
    "ep": "#ccb974",
    "cp": "#64b5cd",
}
PHASE_LABELS = {
    "forward": "forward",
    "input_grad": "backward: input gradient",
    "weight_grad": "backward: weight gradient",
    "recompute": "recompute",
    "optimizer": "optimizer",
}
STREAM_LABELS = {
    "tp": "TP / SP collectives",
    "dp": "DP / ZeRO / FSDP collectives",
    "pp_fwd": "PP send: activations",
    "pp_bwd": "PP send: gradients",
    "ep": "EP all-to-all",
    "cp": "CP K/V ring",
    "host": "CPU: kernel launches",
}
STREAM_ORDER = ["host", "compute", "tp", "cp", "ep", "pp_fwd", "pp_bwd", "dp"]


def colour_of(kind: str, stream: str, phase: str) -> str:
    if kind == "compute":
        return PHASE_COLOURS.get(phase, "#999999")
    return STREAM_COLOURS.get(stream, "#bbbbbb")


def stream_rank(stream: str) -> int:
    return STREAM_ORDER.index(stream) if stream in STREAM_ORDER else len(STREAM_ORDER)
