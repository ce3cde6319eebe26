"""RankGrid.other_groups (the builder's symmetric copies of a grid group) against the definition:
every group over ``dims`` whose ranks lie in ``rank``'s stage, by first rank, its own left out."""

import pytest

from simulator.plan.grid import DIMS, RankGrid

STAGE = ("tp", "cp", "dp")


@pytest.mark.parametrize("order", [DIMS, ("tp", "pp", "cp", "dp"), ("dp", "tp", "cp", "pp")])
@pytest.mark.parametrize("dims", [("tp",), ("cp",), ("dp", "cp")])
def test_other_groups_are_the_stage_groups_but_its_own(order, dims):
    g = RankGrid(dp=3, pp=2, cp=2, tp=4, order=order)
    for rank in range(g.size):
        stage = set(g.group(rank, *STAGE))
        own = g.group(rank, *dims)
        expected = [x for x in g.groups(*dims) if set(x) <= stage and x != own]
        got = g.other_groups(rank, dims, STAGE)
        assert got == expected
        # with its own group, the stage's ranks exactly once
        assert sorted(r for x in got + [own] for r in x) == sorted(stage)
