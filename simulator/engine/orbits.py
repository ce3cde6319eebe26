"""Orbits of equivalent GPUs' own links, so that a water-filling keeps one link of each.

In symmetric mode every rank of a pipeline stage does what the stage's simulated rank does, at
the same time: its collectives' copies and its pipeline sends stand for all of them. A flow
class that crosses every GPU of a stage's link of one kind (its NIC uplink, say) as often as
each other puts the same load on each; if every class of a water-filling does so, those links
have the same capacity (checked) and the same load, so the same share in every round, and
the water-filling needs one of them: the same rates to the last bit over far fewer entries (a
128-node data-parallel ring with its 8 copies crosses 4,096 such links and keeps 4). A class
that crosses part of an orbit, or unevenly, has no reduced form, and a water-filling with such
a class among its classes keeps every link (:meth:`Rating.rates
<simulator.engine.rating.Rating.rates>`).

An orbit is a (label, kind) pair: the label says which GPUs are equivalent (the stage of the
rank on the GPU), the kind which of a GPU's own links (GPU -> NVSwitch, NVSwitch -> GPU,
GPU -> NIC, NIC -> leaf, leaf -> NIC, NIC -> GPU, as the router lists them). A link that
GPUs of two labels share (a NIC of two GPUs), or an orbit whose links' capacities differ (a
degraded link), is in no orbit; nor is a link that ratings leave out as its twin's dominated
one (``FatTreeRouter.spread_dominated``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

_TOKENS = itertools.count()


class LinkOrbits:
    """Link id -> orbit (-1: none) and each orbit's number of links, for ``label_of_device``
    (device -> label) from the (device, kind) link ids ``ids`` (an (n, kinds) array, -1: no
    such link, as a router's ``device_link_ids`` gives them); ``capacity`` per link id
    (B/s). :func:`link_orbits` builds one from a router."""

    def __init__(self, label_of_device: Mapping[int, int], ids: np.ndarray, capacity: np.ndarray):
        labels = getattr(label_of_device, "labels", None)  # DeviceLabels: its array
        if labels is None:
            labels = np.fromiter(label_of_device.values(), np.int64, len(label_of_device))
        kinds = ids.shape[1]
        orbit = (labels[:, None] * kinds + np.arange(kinds)).ravel()
        n = capacity.size
        ids = ids.ravel()
        ids = np.where(ids >= 0, ids, n)  # no such link: a slot past the links, dropped below
        of_link = np.full(n + 1, -1, dtype=np.int64)
        of_link[ids] = orbit
        # a link that devices of two orbits share belongs to neither
        of_link[ids[of_link[ids] != orbit]] = -1
        of_link = of_link[:n]
        linked = np.flatnonzero(of_link >= 0)
        n_orbits = int(of_link.max()) + 1 if linked.size else 0
        # every orbit's links of one capacity (each compared with one link of its orbit:
        # whichever write of an orbit's stands), or the orbit is dropped
        mine = of_link[linked]
        one = np.empty(n_orbits, np.int64)
        one[mine] = linked
        uneven = np.zeros(n_orbits, bool)
        uneven[mine[capacity[linked] != capacity[one[mine]]]] = True
        if uneven.any():
            of_link[linked[uneven[mine]]] = -1
            linked = np.flatnonzero(of_link >= 0)
        self.of_link = of_link
        self.size = np.bincount(of_link[linked], minlength=n_orbits)
        # names these orbits in the keys of shapes routed with them (never reused, so a
        # kept shape pins no orbits' arrays and outlives them harmlessly)
        self.token = next(_TOKENS)

    def reduce(self, links: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """A class's (links ascending, counts) with one link of each orbit it touches (its
        lowest id), when it crosses every link of those orbits with one count; else None."""
        orbit = self.of_link[links]
        own = orbit >= 0
        if not own.any():
            return links, counts
        at = np.flatnonzero(own)
        mine = orbit[at]
        crossed = np.bincount(mine, minlength=self.size.size)  # no sort: linear in the links
        touched = crossed > 0
        if (crossed[touched] != self.size[touched]).any():
            return None  # part of an orbit
        # each orbit's first entry (its lowest link: ``links`` ascend)
        first = np.full(self.size.size, links.size, np.int64)
        np.minimum.at(first, mine, at)
        c = counts[at]
        if (c != counts[first[mine]]).any():
            return None  # unevenly
        keep = ~own
        keep[first[touched]] = True
        return links[keep], counts[keep]


def link_orbits(
    label_of_device: Mapping[int, int], router, links, capacity: np.ndarray
) -> LinkOrbits | None:
    """:class:`LinkOrbits` of ``label_of_device`` on ``router`` (links named by ``links``:
    a link table, or its (u, v) -> id dict), or None when the router cannot list its
    devices' own links."""
    list_ids = getattr(router, "device_link_ids", None)
    if list_ids is None or not label_of_device:
        return None
    devices = getattr(label_of_device, "devices", None)  # DeviceLabels: its array
    if devices is None:
        devices = np.fromiter(label_of_device.keys(), np.int64, len(label_of_device))
    ids = list_ids(devices, links)
    if ids is None:
        return None
    # links a rating leaves out (the router's dominated twins) belong to no orbit: where a
    # slowed link flips which twin one GPU keeps, the orbit of the rest stays whole
    find = getattr(router, "spread_dominated", None)
    dominated = None if find is None else find(links)
    if dominated is not None:
        known = ids >= 0
        ids = np.where(known & dominated[np.where(known, ids, 0)], -1, ids)
    return LinkOrbits(label_of_device, ids, capacity)
