"""ZB-1p and ZB-2p (the zero-bubble paper's searched schedules) against the hand-crafted
schedules' closed forms (Qi et al. 2024, Table 2), their memory caps, and a replay of the
orders that checks the search's own timing."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.pipelines import PassTimes, get_schedule, passes, peak_held
from simulator.pipelines.zb_auto import search


def _replay(orders, t: PassTimes) -> float:
    """Longest stage span when each stage runs its order as early as its inputs allow (F after
    the previous stage's F plus the trip, B after the next stage's B plus the trip, W after
    the stage's own B, which the order puts before it). Fails on an order that deadlocks."""
    p = len(orders)
    end: dict = {}
    at = [0] * p
    free = [0.0] * p
    cost = {"F": t.f, "B": t.b, "W": t.w}
    while any(at[j] < len(orders[j]) for j in range(p)):
        moved = False
        for j in range(p):
            while at[j] < len(orders[j]):
                kind, _, i = orders[j][at[j]]
                source = None  # the other stage's pass this one waits for
                if kind == "F" and j > 0:
                    source = ("F", j - 1, i)
                elif kind == "B" and j < p - 1:
                    source = ("B", j + 1, i)
                ready = free[j]
                if source is not None:
                    if source not in end:
                        break
                    ready = max(ready, end[source] + t.comm)
                free[j] = end[(kind, j, i)] = ready + cost[kind][j]
                at[j] += 1
                moved = True
        assert moved, "the orders deadlock"
    m = max(i for (_, _, i) in end) + 1
    return max(end[("W", j, m - 1)] - end[("F", j, 0)] + t.f[j] for j in range(p))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 24)])
def test_unit_passes_give_the_hand_crafted_bubbles(p, m):
    # Table 2 with T_F = T_B = T_W = 1: ZB-H2's bubble (p - 1)(T_F + T_B - 2 T_W) = 0,
    # ZB-H1's (p - 1)(T_F + T_B - T_W) = p - 1; the searches find the same (m >= p).
    unit = PassTimes.uniform(p)
    assert search(p, m, unit, 2 * p)[1] == 3 * m
    assert search(p, m, unit, p)[1] == 3 * m + p - 1


@pytest.mark.parametrize("p,m", [(4, 8), (4, 16), (8, 24)])
def test_a_short_weight_gradient_is_used_better_than_by_hand(p, m):
    # W half as long as F and B: ZB-H2 leaves (p - 1)(F + B - 2W) = p - 1 idle, ZB-H1
    # (p - 1)(F + B - W); the search does better than the first and as well as the second.
    t = PassTimes((1.0,) * p, (1.0,) * p, (0.5,) * p)
    work = 2.5 * m
    assert search(p, m, t, 2 * p)[1] < work + (p - 1) * 1.0
    assert search(p, m, t, p)[1] == pytest.approx(work + (p - 1) * 1.5, rel=1e-12)


durations = st.floats(0.2, 3.0, allow_nan=False)


@st.composite
def _cases(draw):
    p = draw(st.integers(2, 6))
    stages = st.lists(durations, min_size=p, max_size=p).map(tuple)
    t = PassTimes(draw(stages), draw(stages), draw(stages), draw(st.floats(0.0, 0.5)))
    return p, draw(st.integers(1, 3 * p + 3)), t, draw(st.sampled_from([1, 2]))


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_orders_are_whole_capped_and_replay_to_the_searched_span(case):
    # per-stage durations and fewer micro-batches than stages included (review finding: the
    # equal-duration draws never reached the warm-up clamp or uneven end stages)
    p, m, t, pending = case
    orders, span = search(p, m, t, pending * p)
    for order in orders:
        flat = list(passes(order))
        assert sorted(flat) == sorted((k, 0, i) for k in "FBW" for i in range(m))
        assert peak_held(order, lambda c: 1.0) <= pending * p
    # the search placed each pass as early as its order allows: replaying gives its span
    assert _replay(orders, t) == pytest.approx(span, rel=1e-9)


