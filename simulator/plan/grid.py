"""The rank grid DP x PP x CP x TP, its process groups, and placement on devices.

Ranks are laid out in ``order``, innermost first (default tp, cp, pp, dp as Llama 3 does):
``rank = tp + TP (cp + CP (pp + PP dp))``. Devices are numbered host by host, so with TP
innermost a tensor-parallel group fills one NVLink domain. Expert parallelism is carved out of
DP x CP (Megatron-LM): an EP group is ``ep`` consecutive data-parallel indices with the same
tp and pp coordinates; the expert-data-parallel group links the EP groups' equals.

With an expert tensor-parallel degree ``etp`` other than ``tp`` the MoE layers fold their own
grid over each stage's ranks (Megatron-core's "MoE parallel folding", Liu et al. 2025,
arXiv:2504.14960; its expert rank generator lays out ``tp-ep-dp``, ``tp`` being the expert
TP): a stage's ranks in the order tp, then (dp, cp) flattened as above, are cut into expert-TP
groups of ``etp`` consecutive ones, ``ep`` consecutive expert-TP groups make an EP group (its
members the same place in each), and the expert-data-parallel group is the rest. With ``etp``
= ``tp`` this is the layout above, rank for rank.

>>> g = RankGrid(dp=2, pp=2, cp=1, tp=4)
>>> g.rank(tp=1, cp=0, pp=1, dp=1), g.group(5, "tp"), g.group(5, "dp")
(13, (4, 5, 6, 7), (5, 13))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

DIMS = ("tp", "cp", "pp", "dp")


class RankGroups(Sequence):
    """Groups of ranks of one size as the rows of an (n, width) int64 array, read as the
    tuple of tuples it stands for (iteration, indexing, ``len``, ``==`` and ``hash`` as that
    tuple's): a 16,384-GPU job's 8,191 pipeline pairs of a stage, or its 1,023 other TP
    groups, made, checked and routed as arrays (:attr:`array`) without a tuple per group.
    Read-only; integers only."""

    __slots__ = ("array",)

    def __init__(self, array) -> None:
        a = np.asarray(array)
        if a.size and a.dtype.kind not in "iu":
            raise TypeError(f"RankGroups takes integer ranks, not {a.dtype}")
        a = np.array(a, dtype=np.int64)
        if a.ndim != 2:
            raise ValueError(f"RankGroups takes an (n, width) array, not shape {a.shape}")
        a.setflags(write=False)
        self.array = a

    def __len__(self) -> int:
        return self.array.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return RankGroups(self.array[i])
        return tuple(self.array[i].tolist())

    def __iter__(self):
        return map(tuple, self.array.tolist())

    def __eq__(self, other) -> bool:
        if isinstance(other, RankGroups):
            if len(self) != len(other):
                return False
            return len(self) == 0 or (
                self.array.shape == other.array.shape and bool((self.array == other.array).all())
            )
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)  # [(0, 1)] == [[0, 1]] is False, as for tuples
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # the tuple of tuples', as == says they are equal

    def __repr__(self) -> str:
        n, width = self.array.shape
        return f"RankGroups({n} groups of {width})"

    def __reduce__(self):
        return RankGroups, (self.array,)


@dataclass(frozen=True)
class RankGrid:
    """Degrees of each dimension, ``ep`` within ``dp x cp``, and the layout ``order``."""

    dp: int
    pp: int
    cp: int
    tp: int
    ep: int = 1
    order: tuple[str, ...] = DIMS
    etp: int | None = None  # expert tensor parallelism; None: tp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def size(self) -> int:
        return self.dp * self.pp * self.cp * self.tp

    def _degree(self, dim: str) -> int:
        return getattr(self, dim)

    @cached_property
    def _strides(self) -> dict[str, int]:
        """Each dimension's stride in the rank numbering, computed once (the builder asks
        tens of thousands of times)."""
        out, mul = {}, 1
        for dim in self.order:
            out[dim] = mul
            mul *= self._degree(dim)
        return out

    def stride(self, dim: str) -> int:
        """How far apart two ranks one step apart in ``dim`` are."""
        return self._strides[dim]

    def coord(self, rank: int, dim: str) -> int:
        """``rank``'s coordinate in ``dim``."""
        return (rank // self._strides[dim]) % self._degree(dim)

    def coord_of_every_rank(self, dim: str) -> np.ndarray:
        """:meth:`coord` of ranks ``0 .. size - 1`` in ``dim``, as one array (16K ranks at
        numpy speed)."""
        return (np.arange(self.size) // self._strides[dim]) % self._degree(dim)

    def coords(self, rank: int) -> dict[str, int]:
        st = self._strides
        return {dim: (rank // st[dim]) % self._degree(dim) for dim in self.order}

    def rank(self, **coords: int) -> int:
        st = self._strides
        return sum(coords[dim] * st[dim] for dim in self.order)

    def group(self, rank: int, *dims: str) -> tuple[int, ...]:
        """Ranks that differ from ``rank`` only in ``dims``, ascending."""
        if math.prod(self._degree(d) for d in dims) > 256:  # a stage of 8K ranks: numpy
            return tuple(self.group_array(rank, *dims).tolist())
        st = self._strides
        c = self.coords(rank)
        base = rank - sum(c[d] * st[d] for d in dims)
        offsets = [0]
        for d in dims:
            offsets = [o + i * st[d] for o in offsets for i in range(self._degree(d))]
        return tuple(sorted(base + o for o in offsets))

    def group_array(self, rank: int, *dims: str) -> np.ndarray:
        """:meth:`group` as an array of ranks (int64), ascending."""
        st = self._strides
        c = self.coords(rank)
        offsets = np.zeros(1, np.int64)
        for d in dims:
            offsets = (offsets[:, None] + np.arange(self._degree(d)) * st[d]).ravel()
        return np.sort(rank - sum(c[d] * st[d] for d in dims) + offsets)

    def groups(self, *dims: str) -> list[tuple[int, ...]]:
        """Every group over ``dims``, each once, ordered by its first rank.

        The groups partition the ranks, so a rank already in a found group is skipped: one
        :meth:`group` call per group, not per rank (16K calls on 16K ranks otherwise), and
        the first rank not yet covered is the first of its group.
        """
        covered: set[int] = set()
        out: list[tuple[int, ...]] = []
        for r in range(self.size):
            if r not in covered:
                g = self.group(r, *dims)
                covered.update(g)
                out.append(g)
        return out

    def other_groups(self, rank: int, dims: tuple[str, ...], within: tuple[str, ...]):
        """Every group over ``dims`` among the ranks that differ from ``rank`` only in
        ``within`` (a superset of ``dims``), except ``rank``'s own: each a tuple of ascending
        ranks, ordered by their first rank (as :meth:`groups` orders them).

        From the strides, without a :meth:`group` call per group: a group is its first rank
        (all ``dims`` coordinates zero) plus the offsets of ``dims``; 1,024 groups of a
        16,384-rank grid cost one list each."""
        return list(self.other_groups_array(rank, dims, within))

    def other_groups_array(
        self, rank: int, dims: tuple[str, ...], within: tuple[str, ...]
    ) -> RankGroups:
        """:meth:`other_groups` as :class:`RankGroups` (one array, no tuple per group)."""
        st = self._strides
        c = self.coords(rank)
        own = rank - sum(c[d] * st[d] for d in dims)  # the first rank of rank's own group
        firsts = self.group_array(own, *(d for d in within if d not in dims))  # ascending
        offsets = self.group_array(0, *dims)  # ascending: the group of rank 0
        return RankGroups(np.add.outer(firsts[firsts != own], offsets))

    def _position(self, rank: int) -> tuple[int, dict[str, int]]:
        """``rank``'s place among its stage's ranks in the expert layers' order: tp
        innermost, then (dp, cp) flattened, cp inner (module doc); and its coordinates."""
        c = self.coords(rank)
        return c["tp"] + self.tp * (c["dp"] * self.cp + c["cp"]), c

    def _at(self, pos: int, pp: int) -> int:
        """The rank at expert-layer place ``pos`` of stage ``pp`` (:meth:`_position`)."""
        flat, tp = divmod(pos, self.tp)
        return self.rank(tp=tp, pp=pp, dp=flat // self.cp, cp=flat % self.cp)

    def expert_tp_group(self, rank: int) -> tuple[int, ...]:
        """The expert tensor-parallel group: ``etp`` consecutive expert-layer places of
        ``rank``'s stage (its TP group when ``etp`` = ``tp``), ascending."""
        pos, c = self._position(rank)
        etp = self.expert_tp
        start = pos - pos % etp
        return tuple(sorted(self._at(p, c["pp"]) for p in range(start, start + etp)))

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """The expert-parallel group: ``rank``'s place in each of ``ep`` consecutive
        expert-TP groups of its stage; with ``etp`` = ``tp``, ``ep`` consecutive (dp, cp)
        positions with the same tp and pp."""
        pos, c = self._position(rank)
        etp = self.expert_tp
        block = etp * self.ep
        start = pos - pos % block + pos % etp
        return tuple(self._at(start + j * etp, c["pp"]) for j in range(self.ep))

    def expert_dp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks holding the same experts: the same place in every EP group of the stage."""
        pos, c = self._position(rank)
        block = self.expert_tp * self.ep
        places = range(pos % block, self.tp * self.cp * self.dp, block)
        return tuple(self._at(p, c["pp"]) for p in places)
