"""Pipeline schedules: the order in which each stage runs its forward (F), input-gradient (B)
and weight-gradient (W) passes of each (model chunk, micro-batch).

- GPipe: every F, then every B (each followed by its W).
- 1F1B (PipeDream-Flush): ``p - r - 1`` warm-up forwards on stage ``r``, then one F one B,
  then the remaining B's (Narayanan et al. 2021).
- Interleaved 1F1B: ``v`` model chunks per stage, Megatron-LM's order: virtual micro-batch
  ``k`` runs chunk ``(k mod pv) // p`` forward (``v - 1 -`` that backward) with
  ``2 (p - r - 1) + (v - 1) p`` warm-up forwards.
- ZB-H1 / ZB-H2 (Qi et al. 2024): B and W are separate passes and postponed W's fill the
  bubbles. ZB-H1 keeps 1F1B's F/B order and runs each stage's W's ``r`` backward passes late;
  ZB-H2 starts with ``2(p - r) - 1`` forwards and runs W's ``2r`` backward passes late. With
  passes of durations T_F, T_B >= T_W these reach the paper's bubbles exactly:
  (p-1)(T_F + T_B - T_W) for ZB-H1, and (p-1)(T_F + T_B - 2 T_W) per stage span for ZB-H2
  (which drops the optimizer's synchronisation, so consecutive steps overlap by the ramp).
  A stage then holds up to ``p`` (ZB-H1) or ``2p - 1`` (ZB-H2) micro-batches whose W is due.

An order is a list of ``(pass, chunk, micro_batch)`` with pass in "F", "B", "W".
"""

from __future__ import annotations

Pass = tuple[str, int, int]


def gpipe(p: int, r: int, m: int) -> list[Pass]:
    out: list[Pass] = [("F", 0, j) for j in range(m)]
    for j in range(m):
        out += [("B", 0, j), ("W", 0, j)]
    return out


def one_f_one_b(p: int, r: int, m: int) -> list[Pass]:
    warm = min(p - r - 1, m)
    out: list[Pass] = [("F", 0, j) for j in range(warm)]
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("B", 0, i), ("W", 0, i)]
    for i in range(m - warm, m):
        out += [("B", 0, i), ("W", 0, i)]
    return out


def interleaved(p: int, r: int, m: int, v: int) -> list[Pass]:
    total = m * v

    def chunk_mb(k: int, forward: bool) -> tuple[int, int]:
        c = (k % (p * v)) // p
        mb = (k // (p * v)) * p + k % p
        return (c if forward else v - 1 - c), mb

    warm = min(2 * (p - r - 1) + (v - 1) * p, total)
    out: list[Pass] = [("F", *chunk_mb(k, True)) for k in range(warm)]
    for i in range(total - warm):
        out.append(("F", *chunk_mb(warm + i, True)))
        c, mb = chunk_mb(i, False)
        out += [("B", c, mb), ("W", c, mb)]
    for i in range(total - warm, total):
        c, mb = chunk_mb(i, False)
        out += [("B", c, mb), ("W", c, mb)]
    return out


def _with_deferred_w(fb: list[Pass], m: int, delay: int) -> list[Pass]:
    """Insert W_j right after B_{j + delay}; the last ``delay`` W's close the order."""
    out: list[Pass] = []
    next_w = 0
    for x in fb:
        out.append(x)
        if x[0] == "B" and x[2] - delay >= 0:
            out.append(("W", x[1], x[2] - delay))
            next_w = x[2] - delay + 1
    return out + [("W", 0, j) for j in range(next_w, m)]


def _f_b_order(warm: int, m: int) -> list[Pass]:
    warm = min(warm, m)
    out: list[Pass] = [("F", 0, j) for j in range(warm)]
    for i in range(m - warm):
        out += [("F", 0, warm + i), ("B", 0, i)]
    return out + [("B", 0, i) for i in range(m - warm, m)]


def zb_h1(p: int, r: int, m: int) -> list[Pass]:
    """1F1B's forwards and input-gradients, each W postponed by r backward passes."""
    return _with_deferred_w(_f_b_order(p - r - 1, m), m, r)


def zb_h2(p: int, r: int, m: int) -> list[Pass]:
    """2(p - r) - 1 warm-up forwards, each W postponed by 2r backward passes."""
    return _with_deferred_w(_f_b_order(2 * (p - r) - 1, m), m, 2 * r)


def stage_orders(schedule: str, p: int, m: int, v: int = 1) -> list[list[Pass]]:
    """Every stage's order for ``schedule`` with ``p`` stages, ``m`` micro-batches and ``v``
    model chunks per stage."""
    builders = {"gpipe": gpipe, "1f1b": one_f_one_b, "zb-h1": zb_h1, "zb-h2": zb_h2}
    if schedule == "interleaved" and v > 1:
        return [interleaved(p, r, m, v) for r in range(p)]
    if schedule == "interleaved":
        schedule = "1f1b"
    try:
        build = builders[schedule]
    except KeyError:
        raise ValueError(f"unknown pipeline schedule {schedule!r}") from None
    return [build(p, r, m) for r in range(p)]
