"""A fat-tree's link ids by label, for routing many connections at once.

With ``ecmp_flows`` = 0 a route of :meth:`FatTreeRouter.spread
<simulator.topology.fat_tree.FatTreeRouter.spread>` depends on its endpoints only through a
few labels: the two devices' own links (GPU-NIC, NIC-leaf, or GPU-NVSwitch inside a host),
their leaves, and their pods. :class:`FatTreeLabels` keeps each label's link ids in arrays
(filled the first time a device or leaf is met, by looking its links up; or all at once from
the ids the builder recorded, :class:`FatTreeLinks`, when the engine numbers the links as the
builder did); :class:`~simulator.topology.fat_tree_routes.SpreadTable` builds routes from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# How a connection is routed: its kind decides its route's length and shape.
SELF, HOST, LEAF, POD, CROSS = range(5)
KINDS = 5  # the path kinds above


@dataclass(frozen=True, eq=False)
class FatTreeLinks:
    """A fat-tree's link ids as its builder added them, by structure: the ids of its
    :class:`~simulator.topology.graph.LinkLayout` ``layout``, so a :class:`FatTreeLabels`
    under that layout looks nothing up (the 98K device links of 16K GPUs by (u, v) take
    0.08 s).

    ``device``: per GPU, GPU -> NVSwitch, NVSwitch -> GPU, GPU -> NIC, NIC -> leaf,
    leaf -> NIC, NIC -> GPU; ``leaf_up``/``leaf_down``: per leaf, to and from each spine of
    its pod; ``pod_up``: per pod, (spine, core) for each spine for each core; ``pod_down``:
    (core, spine) for each core for each spine (the routes' layouts). ``host``
    and ``leaf``: per GPU, its host and its leaf's position in the router's leaves (as
    ``host_of`` and ``leaf_of`` say, without reading 16K dict entries back)."""

    layout: object
    device: np.ndarray
    leaf_up: np.ndarray
    leaf_down: np.ndarray
    pod_up: np.ndarray
    pod_down: np.ndarray
    host: np.ndarray
    leaf: np.ndarray

    @classmethod
    def of(cls, layout, device, leaf_links, pod_links, leaves: int, host, leaf) -> FatTreeLinks:
        """From the builder's arrays: ``leaf_links`` (leaves, spines, up/down) or None
        without spines, ``pod_links`` (pods, spines, cores, up/down) or None without
        cores; ``host`` and ``leaf`` per GPU."""
        if leaf_links is None:
            leaf_links = np.zeros((leaves, 0, 2), np.int64)
        # without cores, (1, 0) arrays: a SpreadTable makes its own (pods, 0) ones then
        pods = 1 if pod_links is None else pod_links.shape[0]
        if pod_links is None:
            pod_links = np.zeros((pods, leaf_links.shape[1], 0, 2), np.int64)
        p, s, c, _ = pod_links.shape
        return cls(
            layout,
            device,
            leaf_links[:, :, 0],
            leaf_links[:, :, 1],
            pod_links[..., 0].reshape(p, s * c),
            pod_links[..., 1].transpose(0, 2, 1).reshape(p, c * s),
            host,
            leaf,
        )


class FatTreeLabels:
    """A fat-tree's link ids by label (module doc): each device's own links, each leaf's
    links to and from its pod's spines, each pod's links to and from the cores, learned from
    ``links``: an edge -> id dict, or a link table whose ``index`` is one, or whose ``layout``
    is the one the router's builder numbered (``router.recorded``: :class:`FatTreeLinks`,
    nothing looked up); and what follows from them for a set of connections (their kinds,
    PXN relays, whether the groups they cross are whole).

    ``router`` is a :class:`~simulator.topology.fat_tree.FatTreeRouter` with ``ecmp_flows``
    = 0 whose devices are ``0 .. n-1`` and whose pods have equally many spines.
    """

    def __init__(self, router, links):
        self.key = links
        fixed = router.recorded
        if isinstance(links, dict):
            index, fixed = links, None
        elif fixed is not None and getattr(links, "layout", None) is fixed.layout:
            index = None
        else:
            index, fixed = links.index, None
        self.index = index
        self._place_devices(router, fixed)
        self.spines = router.spines
        self.cores = router.cores
        s = len(self.spines[0]) if self.spines else 0
        c = len(self.cores)
        self.n_spines, self.n_cores = s, c
        # per device: GPU -> NVSwitch, NVSwitch -> GPU, GPU -> NIC, NIC -> leaf, leaf -> NIC,
        # NIC -> GPU (-1 until the device is first routed)
        self.device_links = np.full((self.n, 6), -1, np.int64)
        self._dominated: np.ndarray | None = None  # dominated(), found once
        self._dominated_capacity: np.ndarray | None = None
        self.device_known = np.zeros(self.n, bool)
        self._all_known = False  # every device's links learned: _learn has nothing to do
        self._devices_own: bool | None = None  # _own_links, found once
        self._switch_kept: dict = {}  # _switch_tables_even: id -> (values, found)
        self._mask: np.ndarray | None = None  # _scratch's buffers
        self._sums: np.ndarray | None = None
        self._switch_links(fixed, index)
        self._group_switch_links(fixed, index)
        if fixed is not None:  # every device known from the start
            self.device_links[:] = fixed.device
            self.device_known[:] = True
            self._all_known = True
        # the shares spread gives (the same Python divisions); no spines: one leaf, one pod
        up = [1 / s] * s if s else []
        self.share_pod = np.array([1.0] * 4 + up * 2)
        w_up, w_down = (1 / (s * c), 1 / (c * s)) if c else (0.0, 0.0)
        self.share_cross = np.array([1.0] * 4 + up + [w_up] * s * c + [w_down] * c * s + up)

    def _place_devices(self, router, fixed: FatTreeLinks | None) -> None:
        """Each device's host and leaf number, and each leaf's pod (as arrays)."""
        host_of, leaf_of = router.host_of, router.leaf_of
        n = len(host_of)
        self.n = n
        self.rails = router.rails
        self.leaf_names = list(router.pod_of_leaf)
        if fixed is not None:  # as the builder placed them
            self.host, self.leaf = fixed.host, fixed.leaf
        else:
            self.host = np.fromiter(map(host_of.__getitem__, range(n)), np.int64, n)
            number = {leaf: i for i, leaf in enumerate(self.leaf_names)}
            self.leaf = np.fromiter((number[leaf_of[d]] for d in range(n)), np.int64, n)
        self.pod = np.fromiter(map(router.pod_of_leaf.__getitem__, self.leaf_names), np.int64)

    def _switch_links(self, fixed: FatTreeLinks | None, index: dict | None) -> None:
        """Per leaf: leaf -> each spine of its pod, each spine -> leaf; per pod: (spine,
        core) for spine for core, (core, spine) for core for spine. Every switch's links are
        known from the start (a few thousand rows, looked up once when not recorded), so the
        groups of links routes cross alike are complete before anything is routed."""
        s, c = self.n_spines, self.n_cores
        if fixed is not None:
            self.leaf_up, self.leaf_down = fixed.leaf_up[:, :s], fixed.leaf_down[:, :s]
        else:
            get = index.get
            rows = [(name, self.spines[p] if s else []) for name, p in
                    zip(self.leaf_names, self.pod.tolist(), strict=True)]  # fmt: skip
            shape = (len(self.leaf_names), s)
            self.leaf_up = np.array(
                [[get((leaf, sp), -1) for sp in sps] for leaf, sps in rows], np.int64
            ).reshape(shape)
            self.leaf_down = np.array(
                [[get((sp, leaf), -1) for sp in sps] for leaf, sps in rows], np.int64
            ).reshape(shape)
        if fixed is not None and c:
            self.pod_up, self.pod_down = fixed.pod_up, fixed.pod_down
        else:
            self.pod_up = np.array(
                [[index[(sp, co)] for sp in pod for co in self.cores] for pod in self.spines]
                if c
                else np.zeros((len(self.spines), 0)),
                np.int64,
            ).reshape(len(self.spines), s * c)
            self.pod_down = np.array(
                [[index[(co, sp)] for co in self.cores for sp in pod] for pod in self.spines]
                if c
                else np.zeros((len(self.spines), 0)),
                np.int64,
            ).reshape(len(self.spines), s * c)

    def _group_switch_links(self, fixed: FatTreeLinks | None, index: dict | None) -> None:
        """Links every route crosses all or none of, each with the same share: a leaf's
        uplinks, its downlinks, a pod's spine -> core and core -> spine links. Each such
        group maps to its first link (``representative``)."""
        ids = len(fixed.layout.edges) if fixed is not None else max(index.values(), default=-1) + 1
        self.representative = np.arange(ids)
        switch_rows = (self.leaf_up, self.leaf_down, self.pod_up, self.pod_down)
        for rows in switch_rows:
            self._same(rows)
        # whether every switch's group has all its links (then _whole_groups looks at none)
        self._groups_whole = all(bool((rows >= 0).all()) for rows in switch_rows)

    def _learn(self, devices: np.ndarray) -> None:
        """Fill the link ids of ``devices`` met for the first time."""
        if self._all_known:
            return
        index = self.index
        new = np.unique(devices[~self.device_known[devices]])
        if new.size:
            d = new.tolist()
            switch = [f"nvswitch{h}" for h in self.host[new].tolist()]
            nic = [f"nic{x}" for x in d]
            leaf = list(map(self.leaf_names.__getitem__, self.leaf[new].tolist()))
            ends = [(d, switch), (switch, d), (d, nic), (nic, leaf), (leaf, nic), (nic, d)]
            get = index.get
            self.device_links[new] = np.array(
                [[get(e, -1) for e in zip(u, v, strict=True)] for u, v in ends], np.int64
            ).T
            if self._dominated is not None:  # more devices known: their twins too
                self._mark_dominated(self.device_links[new])
        self.device_known[new] = True
        if new.size:
            self._devices_own = None  # more devices: _own_links looks again

    def _same(self, rows: np.ndarray) -> None:
        """Map the links of each row of ``rows`` to the row's first (rows with a link
        missing from the index excepted)."""
        rows = rows[(rows >= 0).all(axis=1)]
        if rows.size:
            self.representative[rows] = rows[:, :1]

    def representatives(self) -> np.ndarray:
        """Link id -> the first link of its group of links that routes cross together with
        equal shares (itself when none)."""
        return self.representative

    def dominated(self, capacity: np.ndarray) -> np.ndarray:
        """:meth:`FatTreeRouter.spread_dominated
        <simulator.topology.fat_tree.FatTreeRouter.spread_dominated>` under ``capacity``
        (per link id) among the devices known (all of them under the builder's ids), the
        twins of devices learnt later marked as they are learnt."""
        if self._dominated is None:
            self._dominated = np.zeros(capacity.size, bool)
            self._dominated_capacity = capacity
            self._mark_dominated(self.device_links)
        return self._dominated

    def _mark_dominated(self, rows: np.ndarray) -> None:
        """Mark the dominated twin of each pair in ``rows`` (devices' link ids; -1: none)."""
        capacity, dominated = self._dominated_capacity, self._dominated
        for a, b in ((2, 3), (4, 5)):  # (GPU -> NIC, NIC -> leaf), (leaf -> NIC, NIC -> GPU)
            pair = rows[:, [a, b]]
            pair = pair[(pair >= 0).all(axis=1)]
            first, second = pair[:, 0], pair[:, 1]
            dominated[np.where(capacity[first] >= capacity[second], first, second)] = True

    def device_link_ids(self, devices: np.ndarray) -> np.ndarray:
        """The (n, 6) link ids of ``devices`` (``device_links``' columns), learned first."""
        devices = np.asarray(devices, dtype=np.int64)
        self._learn(devices)
        return self.device_links[devices]

    def _outside(self, src: np.ndarray, dst: np.ndarray) -> bool:
        """Some endpoint is not a device (an NVLS switch, or out of range)."""
        return bool(src.size) and (
            min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.n
        )

    def relays(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(where each connection leaves its host from: the PXN relay or itself, which
        connections have a relay; None: none has)."""
        r = self.rails
        if not r or not src.size:
            return src, None
        # another rail (devices are >= 0: a mask of the low bits where r is a power of two,
        # 9x faster than two int64 modulos), then another host
        if r & (r - 1) == 0:
            relayed = ((src ^ dst) & (r - 1)) != 0
        else:
            relayed = (src - dst) % r != 0
        if not relayed.any():  # every connection on its rail (a data-parallel group's)
            return src, None
        relayed &= self.host[src] != self.host[dst]
        if not relayed.any():
            return src, None
        return np.where(relayed, src - src % r + dst % r, src), relayed

    def _whole_groups(self, kind, leaf_s, leaf_d, pod_s, pod_d) -> bool:
        """Every group of links the connections cross through spines has all its links (a
        row with a link missing from the index is no group: :meth:`_same`)."""
        if self._groups_whole:
            return True
        far = kind >= POD
        cross = kind == CROSS
        return bool(
            (self.leaf_up[leaf_s[far]] >= 0).all()
            and (self.leaf_down[leaf_d[far]] >= 0).all()
            and (self.pod_up[pod_s[cross]] >= 0).all()
            and (self.pod_down[pod_d[cross]] >= 0).all()
        )

    def _kinds(self, src: np.ndarray, dst: np.ndarray):
        """(kind of each connection, source and destination leaves and pods), the devices'
        links learned; every endpoint a device (:meth:`_outside` checked first)."""
        if not self._all_known:
            self._learn(np.concatenate([src, dst]))
        leaf_s, leaf_d = self.leaf[src], self.leaf[dst]
        pod_s, pod_d = self.pod[leaf_s], self.pod[leaf_d]
        kind = np.full(src.size, CROSS, np.int8)
        kind[pod_s == pod_d] = POD
        kind[leaf_s == leaf_d] = LEAF
        kind[self.host[src] == self.host[dst]] = HOST
        kind[src == dst] = SELF
        return kind, leaf_s, leaf_d, pod_s, pod_d

    def _own_links(self) -> bool:
        """Every label names links of its own: no link two known devices share (a NIC of two
        GPUs) or two of a device's columns name, none a device and a switch's first links
        share; then a label's count is its links' count. Found again only after devices
        are learned (one bincount over the ids, not a sort per column)."""
        if self._devices_own is None:
            ids = np.concatenate(
                [self.device_links[self.device_known].ravel()]
                + [rows[:, 0] for rows in (self.leaf_up, self.leaf_down, self.pod_up, self.pod_down)
                   if rows.shape[1]]
            )  # fmt: skip
            ids = ids[ids >= 0]
            self._devices_own = not ids.size or int(np.bincount(ids).max()) == 1
        return self._devices_own

    def _switch_tables_even(self, values: np.ndarray) -> bool:
        """Whether the leaf uplinks, leaf downlinks, pod uplinks and pod downlinks each have
        one value in ``values``, none missing; found once per array (the link table's
        latencies, its capacities, which are not changed in place once a table is used: a
        changed network is a new table)."""
        kept = self._switch_kept
        found = kept.get(id(values))
        if found is None or found[0] is not values:
            even = True
            for table in (self.leaf_up, self.leaf_down, self.pod_up, self.pod_down):
                one = values[table.ravel()]
                if (table < 0).any() or (one.size and (one != one[0]).any()):
                    even = False  # a link missing (paths() may decline), or another value
                    break
            found = kept[id(values)] = (values, even)
        return found[1]
