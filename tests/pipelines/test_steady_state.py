"""Where each schedule's order repeats (pipelines.steady_state), against its closed form."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.pipelines import SteadyState, get_schedule, steady_state


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_1f1b_head_and_tail_are_p_micro_batches(p):
    # stage 0 runs F_0 .. F_{p-1} before its first backward (p - 1 warm-up forwards and the
    # first steady one) and B_{m-p} .. B_{m-1} after its last forward; with p = 1 the first
    # and last micro-batch (gradients started, gradients synchronised) are the head and tail
    m = 8 * p
    assert steady_state(get_schedule("1f1b"), p, m, 1) == SteadyState(p, 1, p)


def test_interleaved_head_rounds_up_to_whole_groups_of_p():
    # GPT-3 175B's plan: p = 16, v = 3, m = 192. Stage 0 runs 2(p - 1) + (v - 1)p = 62
    # warm-up forwards and one more before its first backward: virtual micro-batches 0..62,
    # i.e. micro-batches up to 16 + 62 mod 16 = 30; rounded up to the period p = 16: 32
    st = steady_state(get_schedule("interleaved"), 16, 192, 3)
    assert st == SteadyState(32, 16, 32)
    assert st.reduced == 96


def test_zb_h2_warm_up_is_longer():
    # ZB-H2 runs 2(p - r) - 1 forwards before stage r's first backward: stage 0, 2p - 1 = 7
    # at p = 4 (micro-batches 0..6), and its last 2p - 1 backwards after its last forward
    assert steady_state(get_schedule("zb-h2"), 4, 32, 1) == SteadyState(7, 1, 7)


@pytest.mark.parametrize("name", ["gpipe", "dualpipe"])
def test_schedules_without_a_repeating_order(name):
    assert steady_state(get_schedule(name), 4, 64, 1) is None


def test_no_repeat_unless_it_halves_the_micro_batches():
    # 1F1B at p = 4 needs 4 + 2 + 4 = 10 micro-batches: 20 is the least it halves
    assert steady_state(get_schedule("1f1b"), 4, 19, 1) is None
    assert steady_state(get_schedule("1f1b"), 4, 20, 1) == SteadyState(4, 1, 4)
    # interleaved: the reduced count must itself suit the schedule (a multiple of p)
    assert steady_state(get_schedule("interleaved"), 16, 16, 2) is None


@given(
    q=st.integers(1, 32),
    head_periods=st.integers(1, 8),
    tail_periods=st.integers(1, 8),
    m=st.integers(1, 4096),
)
def test_doubled_period_fits_and_leaves_out_whole_periods(q, head_periods, tail_periods, m):
    # the retry after a state that did not repeat (api._steady_state_retries): find_repeat needs
    # the micro-batches left out to be whole periods, and the retry must still halve them
    tried = SteadyState(head_periods * q, q, tail_periods * q)
    doubled = tried.doubled_period(m)
    if doubled is None:
        # only when no longer warm-up of whole new periods (the next is at most 2q longer)
        # fits in half the micro-batches with two new periods and the tail
        tail = tried.tail + (m - tried.tail) % (2 * q)
        assert tried.head + 2 * q + 2 * (2 * q) + tail > m // 2
        return
    assert doubled.period == 2 * q
    assert doubled.head % (2 * q) == 0 and tried.head < doubled.head <= 2 * tried.head
    assert tried.tail <= doubled.tail < tried.tail + 2 * q
    assert 2 * doubled.reduced <= m
    assert (m - doubled.reduced) % doubled.period == 0


def test_doubled_period_of_the_28b_pipeline():
    # 1F1B on 32 stages, 256 micro-batches: (32, 1, 32) did not repeat; four times the
    # warm-up runs 162 > 128 micro-batches; twice the period with a 64 warm-up runs 100
    tried = SteadyState(32, 1, 32)
    assert tried.longer_warm_up() == SteadyState(128, 1, 32)
    assert tried.doubled_period(256) == SteadyState(64, 2, 32)
    assert tried.doubled_period(144) == SteadyState(36, 2, 32)  # capped: 36 + 4 + 32 = 72
    assert tried.doubled_period(70) is None  # no warm-up past 32 fits in 35
