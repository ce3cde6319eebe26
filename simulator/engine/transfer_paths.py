"""Where a collective's transfers go (:class:`TransferPaths`): each transfer's own path and its
latency, whether it is relayed by PXN, whether it crosses hosts; all at once where the router
can (a fat-tree's ``path_latencies``, ``path_ids``, ``relays``, ``hosts``), else one
transfer at a time. Used by :class:`~simulator.engine.collective.CollectiveRunner` to sort a
phase's transfers into flow classes and to price their latency."""

from __future__ import annotations

from operator import ne

import numpy as np

from simulator.engine.links import LinkTable
from simulator.engine.routed import segment_sums


class TransferPaths:
    """Paths of transfers over ``links`` routed by ``router``; ``host_of``: device -> host."""

    def __init__(self, links: LinkTable, router, host_of: dict):
        self.links = links
        self.router = router
        self.host_of = host_of

    def of(self, transfers) -> tuple[list[int], list[float]]:
        """Links on each transfer's own path (``router.path(src, dst, j)``, transfer ``j``)
        and the sum of their latencies (s), as ``latency[ids].sum()`` gives it.

        All at once when the router has ``path_ids`` (the sums taken once per distinct row
        of latencies, each over its own 1-D array, so bit for bit the same), else one by one.
        """
        if all(type(t.src) is int and type(t.dst) is int for t in transfers):
            src = np.array([t.src for t in transfers], dtype=np.int64)
            dst = np.array([t.dst for t in transfers], dtype=np.int64)
            found = self.latency(src, dst)
            if found is not None:
                return found[0].tolist(), found[1]
        hops, latency = [], []
        for j, t in enumerate(transfers):
            ids = self.links.ids(self.router.path(t.src, t.dst, j))
            hops.append(ids.size)
            latency.append(float(self.links.latency[ids].sum()))
        return hops, latency

    def latency(self, src: np.ndarray, dst: np.ndarray):
        """(links on each connection's own path, the sum of their latencies s, as a list) by
        the router's ``path_latencies`` (the same sums without the paths, where it can), else
        its ``path_ids`` (connection ``j`` keyed ``j``), the sums taken once per distinct row
        of latencies; None when the router has neither or declines."""
        latencies = getattr(self.router, "path_latencies", None)
        found = None if latencies is None else latencies(src, dst, self.links)
        if found is not None:  # the sums without the paths (a fat-tree of even latencies)
            return found
        path_ids = getattr(self.router, "path_ids", None)
        found = None if path_ids is None else path_ids(src, dst, np.arange(src.size), self.links)
        if found is None:
            return None
        ids, lengths = found
        return lengths, segment_sums(self.links.latency[ids], lengths)

    def relayed(self, transfers) -> list[bool]:
        """Whether each transfer crosses NVLink to a PXN relay first (a relayed route under
        one leaf is as long as a direct one through a spine: length alone does not tell)."""
        relay = getattr(self.router, "relay", None)
        if relay is None:
            return [False] * len(transfers)
        return [relay(t.src, t.dst) is not None for t in transfers]

    def crosses(self, transfers, ends: tuple[np.ndarray, np.ndarray] | None):
        """Whether each transfer crosses hosts: from ``ends`` (the transfers' device arrays a
        router's ``path_ids`` accepted) by the router's ``hosts`` when it reads this runner's
        ``host_of``, else one ``host_of`` lookup per transfer (a device not in it: its own)."""
        hosts = getattr(self.router, "hosts", None)
        if ends is not None and hosts and getattr(self.router, "host_of", None) is self.host_of:
            return hosts(ends[0], self.links) != hosts(ends[1], self.links)
        host = self.host_of.get
        src, dst, _ = zip(*transfers, strict=True)  # Transfer: (src, dst, bytes)
        return list(map(ne, map(host, src, src), map(host, dst, dst)))
