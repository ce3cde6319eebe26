"""RankGrid.groups: the partition the definition gives (a group per rank, deduplicated)."""

import itertools

import pytest

from simulator.plan.grid import DIMS, RankGrid


@pytest.mark.parametrize("order", [DIMS, ("tp", "pp", "cp", "dp"), ("dp", "tp", "cp", "pp")])
@pytest.mark.parametrize("dims", [("tp",), ("dp",), ("dp", "cp"), ("tp", "cp", "dp"), ("pp",)])
def test_groups_are_each_ranks_group_once_by_first_rank(order, dims):
    g = RankGrid(dp=3, pp=2, cp=2, tp=4, order=order)
    expected = sorted({g.group(r, *dims) for r in range(g.size)})
    assert g.groups(*dims) == expected
    # a partition: every rank exactly once
    assert sorted(itertools.chain(*g.groups(*dims))) == list(range(g.size))