# The authors' heuristic (sail-sg/zero-bubble-pipeline-parallelism, megatron/core/
# pipeline_parallel/auto_schedule.py at 6229e79: Graph.manual_order over the eight settings of
# initial_solution) run on these per-stage durations with our memory model (mem_f 1, mem_b 0,
# mem_w -1, max_mem the cap): its best span and each stage's order, transcribed. A change to
# any of the search's rules moves some of them (review finding: five such changes passed
# every other test here).
GOLDEN = [
    (
        (4, 8, (1.0, 1.3, 1.3, 1.7), (1.2, 1.5, 1.5, 2.0), (0.8, 1.0, 1.0, 0.9), 0.1, 8),
        38.8,
        [
            "F0F1F2F3F4F5F6F7B0W0B1W1B2W2B3W3B4W4B5W5B6W6B7W7",
            "F0F1F2F3F4F5B0F6W0B1F7W1B2W2B3W3B4W4B5W5B6W6B7W7",
            "F0F1F2F3B0F4W0B1F5W1B2F6W2B3F7W3B4W4B5W5B6W6B7W7",
            "F0B0F1B1F2B2F3B3F4B4F5B5F6B6F7B7W0W1W2W3W4W5W6W7",
        ],
    ),
    (
        (4, 8, (1.0, 1.3, 1.3, 1.7), (1.2, 1.5, 1.5, 2.0), (0.8, 1.0, 1.0, 0.9), 0.1, 4),
        42.4,
        [
            "F0F1F2F3B0W0F4B1W1F5B2W2F6B3W3F7B4W4B5W5B6W6B7W7",
            "F0F1F2B0F3W0B1F4W1B2F5W2B3F6W3B4F7W4B5W5B6W6B7W7",
            "F0F1B0F2W0B1F3W1B2F4W2B3F5W3B4F6W4B5F7W5B6W6B7W7",
            "F0B0F1B1F2B2F3B3W0F4B4W1F5B5W2F6B6W3F7B7W4W5W6W7",
        ],
    ),
    (
        (
            6,
            4,
            (0.7, 1.0, 1.1, 1.0, 1.0, 1.4),
            (0.9, 1.2, 1.2, 1.3, 1.2, 1.6),
            (0.5, 0.6, 0.7, 0.6, 0.6, 0.5),
            0.05,
            12,
        ),
        23.6,
        ["F0F1F2F3B0W0B1W1B2W2B3W3"] * 5 + ["F0B0F1B1F2B2F3B3W0W1W2W3"],
    ),
    (
        (
            5,
            12,
            (2.0, 2.5, 2.5, 2.5, 3.0),
            (2.2, 2.6, 2.6, 2.6, 3.5),
            (1.0, 1.9, 1.9, 1.9, 1.2),
            0.3,
            10,
        ),
        103.3,
        [
            "F0F1F2F3F4F5F6F7F8F9B0W0F10B1W1B2F11W2B3W3B4W4B5W5B6W6B7W7B8W8B9W9B10W10B11W11",
            "F0F1F2F3F4F5F6F7B0F8W0B1W1B2F9W2B3W3B4F10W4B5F11W5B6W6B7W7B8W8B9W9B10W10B11W11",
            "F0F1F2F3F4F5B0F6W0B1F7W1B2F8W2B3W3B4F9W4B5F10W5B6F11W6B7W7B8W8B9W9B10W10B11W11",
            "F0F1F2B0F3W0B1F4W1B2F5W2B3W3B4F6W4B5F7W5B6F8W6B7F9W7B8F10W8B9F11W9B10W10B11W11",
            "F0B0F1B1F2B2F3B3F4B4F5B5F6B6F7B7W0F8B8F9B9F10B10W1F11B11W2W3W4W5W6W7W8W9W10W11",
        ],
    ),
    (  # the first stage, all its forwards done, runs its postponed W's before its next B
        (3, 7, (1.3, 1.1, 1.4), (1.4, 0.6, 0.5), (1.3, 0.6, 0.6), 0.3, 6),
        28.0,
        [
            "F0F1F2F3F4F5B0B1B2W0F6W1W2B3W3B4W4B5W5B6W6",
            "F0F1F2F3B0B1F4W0B2F5B3W1W2W3F6B4B5W4W5B6W6",
            "F0B0F1B1F2B2F3B3F4B4F5B5W0W1W2W3F6B6W4W5W6",
        ],
    ),
]


