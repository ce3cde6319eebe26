"""What a flow class's water-filling needs of its links (:class:`ReducedRating`): one link of
each group the router says routes cross all or none of with equal shares, and none of the links
it names dominated. The same rates to the bit over far fewer entries; used by
:class:`~simulator.engine.collective.CollectiveRunner` for the classes it makes
(``FlowClass.rating``)."""

from __future__ import annotations

import numpy as np

from simulator.engine.links import LinkTable


class ReducedRating:
    """The reduced rating of classes over ``links`` routed by ``router``."""

    def __init__(self, links: LinkTable, router):
        self.links = links
        self.router = router
        self._alike: bool | None = None  # alike(), found once

    def same_links(self) -> np.ndarray | None:
        """The router's groups of links that routes cross all or none of with equal shares
        (link id -> its group's first); None if it has none.

        Such links carry the same load and have the same capacity (checked per link), so the
        water-filling needs one of each group: the same shares, the same level, the same
        rates to the bit, over a fraction of the entries (an inter-pod route on the 24K-GPU
        cluster crosses 548 links, 4 groups and 36 links of its own)."""
        same = getattr(self.router, "spread_representatives", None)
        return None if same is None else same(self.links)

    def dominated(self) -> np.ndarray | None:
        """Link id -> whether a water-filling may leave the link out (the router's
        ``spread_dominated``; None: none).

        Such a link comes in a pair that every route crosses both or neither of with one
        share (a GPU's link to its NIC and its NIC's to the leaf), and has the larger
        capacity of the two: in every round of a water-filling it carries the same weight as
        its twin (the same counts summed in the same order) and at least as much capacity
        left (the same subtractions from a capacity no smaller; IEEE subtraction and
        division are monotone), so its share is never below its twin's and it never sets a
        class's bottleneck or the level: the same rates to the bit, with a tree's device
        links halved. Any subset of such links may be left out, so a router that names
        more of them as it learns its devices changes no rate."""
        find = getattr(self.router, "spread_dominated", None)
        return None if find is None else find(self.links)

    def alike(self, same: np.ndarray) -> bool:
        """Every link has the capacity of its group's first under ``same`` (the router's
        representatives, every switch's groups); once per runner."""
        if self._alike is None:
            capacity = self.links.capacity
            self._alike = bool((capacity[same] == capacity).all())
        return self._alike

    def of(
        self, links: np.ndarray, counts: np.ndarray, same: np.ndarray | None, firsts: bool = False
    ):
        """A class's (links, counts) for the water-filling with one link of each group of
        ``same`` (:meth:`same_links`) whose capacity is the group's first's, and without
        the links the router names dominated (:meth:`dominated`); None: all. ``firsts``:
        every link is its group's first already (folded routes), so only the dominated
        ones go."""
        if same is None:
            return None
        dominated = self.dominated()
        if firsts:  # first == links for every link: the groups keep them all
            if dominated is None:
                return None
            keep = ~dominated[links]
        else:
            first = same[links]
            capacity = self.links.capacity
            keep = (first == links) | (capacity[links] != capacity[first])
            if dominated is not None:
                keep &= ~dominated[links]
        return None if keep.all() else (links[keep], counts[keep])
