"""Max-min fair rates: feasible, and every class has a saturated bottleneck where it is largest."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import maxmin
from simulator.engine.maxmin import max_min_rates, max_min_rates_lists, max_min_rates_segments


@st.composite
def instances(draw):
    n_links = draw(st.integers(1, 8))
    n_flows = draw(st.integers(1, 10))
    cap = np.array(draw(st.lists(st.floats(1.0, 1e3), min_size=n_links, max_size=n_links)))
    flows, links, counts = [], [], []
    for f in range(n_flows):
        used = draw(
            st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True)
        )
        for e in used:
            flows.append(f)
            links.append(e)
            counts.append(draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0])))
    return np.array(flows), np.array(links), np.array(counts), n_flows, cap


@settings(max_examples=300, deadline=None)
@given(instances())
def test_max_min_fair(inst):
    flows, links, counts, n, cap = inst
    rates = max_min_rates(flows, links, counts, n, cap)
    load = np.bincount(links, weights=counts * rates[flows], minlength=cap.size)
    assert np.all(load <= cap * (1 + 1e-9))  # no link carries more than its capacity
    saturated = load >= cap * (1 - 1e-9)
    for f in range(n):
        mine = links[flows == f]
        # A bottleneck: a saturated link on which no class gets more than f does.
        ok = False
        for e in mine:
            if saturated[e] and rates[flows[links == e]].max() <= rates[f] * (1 + 1e-9):
                ok = True
        assert ok, f"class {f} could grow"


def test_copies_share_as_individual_flows():
    # A class of 3 copies on a link beside 1 single flow: 4 equal shares.
    rates = max_min_rates(
        np.array([0, 1]), np.array([0, 0]), np.array([3.0, 1.0]), 2, np.array([8.0])
    )
    assert rates.tolist() == [2.0, 2.0]


@settings(max_examples=300, deadline=None)
@given(instances())
def test_plain_python_water_filling_is_the_numpy_one(inst):
    # The engine picks either by size; both do the same float operations in the same order,
    # so they agree exactly, not just to a tolerance.
    flows, links, counts, n, cap = inst
    per_class = [np.nonzero(flows == f)[0] for f in range(n)]
    rates = max_min_rates_lists(
        [links[i].tolist() for i in per_class], [counts[i].tolist() for i in per_class], cap
    )
    assert rates == max_min_rates(flows, links, counts, n, cap).tolist()


@pytest.mark.parametrize("dense_at", [maxmin.DENSE_AT, 0])
@settings(max_examples=300, deadline=None)
@given(inst=instances())
def test_segment_water_filling_is_the_general_one(inst, dense_at):
    # Entries grouped by class (as the flow network lists them): the per-class reduceat and
    # the dropped frozen classes do the same float operations in the same order as the
    # masks of max_min_rates, so the rates agree exactly; the scratch arrays come back clean.
    # With the first round over every link id tried first (these few links: always), and
    # without it (dense_at 0: the links numbered from the first round).
    flows, links, counts, n, cap = inst
    work = (np.zeros(cap.size, dtype=bool), np.empty(cap.size, dtype=np.intp))
    lengths = np.bincount(flows, minlength=n)
    kept, maxmin.DENSE_AT = maxmin.DENSE_AT, dense_at
    try:
        got = max_min_rates_segments(lengths, links, counts, cap, work)
        assert got.tolist() == max_min_rates(flows, links, counts, n, cap).tolist()
        assert not work[0].any()
        assert max_min_rates_segments(lengths, links, counts, cap).tolist() == got.tolist()
    finally:
        maxmin.DENSE_AT = kept


def test_a_one_round_filling_over_many_links_is_the_general_one():
    """As a tree's copies: 2,000 classes over 30,000 of 40,000 links, each crossing one link
    all share (its level is every class's) and others of its own or a few classes':
    found in the first round over link ids, the same rates to the bit; and a filling with
    two levels, which that round declines."""
    rng = np.random.default_rng(7)
    n, n_links = 2_000, 40_000
    own = [np.unique(rng.choice(np.arange(1, 30_000), size=15)) for _ in range(n)]
    per_class = [np.concatenate([[0], r]) for r in own]
    links = np.concatenate(per_class)
    lengths = np.array([r.size for r in per_class])
    flows = np.repeat(np.arange(n), lengths)
    counts = rng.choice([1.0, 2.0], size=links.size)
    cap = np.full(n_links, 4e10)
    assert links.size * maxmin.DENSE_AT >= n_links
    assert maxmin._one_round_level(lengths, links, counts, cap) is not None
    got = max_min_rates_segments(lengths, links, counts, cap)
    assert got.tolist() == max_min_rates(flows, links, counts, n, cap).tolist()
    cap[0] = 1e15  # the shared link no longer binds: levels per the other links
    assert maxmin._one_round_level(lengths, links, counts, cap) is None
    got = max_min_rates_segments(lengths, links, counts, cap)
    assert got.tolist() == max_min_rates(flows, links, counts, n, cap).tolist()
    assert len(set(got.tolist())) > 1
