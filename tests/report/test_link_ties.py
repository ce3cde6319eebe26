"""Equally loaded links are picked by name, not by how the topology numbered them."""

import numpy as np
import pandas as pd

from simulator.metrics import link_utilisation
from simulator.report.plots import most_utilised_per_level

# two leaf -> NIC links of equal load (a spread loads its links alike), a lighter one, and
# NVLink links of another level
LOAD = {
    "leaf0.4->nic4": 0.5,
    "leaf0.0->nic8": 0.5,
    "leaf0.1->nic9": 0.25,
    "nvswitch0->0": 0.75,
    "nvswitch1->9": 0.75,
}


def test_the_busiest_of_equals_is_the_first_by_name_whatever_the_order():
    names = list(LOAD)
    for order in (names, names[::-1], names[2:] + names[:2]):
        picked = most_utilised_per_level(pd.Series({n: LOAD[n] for n in order}), per_level=1)
        assert picked == ["nvswitch0->0", "leaf0.0->nic8"]


def test_the_top_links_by_bytes_break_ties_by_name():
    names = list(LOAD)
    loads = np.array([LOAD[n] for n in names]) * 1e9
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 0, 3, 2, 4]):
        frame = link_utilisation(
            [(0.0, [])], loads[perm], np.ones(5), [names[i] for i in perm], 1.0, top=3
        )
        assert frame["link"].tolist() == ["nvswitch0->0", "nvswitch1->9", "leaf0.0->nic8"]
