"""The space ``trainsim plan`` searches: one :class:`Choice` per parallel plan, the values each
knob may take, and ``--fix`` / ``--vary`` to pin or open a knob.

Knobs and their default values (each pinned by ``--fix KEY=VALUE``, or to the scenario's own
value by ``--fix KEY``):

- ``tp``: powers of two up to the NVLink domain (lecture 8 slide 42: tensor parallelism
  stays inside the fast domain); ``cp``: powers of two up to 64 that split the sequence into
  ``2 cp`` load-balanced chunks; ``pp``: every degree up to 64 (and the layer count) that
  divides the GPUs, powers of two or not, with shorter first and last stages where the layers
  do not split evenly (Llama 3 405B: 126 = 7 + 14 x 8 + 7); ``ep`` and ``expert_tp`` for MoE
  models (powers of two dividing the experts; expert TP 1 folded under TP, Megatron-core's
  MoE parallel folding); ``dp`` follows from the others.
- ``schedule`` with ``virtual_stages``: 1F1B, interleaved with 2 and 4 chunks per stage,
  ZB-H1 (the zero-bubble schedule at 1F1B's memory), and DualPipe for MoE models (DeepSeek-V3's
  schedule); each kept only where the schedule's own check accepts the micro-batch count.
  ``--vary schedule=...`` names others from the registry (ZB-H2 and the searched ZB-2p hold
  up to twice 1F1B's activations and overlap consecutive steps).
- ``zero``: 0 and 1 with pipeline parallelism (DeepSpeed's pipeline engine takes no higher
  stage), 0-3 without; ``micro_batch``: 1, 2, 4, 8 where they divide a replica's batch;
  ``recompute``: none, selective, full.
- Kept from the scenario unless ``--vary`` opens them: ``sequence_parallel`` (on whenever TP
  > 1: Korthikanti et al. 2022, the same traffic and less activation memory; ``--vary`` tries
  both) and ``bucket_size`` (``--vary`` tries 25 MB, 100 MB, 500 MB and 2 GB).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from simulator.pipelines import get_schedule
from simulator.scenario import Scenario
from simulator.scenario.yaml_source import load_value
from simulator.units import parse_quantity

MAX_DEGREE = 64
SCHEDULES: tuple[tuple[str, int], ...] = (
    ("1f1b", 1),
    ("interleaved", 2),
    ("interleaved", 4),
    ("zb-h1", 1),
)
MOE_SCHEDULES: tuple[tuple[str, int], ...] = (("dualpipe", 1),)
MICRO_BATCHES = (1, 2, 4, 8)
RECOMPUTE = ("none", "selective", "full")
BUCKETS = (25e6, 100e6, 500e6, 2e9)

# user-facing knob names, and the scenario keys they stand for
KNOBS: dict[str, str] = {
    "dp": "parallelism.dp",
    "tp": "parallelism.tp",
    "pp": "parallelism.pp",
    "cp": "parallelism.cp",
    "ep": "parallelism.ep",
    "expert_tp": "parallelism.expert_tp",
    "zero": "parallelism.zero",
    "sequence_parallel": "parallelism.sequence_parallel",
    "recompute": "parallelism.recompute",
    "bucket_size": "parallelism.bucket_size",
    "schedule": "parallelism.pipeline.schedule",
    "virtual_stages": "parallelism.pipeline.virtual_stages",
    "micro_batch": "training.micro_batch",
}
OPENED_BY_VARY = ("sequence_parallel", "bucket_size")


@dataclass(frozen=True)
class Choice:
    """One parallel plan. ``expert_tp`` None: the experts split over the attention's TP;
    ``sequence_parallel`` None: on whenever TP > 1; ``bucket_size`` None: the scenario's."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    zero: int
    schedule: str
    micro_batch: int
    recompute: str
    expert_tp: int | None = None
    virtual_stages: int = 1
    sequence_parallel: bool | None = None
    bucket_size: float | None = None

    @property
    def etp(self) -> int:
        return self.expert_tp or self.tp

    @property
    def sp(self) -> bool:
        return self.tp > 1 if self.sequence_parallel is None else self.sequence_parallel

    def label(self) -> str:
        """``tp2 cp4 pp16 dp4 z1 zb-h1 mb1 none`` (and ``v2``, ``ep8``, ``etp1``, ``no-sp``,
        ``bucket 100MB`` where they apply)."""
        parts = [f"tp{self.tp}", f"cp{self.cp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.expert_tp is not None and self.expert_tp != self.tp:
            parts.append(f"etp{self.expert_tp}")
        parts += [f"z{self.zero}", self.schedule]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        parts += [f"mb{self.micro_batch}", self.recompute]
        if self.tp > 1 and not self.sp:
            parts.append("no-sp")
        if self.bucket_size is not None:
            parts.append(f"bucket {self.bucket_size / 1e6:g}MB")
        return " ".join(parts)


def stage_split(layers: int, pp: int) -> tuple[int | None, int | None] | None:
    """(first, last) stage layers for ``pp`` stages: (None, None) when the layers split
    evenly, shorter first and last stages around ``ceil(layers / pp)``-layer middle stages
    otherwise (Llama 3 405B: 126 = 7 + 14 x 8 + 7), None if neither works."""
    if layers % pp == 0:
        return None, None
    if pp <= 2:
        return None
    per = -(-layers // pp)
    rest = layers - (pp - 2) * per
    first, last = rest - rest // 2, rest // 2
    if last < 1 or first > per:
        return None
    return first, last


def overrides_of(s: Scenario, c: Choice) -> dict[str, Any]:
    """The choice as dotted-key overrides of the scenario (every layout key, so that nothing
    of the scenario's own layout is left behind)."""
    first, last = stage_split(s.model.layers, c.pp) or (None, None)
    out = {
        "parallelism.dp": c.dp,
        "parallelism.tp": c.tp,
        "parallelism.pp": c.pp,
        "parallelism.cp": c.cp,
        "parallelism.ep": c.ep,
        "parallelism.expert_tp": c.expert_tp,
        "parallelism.zero": c.zero,
        "parallelism.sequence_parallel": c.sp,
        "parallelism.recompute": c.recompute,
        "parallelism.pipeline.schedule": c.schedule,
        "parallelism.pipeline.virtual_stages": c.virtual_stages,
        "parallelism.pipeline.first_stage_layers": first,
        "parallelism.pipeline.last_stage_layers": last,
        "training.micro_batch": c.micro_batch,
    }
    if c.bucket_size is not None:
        out["parallelism.bucket_size"] = c.bucket_size
    return out


def applied(s: Scenario, c: Choice) -> Scenario:
    """``s`` with the choice's layout, unvalidated (for the bound and the estimate; the
    loader validates the candidates that are simulated)."""
    first, last = stage_split(s.model.layers, c.pp) or (None, None)
    par = s.parallelism
    pipeline = par.pipeline.model_copy(
        update={
            "schedule": c.schedule,
            "virtual_stages": c.virtual_stages,
            "first_stage_layers": first,
            "last_stage_layers": last,
        }
    )
    update: dict[str, Any] = {
        "dp": c.dp,
        "tp": c.tp,
        "pp": c.pp,
        "cp": c.cp,
        "ep": c.ep,
        "expert_tp": c.expert_tp,
        "zero": c.zero,
        "sequence_parallel": c.sp,
        "recompute": c.recompute,
        "pipeline": pipeline,
    }
    if c.bucket_size is not None:
        update["bucket_size"] = c.bucket_size
    training = s.training.model_copy(update={"micro_batch": c.micro_batch})
    return s.model_copy(update={"parallelism": par.model_copy(update=update), "training": training})


class SpaceError(ValueError):
    """A ``--fix`` or ``--vary`` that names no knob or gives a value it cannot take."""


def knob_of(key: str) -> str:
    """The knob a user's key names: ``tp``, ``parallelism.tp`` and ``pipeline.schedule`` alike."""
    k = key.strip()
    for name, dotted in KNOBS.items():
        if k in (name, dotted, dotted.split(".", 1)[1]):
            return name
    raise SpaceError(f"{key!r} is no knob of the plan search; knobs: {', '.join(KNOBS)}")


def _value(name: str, raw: Any) -> Any:
    """A knob's value from its text (YAML; sizes with units for ``bucket_size``)."""
    if name == "bucket_size":
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        try:
            return float(parse_quantity(str(raw), "bytes"))
        except (ValueError, TypeError) as exc:
            raise SpaceError(f"bucket_size={raw!r}: {exc}") from None
    value = load_value(raw) if isinstance(raw, str) else raw
    if name in ("schedule", "recompute"):
        allowed = None if name == "schedule" else RECOMPUTE
        if not isinstance(value, str) or (allowed and value not in allowed):
            raise SpaceError(f"{name}={raw!r}: one of {', '.join(allowed or ('a schedule',))}")
        if name == "schedule":
            try:
                get_schedule(value)
            except ValueError as exc:
                raise SpaceError(f"schedule={raw!r}: {exc}") from None
        return value
    if name == "sequence_parallel":
        if not isinstance(value, bool):
            raise SpaceError(f"sequence_parallel={raw!r}: true or false")
        return value
    if name == "expert_tp" and value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpaceError(f"{name}={raw!r}: a whole number")
    if name == "zero" and value > 3:
        raise SpaceError(f"zero={raw!r}: 0, 1, 2 or 3")
    if name != "zero" and value < 1:
        raise SpaceError(f"{name}={raw!r}: at least 1")
    return value


def scenario_value(s: Scenario, name: str) -> Any:
    """The scenario's own value of a knob (what ``--fix KEY`` pins)."""
    par = s.parallelism
    return {
        "dp": s.dp,
        "tp": par.tp,
        "pp": par.pp,
        "cp": par.cp,
        "ep": par.ep,
        "expert_tp": par.expert_tp,
        "zero": par.zero,
        "sequence_parallel": par.sequence_parallel,
        "recompute": par.recompute,
        "bucket_size": par.bucket_size,
        "schedule": par.pipeline.schedule,
        "virtual_stages": par.pipeline.virtual_stages,
        "micro_batch": s.training.micro_batch,
    }[name]


@dataclass(frozen=True)
class Knobs:
    """Pinned values (``--fix``) and opened knobs with their values (``--vary``)."""

    fixed: dict[str, Any] = field(default_factory=dict)
    varied: dict[str, tuple] = field(default_factory=dict)

    @staticmethod
    def parse(s: Scenario, fixes: Iterable[str] = (), varies: Iterable[str] = ()) -> Knobs:
        """From ``--fix KEY[=VALUE]`` and ``--vary KEY[=V1,V2,...]`` texts (SpaceError)."""
        fixed: dict[str, Any] = {}
        for text in fixes:
            key, sep, raw = text.partition("=")
            name = knob_of(key)
            fixed[name] = _value(name, raw) if sep else scenario_value(s, name)
        varied: dict[str, tuple] = {}
        for text in varies:
            key, sep, raw = text.partition("=")
            name = knob_of(key)
            if name == "dp":
                raise SpaceError("dp follows from the GPUs and the other degrees: --fix dp=N")
            if name in fixed:
                raise SpaceError(f"{name} is both fixed and varied")
            if sep:
                varied[name] = tuple(_value(name, v) for v in raw.split(",") if v.strip())
                if not varied[name]:
                    raise SpaceError(f"--vary {text}: no values")
            elif name == "sequence_parallel":
                varied[name] = (True, False)
            elif name == "bucket_size":
                varied[name] = tuple(sorted({*BUCKETS, s.parallelism.bucket_size}))
            else:  # a searched knob: its default values
                varied[name] = ()
        if s.model.moe is None:
            for name in ("ep", "expert_tp"):
                given = [fixed[name]] if name in fixed else list(varied.get(name, ()))
                if name in varied or any(v not in (1, None) for v in given):
                    raise SpaceError(f"{name}: {s.model.name or 'the model'} has no experts")
        return Knobs(fixed, varied)

    def values(self, name: str, default: Iterable) -> list:
        """The values knob ``name`` takes: pinned, varied, or ``default``."""
        if name in self.fixed:
            return [self.fixed[name]]
        given = self.varied.get(name)
        return list(given) if given else list(default)


def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(int(math.log2(max(1, limit))) + 1)]


@dataclass(frozen=True)
class Rejected:
    """A part of the space rejected before any candidate was made of it, and why."""

    choice: Choice
    reason: str


def enumerate_space(s: Scenario, domain: int, knobs: Knobs) -> tuple[list[Choice], list[Rejected]]:
    """Every choice the knobs allow on ``s``'s GPUs that divides them and the batch, and the
    degree combinations rejected outright (a batch that does not split over the DP degree).
    ``domain``: GPUs per NVLink domain (TP's bound)."""
    m, t, gpus = s.model, s.training, s.num_gpus
    moe = m.moe
    out: list[Choice] = []
    rejected: list[Rejected] = []
    tps = knobs.values("tp", [x for x in _powers_of_two(min(MAX_DEGREE, domain))])
    cps = knobs.values(
        "cp", [x for x in _powers_of_two(MAX_DEGREE) if t.seq_len % (2 * x) == 0 or x == 1]
    )
    pps = knobs.values("pp", range(1, min(MAX_DEGREE, m.layers) + 1))
    schedules = knobs.values(
        "schedule", [name for name, _ in SCHEDULES + (MOE_SCHEDULES if moe else ())]
    )
    sched_v = [sv for sv in SCHEDULES + MOE_SCHEDULES if sv[0] in schedules]
    for name in schedules:  # a schedule the defaults do not list, from the registry
        if name not in {n for n, _ in sched_v}:
            sched = get_schedule(name)
            chunked = sched.chunks_per_stage(4) == 4  # its chunks follow virtual_stages
            sched_v += [(name, v) for v in ((2, 4) if chunked else (1,))]
    vs = knobs.values("virtual_stages", [])
    if vs:
        sched_v = sorted({(name, v) for name, _ in sched_v for v in vs})
    sps = knobs.values("sequence_parallel", [None])
    buckets = knobs.values("bucket_size", [None])
    for tp in tps:
        for cp in cps:
            for pp in pps:
                if gpus % (tp * cp * pp) or stage_split(m.layers, pp) is None:
                    continue
                dp = gpus // (tp * cp * pp)
                if "dp" in knobs.fixed and knobs.fixed["dp"] != dp:
                    continue
                if t.global_batch % dp:
                    rejected.append(
                        Rejected(
                            Choice(tp, pp, cp, 1, dp, 0, "1f1b", 1, "none"),
                            f"global batch {t.global_batch} does not split over dp = {dp}",
                        )
                    )
                    continue
                for ep, etp in _expert_degrees(s, knobs, tp, cp, dp):
                    for sp in sps if tp > 1 else [None]:
                        for bucket in buckets:
                            out += _variants(s, knobs, tp, pp, cp, ep, dp, etp, sp, bucket, sched_v)
    return out, rejected


def _expert_degrees(s: Scenario, knobs: Knobs, tp, cp, dp) -> list[tuple[int, int | None]]:
    """(ep, expert TP) pairs: every power-of-two EP that divides the experts, with the experts
    split over the attention's TP (expert TP None) and, under TP, folded with expert TP 1."""
    moe = s.model.moe
    if moe is None:
        return [(1, None)]
    out: list[tuple[int, int | None]] = []
    for e in knobs.values("ep", _powers_of_two(min(MAX_DEGREE, moe.experts))):
        if moe.experts % e:
            continue
        for etp in knobs.values("expert_tp", [None, 1] if tp > 1 else [None]):
            if etp is None or etp == tp:
                if (dp * cp) % e == 0:
                    out.append((e, None))
            elif (dp * cp * tp) % (e * etp) == 0 and tp % etp == 0:
                out.append((e, etp))
    return out


def _variants(s, knobs, tp, pp, cp, ep, dp, etp, sp, bucket, sched_v) -> list[Choice]:
    per_replica = s.training.global_batch // dp
    zeros = knobs.values("zero", (0, 1) if pp > 1 else (0, 1, 2, 3))
    if dp * cp == 1:
        zeros = [z for z in zeros if z == 0]  # nothing to shard over
    out = []
    for schedule, v in sched_v if pp > 1 else [("1f1b", 1)]:
        sched = get_schedule(schedule)
        for mb in knobs.values("micro_batch", MICRO_BATCHES):
            if per_replica % mb:
                continue
            if pp > 1 and sched.check(pp, per_replica // mb, v) is not None:
                continue
            if pp > 1 and _chunks_fail(sched, s.model.layers, pp, v):
                continue
            for zero in zeros:
                for rc in knobs.values("recompute", RECOMPUTE):
                    out.append(
                        Choice(tp, pp, cp, ep, dp, zero, schedule, mb, rc, etp, v, sp, bucket)
                    )
    return out


def _chunks_fail(sched, layers: int, pp: int, v: int) -> bool:
    first, last = stage_split(layers, pp) or (None, None)
    try:
        sched.chunk_sizes(layers, pp, v, first, last)
    except ValueError:
        return True
    return False
