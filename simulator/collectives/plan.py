"""The plain data a collective algorithm produces: phases of concurrent transfers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Literal, NamedTuple

import numpy as np

Node = int | str
Kind = Literal[
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv"
]


class Transfer(NamedTuple):
    """``bytes_`` (B) from ``src`` to ``dst`` in each step of its phase. A named tuple: a
    1,024-rank tree plans 4,092 of them per size, made 2.5x faster than a frozen dataclass."""

    src: Node
    dst: Node
    bytes_: float


def transfers_of(src: Sequence[Node], dst: Sequence[Node], bytes_: Iterable[float]) -> tuple:
    """``Transfer(s, d, b)`` for each (s, d, b) of the three, made by ``tuple.__new__`` in C
    rather than the named tuple's Python-level ``__new__``: the same tuples, in half the time
    (a 1,024-rank tree's 4,092 per size). ``bytes_`` may be endless (``itertools.repeat``):
    ``src`` and ``dst``, of one length (ValueError otherwise), say how many."""
    if len(src) != len(dst):
        raise ValueError(f"{len(src)} sources for {len(dst)} destinations")
    return tuple(map(tuple.__new__, repeat(Transfer), zip(src, dst, bytes_, strict=False)))


class TransferArrays(Sequence):
    """Transfers of one size from ``src[i]`` to ``dst[i]`` (integer device arrays), as a
    sequence of :class:`Transfer`: a 1,024-rank tree's 2,046 per phase are made as tuples
    only if something reads them one by one, and the engine takes the arrays as they are
    (:meth:`arrays`). Equal to (and hashed as) the tuple of its transfers."""

    __slots__ = ("_src", "_dst", "_bytes", "_tuple")

    def __init__(self, src, dst, bytes_: float):
        if len(src) != len(dst):
            raise ValueError(f"{len(src)} sources for {len(dst)} destinations")
        for ends in (src, dst):  # shared (a tree's up and down phases, cached plans): fixed
            ends.flags.writeable = False
        self._src, self._dst, self._bytes = src, dst, float(bytes_)
        self._tuple: tuple | None = None

    def __reduce__(self):
        return TransferArrays, (self._src, self._dst, self._bytes)  # the tuples not carried

    def arrays(self):
        """(sources, destinations, bytes of each) as arrays, bytes as floats; the first two
        read-only (shared by the plans that hold them)."""
        return self._src, self._dst, np.full(len(self._src), self._bytes)

    def as_tuple(self) -> tuple:
        """The transfers as a tuple of :class:`Transfer` (made once, then kept)."""
        if self._tuple is None:
            self._tuple = transfers_of(self._src.tolist(), self._dst.tolist(), repeat(self._bytes))
        return self._tuple

    def __len__(self) -> int:
        return len(self._src)

    def __getitem__(self, i):
        return self.as_tuple()[i]

    def __iter__(self):
        return iter(self.as_tuple())

    def __add__(self, other) -> tuple:
        return self.as_tuple() + tuple(other)

    def __radd__(self, other) -> tuple:
        return tuple(other) + self.as_tuple()

    def __eq__(self, other) -> bool:
        if isinstance(other, TransferArrays):
            other = other.as_tuple()
        return isinstance(other, tuple) and self.as_tuple() == other

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        shown = ", ".join(f"{a}->{b}" for a, b in zip(self._src[:3], self._dst[:3], strict=True))
        more = ", ..." if len(self) > 3 else ""
        return f"TransferArrays({len(self)} of {self._bytes!r} B: {shown}{more})"


@dataclass(frozen=True)
class Phase:
    """Transfers that run concurrently, repeated ``steps`` times with the same pattern.

    A ring's 2(n-1) steps are one phase of ``steps`` = 2(n-1): every step moves the same bytes
    between the same neighbours, so the engine can rate the pattern once. Each step pays the
    flow's path latency once; ``latency_hops`` overrides that count for pipelined patterns (a
    tree reduces in chunks through ``depth`` levels: its bytes cross once, its latency depth
    times).

    ``ring``: the transfers form rings (or chains) that a chunk travels hop after hop, so each
    step pays the latency of the hop it is on, not the slowest hop's: the phase's latency is
    its count times the mean path latency of its transfers (a ring over 4 nodes of 8 GPUs pays
    the network latency on the 8 steps of 62 that cross it, NCCL's ring latency in
    ``tuning.cc``), where other phases pay the count times their slowest transfer's latency.

    ``fast_hops``: of the latency count, the hops a chunk makes on the phase's fastest
    transfers (a tree's chain inside each host, under the tree between hosts); the rest pay
    the slowest transfer's latency.

    ``lockstep``: the transfers come in consecutive runs of this many (0: none) that move in
    lockstep: a ring's (or a chain's) chunks pass every one of its hops in turn, so each hop
    carries the ring's bytes at the ring's pace, which its slowest hop sets; a hop cannot run
    ahead and finish early. The engine rates each run as one flow over all its hops.
    """

    transfers: tuple[Transfer, ...] | TransferArrays
    steps: int = 1
    latency_hops: int | None = None
    ring: bool = False
    fast_hops: int = 0
    lockstep: int = 0

    def __post_init__(self):
        n = self.lockstep
        if n and (len(self.transfers) % n or len({t.bytes_ for t in self.transfers}) > 1):
            raise ValueError(f"lockstep runs of {n} transfers need whole runs of equal bytes")

    @property
    def latency_count(self) -> int:
        return self.steps if self.latency_hops is None else self.latency_hops


@dataclass(frozen=True)
class CollectivePlan:
    """A collective decomposed: run ``phases`` one after another.

    ``efficiency`` is the fraction of link bandwidth the algorithm and its NCCL ``protocol``
    (LL, LL128 or Simple) turn into payload (see :mod:`simulator.collectives.nccl_tuning`); the
    engine divides bytes by it. ``base_latency_s`` (s) is NCCL's per-collective latency
    (:func:`simulator.collectives.nccl_tuning.base_latency_s`), paid once before the first
    phase, on top of the path latency every step pays. ``step_latency_s`` (s): NCCL's
    per-step latency of the protocol on a hop inside a host and on one across hosts
    (:func:`simulator.collectives.nccl_tuning.step_latency_us`), the least a step pays on such
    a hop.
    """

    kind: Kind
    algorithm: str
    group: tuple[int, ...]
    size_bytes: float
    phases: tuple[Phase, ...]
    efficiency: float = 1.0
    protocol: str = "Simple"
    base_latency_s: float = 0.0
    step_latency_s: tuple[float, float] = (0.0, 0.0)

    @property
    def bytes_sent(self) -> float:
        """Total bytes all transfers move (each step counted), before efficiency."""
        return sum(t.bytes_ * p.steps for p in self.phases for t in p.transfers)
