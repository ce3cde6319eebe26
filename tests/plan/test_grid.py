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


def _old_ep_group(g: RankGrid, rank: int) -> tuple[int, ...]:
    """The EP group as defined before expert TP could differ from TP: ``ep`` consecutive
    (dp, cp) positions with the same tp and pp (Megatron-LM's layout with expert TP = TP)."""
    c = g.coords(rank)
    flat = c["dp"] * g.cp + c["cp"]
    start = flat - flat % g.ep
    return tuple(
        g.rank(tp=c["tp"], pp=c["pp"], dp=f // g.cp, cp=f % g.cp)
        for f in range(start, start + g.ep)
    )


def _old_expert_dp_group(g: RankGrid, rank: int) -> tuple[int, ...]:
    c = g.coords(rank)
    flat = c["dp"] * g.cp + c["cp"]
    return tuple(
        g.rank(tp=c["tp"], pp=c["pp"], dp=f // g.cp, cp=f % g.cp)
        for f in range(flat % g.ep, g.dp * g.cp, g.ep)
    )


@pytest.mark.parametrize("order", [DIMS, ("tp", "pp", "cp", "dp"), ("dp", "tp", "cp", "pp")])
@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_groups_with_expert_tp_equal_to_tp_are_the_unfolded_layout(order, ep):
    """With etp = tp the folded layout is the one it generalises, rank for rank, order kept."""
    for etp in (None, 2):
        g = RankGrid(dp=4, pp=2, cp=2, tp=2, ep=ep, order=order, etp=etp)
        for r in range(g.size):
            assert g.ep_group(r) == _old_ep_group(g, r)
            assert g.expert_dp_group(r) == _old_expert_dp_group(g, r)
            assert g.expert_tp_group(r) == g.group(r, "tp")


@pytest.mark.parametrize(
    "tp, cp, dp, etp, ep", [(4, 1, 8, 1, 8), (4, 1, 8, 2, 4), (8, 2, 2, 2, 4), (2, 1, 4, 4, 2)]
)
def test_folded_expert_groups_partition_each_stage(tp, cp, dp, etp, ep):
    """MoE parallel folding: within each stage, expert-TP groups of etp, EP groups of ep and
    expert-DP groups of tp x cp x dp / (etp x ep) each partition the stage's ranks; an EP
    group takes one rank of each of ep expert-TP groups, an expert-DP group one of each EP
    group's equal places; and the three together name each rank once (etp x ep x edp)."""
    g = RankGrid(dp=dp, pp=2, cp=cp, tp=tp, ep=ep, etp=etp)
    edp = tp * cp * dp // (etp * ep)
    for stage in range(2):
        ranks = sorted(r for r in range(g.size) if g.coord(r, "pp") == stage)
        for kind, size in (("expert_tp_group", etp), ("ep_group", ep), ("expert_dp_group", edp)):
            groups = {getattr(g, kind)(r) for r in ranks}
            assert all(len(x) == size for x in groups), kind
            assert sorted(itertools.chain(*groups)) == ranks, kind  # a partition of the stage
        for r in ranks:
            etp_g, ep_g, edp_g = g.expert_tp_group(r), g.ep_group(r), g.expert_dp_group(r)
            assert set(etp_g) & set(ep_g) == {r} and set(ep_g) & set(edp_g) == {r}
            assert len({g.expert_tp_group(x) for x in ep_g}) == ep  # one per expert-TP group


def test_folded_expert_parallel_fills_a_node():
    """Mixtral-style folding on 8-GPU nodes (tp 4, expert TP 1, EP 8): ranks are numbered
    tp innermost, so an EP group is two TP groups' ranks, GPUs 0-7 of one node, where with
    expert TP = TP it would take one rank of each of 8 TP groups across 4 nodes."""
    folded = RankGrid(dp=8, pp=1, cp=1, tp=4, ep=8, etp=1)
    assert folded.ep_group(5) == tuple(range(8))
    assert folded.expert_tp_group(5) == (5,)
    assert folded.expert_dp_group(5) == (5, 13, 21, 29)
    plain = RankGrid(dp=8, pp=1, cp=1, tp=4, ep=8)
    assert plain.ep_group(5) == (1, 5, 9, 13, 17, 21, 25, 29)
