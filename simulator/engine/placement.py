"""Where ranks run, as mappings that need no entry per rank.

A run places rank ``r`` on the topology's ``r``-th device, and the topologies number their
devices ``0 .. n-1``: rank ``r`` on device ``r``. A 16,384-GPU job's placement as a dict is
16K entries built, read back and checked in every run (about 5 ms of a 0.1 s step at DP
1,024); :class:`RanksOnDevices` says the same in one integer. :class:`DeviceLabels` is a
device -> label mapping held as two arrays (the orbit labels of a symmetric run, which
:mod:`simulator.engine.orbits` reads as the arrays). Both are read-only ``Mapping``\\ s that
compare equal to the dicts they stand for, so code that takes a dict takes them too.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping

import numpy as np


class RanksOnDevices(Mapping):
    """Rank ``r`` on device ``r`` for ``r`` in ``0 .. n-1`` (KeyError for any other)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"a placement of {n} ranks")
        self.n = n

    def __getitem__(self, rank) -> int:
        try:  # any key a dict of int keys would find: ints, numpy ints, bools, 2.0
            r = operator.index(rank)
        except TypeError:
            if not (isinstance(rank, float) and rank.is_integer()):
                raise KeyError(rank) from None
            r = int(rank)
        if 0 <= r < self.n:
            return r
        raise KeyError(rank)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n

    def __eq__(self, other) -> bool:
        if isinstance(other, RanksOnDevices):
            return self.n == other.n
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # as a dict's

    def __repr__(self) -> str:
        return f"RanksOnDevices({self.n})"


class DeviceLabels(Mapping):
    """``devices[i]`` -> ``labels[i]`` (integer arrays of one length, devices distinct)."""

    __slots__ = ("devices", "labels", "_index")

    def __init__(self, devices, labels) -> None:
        self.devices = np.asarray(devices, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        if self.devices.shape != self.labels.shape or self.devices.ndim != 1:
            raise ValueError("DeviceLabels takes two 1-D arrays of one length")
        self._index: dict[int, int] | None = None  # device -> position, made when looked up

    def __getitem__(self, device) -> int:
        if self._index is None:
            self._index = dict(zip(self.devices.tolist(), range(self.devices.size), strict=True))
        return int(self.labels[self._index[device]])

    def __iter__(self) -> Iterator[int]:
        return iter(self.devices.tolist())

    def __len__(self) -> int:
        return int(self.devices.size)

    def __repr__(self) -> str:
        return f"DeviceLabels({self.devices.size} devices)"
