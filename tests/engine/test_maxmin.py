"""Max-min fair rates: feasible, and every class has a saturated bottleneck where it is largest."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=300, deadline=None)
@given(instances())
def test_segment_water_filling_is_the_general_one(inst):
    # Entries grouped by class (as the flow network lists them): the per-class reduceat and
    # the dropped frozen classes do the same float operations in the same order as the
    # masks of max_min_rates, so the rates agree exactly; the scratch arrays come back clean.
    flows, links, counts, n, cap = inst
    work = (np.zeros(cap.size, dtype=bool), np.empty(cap.size, dtype=np.intp))
    lengths = np.bincount(flows, minlength=n)
    got = max_min_rates_segments(lengths, links, counts, cap, work)
    assert got.tolist() == max_min_rates(flows, links, counts, n, cap).tolist()
    assert not work[0].any()
    assert max_min_rates_segments(lengths, links, counts, cap).tolist() == got.tolist()
