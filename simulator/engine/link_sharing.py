"""Which flow groups share links: the link-sharing graph between group keys, and the groups in
flight under each key (:class:`LinkSharing`).

Max-min fair rates of groups that share no link, directly or through other groups, are
independent, so the flow network (:mod:`simulator.engine.network`) re-rates only the
connected component of the groups a change touches. The graph is built once per key seen
(a key names a batch's classes, :meth:`~simulator.engine.network.FlowNetwork._key`), over
the links its classes cross, and walked as bit masks.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from simulator.engine.flow_groups import FlowGroup

_by_seq = attrgetter("seq")


class LinkSharing:
    """The keys seen on ``n_links`` links, which of them share links, which are in flight.

    Each key added gets a bit (its position in ``key_at``); ``near_bits[key]`` has the bits
    of the keys that share links with it, its own included (equal to its own bit: it shares
    links with none); ``flying`` the bits of the keys with groups in flight, ``groups_of``
    those groups per key, in submission order.
    """

    def __init__(self, n_links: int):
        # The keys on each link, interned: link -> id of its key set (0: none yet), the sets,
        # and (set id, key) -> the id of that set with the key added. Links fall into a few
        # sets per key, so adding a key costs a few set unions, not one per link.
        self._link_set = np.zeros(n_links, dtype=np.int64)
        self._key_sets: list[frozenset] = [frozenset()]
        self._set_plus: dict[tuple[int, int], int] = {}
        self.bit: dict = {}
        self.key_at: list = []
        self.near_bits: dict = {}
        self.flying = 0
        self.groups_of: dict = {}  # key -> its groups in flight

    def add(self, key, links: np.ndarray) -> None:
        """Add ``key``, whose classes cross ``links`` (distinct link ids), to the graph."""
        sets = self._link_set[links]
        near = {key}
        # the distinct sets among them, without sorting every link
        remap = np.zeros(len(self._key_sets), dtype=np.int64)
        for sid in np.flatnonzero(np.bincount(sets, minlength=remap.size)).tolist():
            shared = self._key_sets[sid]
            near |= shared
            plus = self._set_plus.get((sid, key))
            if plus is None:
                plus = self._set_plus[(sid, key)] = len(self._key_sets)
                self._key_sets.append(shared | {key})
            remap[sid] = plus
        self._link_set[links] = remap[sets]
        bit = self.bit[key] = 1 << len(self.key_at)
        self.key_at.append(key)
        near_bits, bits = self.near_bits, bit
        for other in near:
            if other != key:
                near_bits[other] |= bit
                bits |= self.bit[other]
        near_bits[key] = bits

    def alone(self, key) -> bool:
        """True if no other key's classes cross ``key``'s links."""
        return self.near_bits[key] == self.bit[key]

    def fly(self, group: FlowGroup) -> bool:
        """Put ``group`` in flight; True if it is the only one of its key."""
        in_flight = self.groups_of.get(group.key)
        if in_flight is not None:
            in_flight.append(group)
            return False
        self.groups_of[group.key] = [group]
        self.flying |= self.bit[group.key]
        return True

    def land(self, group: FlowGroup) -> None:
        """Take ``group`` out of flight."""
        groups = self.groups_of[group.key]
        groups.remove(group)
        if not groups:
            del self.groups_of[group.key]
            self.flying &= ~self.bit[group.key]

    def component(self, keys: list) -> list[FlowGroup]:
        """The groups in flight that share links with ``keys``' groups, directly or through
        other groups in flight, in submission order."""
        groups_of = self.groups_of
        if len(keys) == 1 and self.near_bits[keys[0]] == self.bit[keys[0]]:
            # a key that shares links only with itself (a collective inside one node): its
            # groups in flight, already in submission order
            return list(groups_of.get(keys[0], ()))
        # breadth first over bit masks, a level at a time: the keys in flight next to the
        # level before, not reached yet (the 405B step's 44,623 walks, 15 groups in the large
        # ones: half the time of a walk over sets, which tested each neighbour in Python)
        near_bits, key_at, flying = self.near_bits, self.key_at, self.flying
        level = 0
        for key in keys:
            level |= near_bits[key]
        level &= flying
        reached = 0
        while level:
            reached |= level
            beyond = 0
            while level:
                low = level & -level
                beyond |= near_bits[key_at[low.bit_length() - 1]]
                level ^= low
            level = beyond & flying & ~reached
        found: list[FlowGroup] = []
        while reached:
            low = reached & -reached
            found += groups_of[key_at[low.bit_length() - 1]]
            reached ^= low
        found.sort(key=_by_seq)
        return found
