"""Which layers each pipeline stage holds, and how many micro-batches it keeps in flight.

Layers are cut into ``pp x v`` equal chunks; rank ``r`` holds chunks ``r, r + pp, ...`` (the
interleaved assignment of Narayanan et al. 2021; ``v = 1`` is the plain contiguous split). The
embedding sits on stage 0, the final norm and output layer on stage ``pp - 1``.

In-flight micro-batches (those whose activations a stage holds at its peak), for stage ``r`` of
``p`` with ``m`` micro-batches per step:

- GPipe: all ``m`` forwards run before the backwards: ``m``;
- 1F1B: ``min(p - r, m)``;
- ZB-H1: ``min(p, m)`` on every stage: 1F1B's peak on the first stage (Qi et al. 2024), and
  later stages hold the micro-batches whose postponed weight-gradient is still due;
- ZB-H2: ``min(2p - 1, m)``, the extra warm-up forwards (and postponed W's) of its ramp;
- interleaved 1F1B, counted in chunks as Megatron-LM's warm-up does:
  ``min(2 (p - r - 1) + (v - 1) p + 1, m v)`` chunk-micro-batches, each ``1/v`` of the
  stage's layers. On stage 0 this is ``L (1 + (p - 1)/(p v))`` layers' worth, Korthikanti et
  al.'s section 4.2.3 figure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageLayout:
    """Stage ``stage`` of ``stages``: its layer indices and in-flight micro-batch count."""

    stage: int
    stages: int
    layers: tuple[int, ...]
    in_flight: float  # micro-batches' worth of the stage's layers held at the peak
    head_in_flight: int  # micro-batches of logits held (last stage)

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1


def stage_layers(
    num_layers: int,
    pp: int,
    virtual: int,
    stage: int,
    first: int | None = None,
    last: int | None = None,
) -> tuple[int, ...]:
    """Layer indices of ``stage`` with ``virtual`` chunks per stage (interleaved assignment).

    ``first``/``last`` (only with ``virtual`` = 1) give the end stages that many layers and
    split the rest evenly over the middle stages.
    """
    if first is not None and last is not None and pp > 1:
        if stage == 0:
            return tuple(range(first))
        if stage == pp - 1:
            return tuple(range(num_layers - last, num_layers))
        per = (num_layers - first - last) // (pp - 2)
        start = first + (stage - 1) * per
        return tuple(range(start, start + per))
    per_chunk = num_layers // (pp * virtual)
    out: list[int] = []
    for chunk in range(virtual):
        start = (chunk * pp + stage) * per_chunk
        out.extend(range(start, start + per_chunk))
    return tuple(out)


def in_flight_micro_batches(
    schedule: str, pp: int, stage: int, micro_batches: int, virtual: int = 1
) -> float:
    """Micro-batches' worth of a stage's activations held at its peak (see module doc)."""
    p, r, m = pp, stage, micro_batches
    if schedule == "gpipe":
        return float(m)
    if schedule == "zb-h1":
        return float(min(p, m))
    if schedule == "zb-h2":
        return float(min(2 * p - 1, m))
    if schedule == "interleaved" and virtual > 1:
        chunks = min(2 * (p - r - 1) + (virtual - 1) * p + 1, m * virtual)
        return chunks / virtual
    return float(min(p - r, m))


def pipeline_layout(
    num_layers: int,
    pp: int,
    virtual: int,
    schedule: str,
    micro_batches: int,
    first: int | None = None,
    last: int | None = None,
) -> list[StageLayout]:
    """The layout of every stage."""
    head = micro_batches if schedule == "gpipe" else 1
    return [
        StageLayout(
            stage=r,
            stages=pp,
            layers=stage_layers(num_layers, pp, virtual, r, first, last),
            in_flight=in_flight_micro_batches(schedule, pp, r, micro_batches, virtual),
            head_in_flight=head,
        )
        for r in range(pp)
    ]


def chunk_layers(
    num_layers: int,
    pp: int,
    virtual: int,
    stage: int,
    chunk: int,
    first: int | None = None,
    last: int | None = None,
) -> tuple[int, ...]:
    """Layer indices of model chunk ``chunk`` on ``stage`` (chunk 0 only when ``virtual`` = 1)."""
    if virtual == 1:
        return stage_layers(num_layers, pp, 1, stage, first, last)
    per_chunk = num_layers // (pp * virtual)
    start = (chunk * pp + stage) * per_chunk
    return tuple(range(start, start + per_chunk))
