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


def test_rank_groups_read_as_the_tuples_they_hold():
    import pickle

    import numpy as np

    from simulator.plan.grid import RankGroups

    g = RankGrid(dp=4, pp=2, cp=1, tp=2)
    tuples = g.other_groups(3, ("dp",), STAGE)
    groups = g.other_groups_array(3, ("dp",), STAGE)
    assert isinstance(groups, RankGroups) and groups.array.shape == (1, 4)
    assert list(groups) == tuples and groups == tuples and len(groups) == len(tuples)
    assert groups[0] == tuples[0] and groups[-1:] == tuples[-1:]
    assert hash(groups) == hash(RankGroups(groups.array.copy())) == hash(tuple(tuples))
    assert groups in {tuple(tuples)}  # equal to its tuple of tuples, and hashed as it
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(groups, protocol)) == groups
    assert RankGroups(np.zeros((0, 2), int)) == [] == RankGroups(np.zeros((0, 3), int))
    assert groups != [(0, 2, 4, 6)] and groups != (1, 2) and groups != [list(tuples[0])]
    with pytest.raises(TypeError):
        RankGroups([[0.5, 1.0]])  # ranks are integers: not truncated
    with pytest.raises(ValueError):
        groups.array[0, 0] = 99  # read-only: a copy set is shared by a graph's runs
    with pytest.raises(ValueError, match="shape"):
        RankGroups([1, 2, 3])