@pytest.mark.parametrize("case,span,orders", GOLDEN)
def test_the_authors_heuristic_on_uneven_stages(case, span, orders):
    p, m, f, b, w, comm, cap = case
    got, got_span = search(p, m, PassTimes(f, b, w, comm), cap)
    assert got_span == pytest.approx(span, rel=1e-12)
    assert ["".join(f"{k}{i}" for k, _, i in o) for o in got] == orders


def test_uneven_stages_and_the_trip_between_them():
    # the 6.2B model of Qi et al.: lighter end stages, W shorter than B (ms per micro-batch)
    p, m = 8, 24
    t = PassTimes(
        (18.2,) + (24.3,) * 6 + (25.0,),
        (20.0,) + (26.6,) * 6 + (32.7,),
        (17.0,) + (22.7,) * 6 + (17.0,),
        0.1,
    )
    orders, span = search(p, m, t, 2 * p)
    work = m * max(f + b + w for f, b, w in zip(t.f, t.b, t.w, strict=True))
    hand = {k: _replay(get_schedule(k).orders(p, m, 1), t) for k in ("zb-h1", "zb-h2", "1f1b")}
    # searched for these durations: no worse than the hand-crafted orders run on them
    # (ZB-2p 1,883 against ZB-H2's 1,913; ZB-1p ties ZB-H1), above the busiest stage's work
    assert work < span < hand["zb-h2"]
    assert work < search(p, m, t, p)[1] <= hand["zb-h1"] < hand["1f1b"]
    assert _replay(orders, t) == pytest.approx(span, rel=1e-9)


def test_registry_schedules_search_unit_passes_and_take_times():
    s = get_schedule("zb-2p")
    assert s.times is None and s.needs_times
    assert s.orders(4, 8, 1) == [list(o) for o in search(4, 8, PassTimes.uniform(4), 8)[0]]
    timed = s.with_times(PassTimes((1.0,) * 4, (1.0,) * 4, (0.5,) * 4))
    assert timed != s and timed == s.with_times(timed.times)
    assert timed.orders(4, 8, 1) != s.orders(4, 8, 1)
    with pytest.raises(ValueError, match="3 stages given to a 4-stage"):
        get_schedule("zb-1p").with_times(PassTimes.uniform(3)).orders(4, 8, 1)
    assert "virtual_stages" in s.check(4, 8, 2)
    # a search too long to run each time a plan is made is refused up front, with the bound
    assert s.check(16, 2**13, 1) is None and "131,072" in s.check(16, 2**13 + 1, 1)


@pytest.mark.parametrize(
    "f,b,w,comm",
    [
        ((1.0, math.inf), (1.0, 1.0), (1.0, 1.0), 0.0),
        ((1.0, 1.0), (1.0, math.nan), (1.0, 1.0), 0.0),
        ((1.0, 1.0), (1.0, 1.0), (-0.5, 1.0), 0.0),
        ((1.0, 1.0), (1.0, 1.0), (1.0, 1.0), math.inf),
    ],
)
def test_pass_times_must_be_finite_and_non_negative(f, b, w, comm):
    # the search keeps the stages' longest wait as it grows: an inf pass makes inf - inf a
    # NaN wait, on which that and max() over the waits disagree (a reviewer's case)
    with pytest.raises(ValueError, match="finite and non-negative"):
        PassTimes(f, b, w, comm)
