"""A fat-tree's spread routes as link-id arrays, many connections at once.

:meth:`FatTreeRouter.spread <simulator.topology.fat_tree.FatTreeRouter.spread>` lists, for one
connection, every link it uses and its share of the bytes. With ``ecmp_flows`` = 0 that list
depends on the endpoints only through a few labels: the two devices' own links (GPU-NIC,
NIC-leaf, or GPU-NVSwitch inside a host), their leaves, and their pods. :class:`SpreadTable`
keeps each label's link ids in arrays (filled the first time a device or leaf is met, by
looking its links up; or all at once from the ids the builder recorded, :class:`FatTreeLinks`,
when the engine numbers the links as the builder did) and builds the routes of thousands of
connections with a few numpy gathers: the same links, in the
same order, with the same shares (the same IEEE divisions), as ``spread`` one connection at a
time, so whatever is computed from them is bit-identical. The 16,384 GPUs of a data-parallel
job's gradient trees and their copies (90K connections) take a few milliseconds instead of a
second. A PXN connection (between rails: :meth:`FatTreeRouter.relay
<simulator.topology.fat_tree.FatTreeRouter.relay>`) is its relay's route with the two NVLink
links to the relay in front.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.topology.graph import ecmp_hash_array

# How a connection is routed: its kind decides its route's length and shape.
_SELF, _HOST, _LEAF, _POD, _CROSS = range(5)
_KINDS = 5  # the path kinds above


@dataclass(frozen=True, eq=False)
class FatTreeLinks:
    """A fat-tree's link ids as its builder added them, by structure: the ids of its
    :class:`~simulator.topology.graph.LinkLayout` ``layout``, so a :class:`SpreadTable`
    under that layout looks nothing up (the 98K device links of 16K GPUs by (u, v) take
    0.08 s).

    ``device``: per GPU, GPU -> NVSwitch, NVSwitch -> GPU, GPU -> NIC, NIC -> leaf,
    leaf -> NIC, NIC -> GPU; ``leaf_up``/``leaf_down``: per leaf, to and from each spine of
    its pod; ``pod_up``: per pod, (spine, core) for each spine for each core; ``pod_down``:
    (core, spine) for each core for each spine (:class:`SpreadTable`'s layouts). ``host``
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


class SpreadTable:
    """Link ids of a fat-tree's routes under ``links`` (module doc): an edge -> id dict, or
    a link table whose ``index`` is one, or whose ``layout`` is the one the router's builder
    numbered (``router.recorded``: :class:`FatTreeLinks`, nothing looked up).

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
        self.spines = router.spines
        self.cores = router.cores
        s = len(self.spines[0]) if self.spines else 0
        c = len(self.cores)
        self.n_spines, self.n_cores = s, c
        # per device: GPU -> NVSwitch, NVSwitch -> GPU, GPU -> NIC, NIC -> leaf, leaf -> NIC,
        # NIC -> GPU (-1 until the device is first routed)
        self.device_links = np.full((n, 6), -1, np.int64)
        self._dominated: np.ndarray | None = None  # dominated(), found once
        self._dominated_capacity: np.ndarray | None = None
        self.device_known = np.zeros(n, bool)
        self._all_known = False  # every device's links learned: _learn has nothing to do
        self._devices_own: bool | None = None  # _own_links, found once
        self._switch_kept: dict = {}  # _switch_tables_even: id -> (values, found)
        self._mask: np.ndarray | None = None  # _scratch's buffers
        self._sums: np.ndarray | None = None
        # Per leaf: leaf -> each spine of its pod, each spine -> leaf; per pod: (spine, core)
        # for spine for core, (core, spine) for core for spine. Every switch's links are
        # known from the start (a few thousand rows, looked up once when not recorded), so
        # the groups of links routes cross alike are complete before anything is routed.
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
        # Links every route crosses all or none of, each with the same share: a leaf's
        # uplinks, its downlinks, a pod's spine -> core and core -> spine links. Each such
        # group maps to its first link.
        ids = len(fixed.layout.edges) if fixed is not None else max(index.values(), default=-1) + 1
        self.representative = np.arange(ids)
        for rows in (self.leaf_up, self.leaf_down, self.pod_up, self.pod_down):
            self._same(rows)
        # whether every switch's group has all its links (then _whole_groups looks at none)
        self._groups_whole = all(
            bool((rows >= 0).all())
            for rows in (self.leaf_up, self.leaf_down, self.pod_up, self.pod_down)
        )
        if fixed is not None:  # every device known from the start
            self.device_links[:] = fixed.device
            self.device_known[:] = True
            self._all_known = True
        # the shares spread gives (the same Python divisions); no spines: one leaf, one pod
        up = [1 / s] * s if s else []
        self.share_pod = np.array([1.0] * 4 + up * 2)
        w_up, w_down = (1 / (s * c), 1 / (c * s)) if c else (0.0, 0.0)
        self.share_cross = np.array([1.0] * 4 + up + [w_up] * s * c + [w_down] * c * s + up)

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

    def _with_relays(self, src, via, relayed, ids, lengths, shares=None):
        """``ids`` (and ``shares``) of the routes from ``via``, each relayed connection's
        GPU -> NVSwitch -> relay links (share 1) put in front; None if a link is missing."""
        self._learn(src[relayed])
        front = np.stack(
            [self.device_links[src[relayed], 0], self.device_links[via[relayed], 1]], axis=1
        )
        if (front < 0).any():
            return None
        extra = np.where(relayed, 2, 0)
        longer = lengths + extra
        start = np.cumsum(longer) - longer
        connection = np.repeat(np.arange(lengths.size), lengths)
        old_start = np.cumsum(lengths) - lengths
        at = np.arange(ids.size) - old_start[connection] + start[connection] + extra[connection]
        front_at = start[relayed][:, None] + np.arange(2)
        out = np.empty(int(longer.sum()), np.int64)
        out[at] = ids
        out[front_at] = front
        if shares is None:
            return out, None, longer
        out_shares = np.empty(out.size, float)
        out_shares[at] = shares
        out_shares[front_at] = 1.0
        return out, out_shares, longer

    def _whole_groups(self, kind, leaf_s, leaf_d, pod_s, pod_d) -> bool:
        """Every group of links the connections cross through spines has all its links (a
        row with a link missing from the index is no group: :meth:`_same`)."""
        if self._groups_whole:
            return True
        far = kind >= _POD
        cross = kind == _CROSS
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
        kind = np.full(src.size, _CROSS, np.int8)
        kind[pod_s == pod_d] = _POD
        kind[leaf_s == leaf_d] = _LEAF
        kind[self.host[src] == self.host[dst]] = _HOST
        kind[src == dst] = _SELF
        return kind, leaf_s, leaf_d, pod_s, pod_d

    def paths(
        self, src: np.ndarray, dst: np.ndarray, key: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(link ids, length per connection) of ``FatTreeRouter.path(src[i], dst[i],
        key[i])``, the single hashed path of each connection, concatenated in order; None
        when some endpoint is not a device or a key is outside [0, 2**32)."""
        if self._outside(src, dst) or (key.size and (key.min() < 0 or key.max() >= 2**32)):
            return None
        origin, (src, relayed) = src, self.relays(src, dst)
        kind, leaf_s, leaf_d, pod_s, pod_d = self._kinds(src, dst)
        s, c = self.n_spines, self.n_cores
        lengths = np.array([0, 2, 4, 6, 8], np.int64)[kind]
        h = ecmp_hash_array(src, dst, key)
        up, core, down = h % max(s, 1), (h >> 8) % max(c, 1), (h >> 16) % max(s, 1)
        # each path a row as wide as the longest (as :meth:`routes` lays them out), each
        # kind's rows filled at once
        dev = self.device_links
        columns = {
            _HOST: lambda a, b, k: [dev[a, 0:1], dev[b, 1:2]],
            _LEAF: lambda a, b, k: [dev[a, 2:4], dev[b, 4:6]],
            _POD: lambda a, b, k: [
                dev[a, 2:4],
                self.leaf_up[leaf_s[k], up[k]][:, None],
                self.leaf_down[leaf_d[k], up[k]][:, None],
                dev[b, 4:6],
            ],
            _CROSS: lambda a, b, k: [
                dev[a, 2:4],
                self.leaf_up[leaf_s[k], up[k]][:, None],
                self.pod_up[pod_s[k], up[k] * c + core[k]][:, None],
                self.pod_down[pod_d[k], core[k] * s + down[k]][:, None],
                self.leaf_down[leaf_d[k], down[k]][:, None],
                dev[b, 4:6],
            ],
        }
        ids = np.empty((src.size, int(lengths.max()) if src.size else 0), np.int64)
        for k, make in columns.items():
            rows = np.flatnonzero(kind == k)
            if rows.size:
                block = np.concatenate(make(src[rows], dst[rows], rows), axis=1)
                ids[rows, : block.shape[1]] = block
        (ids,) = _row_by_row(lengths, ids)
        if (ids < 0).any():
            return None
        if relayed is None:
            return ids, lengths
        found = self._with_relays(origin, src, relayed, ids, lengths)
        return None if found is None else (found[0], found[2])

    def path_latencies(
        self, src: np.ndarray, dst: np.ndarray, latency: np.ndarray
    ) -> tuple[np.ndarray, list[float]] | None:
        """(length per connection, its links' latencies summed, s) of :meth:`paths`, as
        ``float(latency[ids][a:b].sum())`` of each path gives it, to the bit, without the
        paths (:meth:`_rows`: None unless every link of each role the paths take has one
        latency, or where :meth:`paths` declines). Each row is summed once, as a contiguous
        array of the same values in the same order (``ndarray.sum``, as a path's own sum
        is taken), and each connection takes its row's sum (a tree's phase: 2,046
        connections, 3 rows)."""
        found = self._rows(src, dst, latency)
        if found is None:
            return None
        lengths, code, rows = found
        sums = np.array([float(row.sum()) for row in rows] or [0.0])
        return lengths, sums[code].tolist()

    def _rows(self, src: np.ndarray, dst: np.ndarray, values: np.ndarray):
        """(length per connection, the number of its row, the rows: each path's ``values``
        per link, in path order) of :meth:`paths`, where every link of each role the paths
        take has one value (each of the six device columns over the devices met, each
        switch table over all its links): a path of one kind (to itself, inside a host,
        under a leaf, a pod, across pods), with or without a PXN relay in front, is then
        one row whatever spine or core its hash picks, so each row is read off one
        connection's path (:meth:`paths` of one connection per row, the paths' layout
        kept there alone). None otherwise, or where :meth:`paths` declines."""
        if self._outside(src, dst):
            return None
        if not src.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), []
        via, relayed = self.relays(src, dst)
        kind = self._kinds(via, dst)[0]
        if relayed is not None:
            self._learn(src[relayed])
        met = self.device_links[np.concatenate([via, dst] if relayed is None else [src, via, dst])]
        if (met < 0).any():
            return None  # a link a path would not find: let paths() decline it
        column = values[met]
        if (column != column[0]).any() or not self._switch_tables_even(values):
            return None  # a link of another value
        code = kind.astype(np.int64)
        if relayed is not None:
            code += np.where(relayed, _KINDS, 0)  # a relayed path's kind, after the rest
        first = np.full(2 * _KINDS, -1, np.int64)  # each code's first connection
        first[code[::-1]] = np.arange(code.size - 1, -1, -1)
        present = np.flatnonzero(first >= 0)
        one = first[present]
        found = self.paths(src[one], dst[one], np.zeros(one.size, np.int64))
        if found is None:
            return None
        ids, per_row = found
        number = np.empty(2 * _KINDS, np.int64)
        number[present] = np.arange(present.size)
        code = number[code]  # rows numbered in order of their code
        ends = np.cumsum(per_row)
        rows = [
            values[ids[b - n : b]] for n, b in zip(per_row.tolist(), ends.tolist(), strict=True)
        ]
        return per_row[code], code, rows

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

    def routes(
        self, src: np.ndarray, dst: np.ndarray, folded: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(link ids, shares, route length per connection) of the connections ``src[i]`` ->
        ``dst[i]``, routes concatenated in order; None when some endpoint is not a device.

        ``folded``: each group of links the routes cross all or none of (a leaf's uplinks,
        its downlinks, a pod's links to and from the cores: :meth:`representatives`) as its
        first link alone, with the share each of its links carries: 4 + 4 entries for a
        route through the cores instead of 4 + 2 S + 2 S C (132 on a pod of 32 spines)."""
        if self._outside(src, dst):
            return None
        origin, (src, relayed) = src, self.relays(src, dst)
        kind, leaf_s, leaf_d, pod_s, pod_d = self._kinds(src, dst)
        s, c = self.n_spines, self.n_cores
        if folded and not self._whole_groups(kind, leaf_s, leaf_d, pod_s, pod_d):
            return None  # a group with a link the index lacks is no group: not folded
        span, pod_span = (min(s, 1), min(s * c, 1)) if folded else (s, s * c)
        lengths = np.array([0, 2, 4, 4 + 2 * span, 4 + 2 * span + 2 * pod_span], np.int64)[kind]
        # Each route's entries as a row of a matrix as wide as the longest, then the rows'
        # first ``lengths`` entries in row order: a route between leaves starts as one under
        # a leaf (its GPU -> NIC -> leaf, leaf -> NIC -> GPU), its switches after, so the
        # device columns are gathered for all such routes at once, the switch columns per
        # kind. The entries and their order are :meth:`spread`'s, as the loop over kinds
        # placed them.
        n = src.size
        width = int(lengths.max()) if n else 0
        ids = np.empty((n, width), np.int64)
        shares = np.empty((n, width))
        dev = self.device_links
        sel = {k: np.flatnonzero(kind == k) for k in (_HOST, _POD, _CROSS)}
        between = kind >= _LEAF  # through the NICs: GPU -> NIC -> leaf first
        if n and between.all():
            ids[:, 0:2], ids[:, 2:4] = dev[src, 2:4], dev[dst, 4:6]
            shares[:, 0:4] = 1.0
        elif between.any():
            far = np.flatnonzero(between)
            ids[far, 0:2], ids[far, 2:4] = dev[src[far], 2:4], dev[dst[far], 4:6]
            shares[far, 0:4] = 1.0
        if sel[_HOST].size:
            k = sel[_HOST]
            ids[k, 0], ids[k, 1] = dev[src[k], 0], dev[dst[k], 1]
            shares[k, 0:2] = 1.0
        share_pod, share_cross = self.share_pod, self.share_cross
        if folded:  # the same shares, one of each group's
            share_pod = share_pod[: 4 + 2 * span]
            share_cross = np.concatenate(
                [share_cross[: 4 + span], share_cross[4 + s : 4 + s + pod_span],
                 share_cross[4 + s + s * c : 4 + s + s * c + pod_span],
                 share_cross[-span:] if span else share_cross[:0]]
            )  # fmt: skip
        if sel[_POD].size:
            k = sel[_POD]
            ids[k, 4 : 4 + span] = self.leaf_up[leaf_s[k], :span]
            ids[k, 4 + span : 4 + 2 * span] = self.leaf_down[leaf_d[k], :span]
            shares[k, 4 : 4 + 2 * span] = share_pod[4:]
        if sel[_CROSS].size:
            k = sel[_CROSS]
            at = np.cumsum([4, span, pod_span, pod_span, span])
            ids[k, at[0] : at[1]] = self.leaf_up[leaf_s[k], :span]
            ids[k, at[1] : at[2]] = self.pod_up[pod_s[k], :pod_span]
            ids[k, at[2] : at[3]] = self.pod_down[pod_d[k], :pod_span]
            ids[k, at[3] : at[4]] = self.leaf_down[leaf_d[k], :span]
            shares[k, 4 : at[4]] = share_cross[4:]
        ids, shares = _row_by_row(lengths, ids, shares)
        if (ids < 0).any():
            return None  # a link spread would not find (a malformed graph): route one by one
        if relayed is None:
            return ids, shares, lengths
        return self._with_relays(origin, src, relayed, ids, lengths, shares)

    def folded_counts(
        self, src: np.ndarray, dst: np.ndarray, klass: np.ndarray, n_classes: int, n_links: int
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per class ``0 .. n_classes-1`` (``klass[i]``: connection ``i``'s): the links its
        connections' folded :meth:`routes` cross (ascending) and the sum of their shares on
        each, without building the routes: what ``np.bincount`` of the routes' entries gives,
        to the bit. None where that is not guaranteed (an endpoint that is not a device, a
        PXN relay, a group with a link missing, a link two labels share): use
        :meth:`routes`. ``n_links``: the size of the id space.

        A folded route crosses its two devices' links (share 1), then its leaves' first
        uplink and downlink (share 1/S each) and its pods' first core links (1/(S C)): every
        link takes one share, whatever the connection's kind, so its sum over ``k`` entries
        is ``k`` additions of that share in a row, whatever their order: ``np.cumsum`` of
        ``k`` copies, which adds in a row too. The ``k`` are counted per label (a device as
        source or destination, a leaf, a pod: each names its own links), so the work grows
        with the connections, not with their route entries or the fabric's links."""
        if self._outside(src, dst) or self.relays(src, dst)[1] is not None:
            return None
        kind, leaf_s, leaf_d, pod_s, pod_d = self._kinds(src, dst)  # devices learned
        if not self._own_links() or not self._whole_groups(kind, leaf_s, leaf_d, pod_s, pod_d):
            return None
        s, c = self.n_spines, self.n_cores
        dev = self.device_links
        host = np.flatnonzero(kind == _HOST)
        between = np.flatnonzero(kind >= _LEAF)
        pods = np.flatnonzero(kind >= _POD)
        cross = np.flatnonzero(kind == _CROSS)
        # (each connection's label, the connections, the links of each label, their share)
        labelled = [
            (src[host], host, (dev[:, 0],), 0),
            (dst[host], host, (dev[:, 1],), 0),
            (src[between], between, (dev[:, 2], dev[:, 3]), 0),
            (dst[between], between, (dev[:, 4], dev[:, 5]), 0),
            (leaf_s[pods], pods, (self.leaf_up[:, 0],) if s else (), 1),
            (leaf_d[pods], pods, (self.leaf_down[:, 0],) if s else (), 1),
            (pod_s[cross], cross, (self.pod_up[:, 0],) if c else (), 2),
            (pod_d[cross], cross, (self.pod_down[:, 0],) if c else (), 3),
        ]
        pieces: list[list[tuple[np.ndarray, np.ndarray, int]]] = [[] for _ in range(n_classes)]
        most = 1
        for labels, rows, tables, share in labelled:
            if not rows.size:
                continue
            if not tables:  # through spines or cores a fabric without them lacks
                return None
            size = tables[0].size
            k = np.bincount(klass[rows] * size + labels, minlength=n_classes * size)
            k = k.reshape(n_classes, size)
            most = max(most, int(k.max()))
            for cls, row in enumerate(k):
                at = np.flatnonzero(row)
                for table in tables:
                    links = table[at]
                    if links.size and links.min() < 0:
                        return None  # a link a route would not find: route them
                    pieces[cls].append((links, row[at], share))
        # row r, column j: j additions of share r in a row (as bincount adds them; column 0
        # none, so that a count indexes its row as it is)
        share = self.share_cross
        values = [
            1.0,
            *([share[4]] if s else []),
            *([share[4 + s], share[4 + s + s * c]] if c else []),
        ]
        table = np.zeros((len(values), most + 1))
        table[:, 1:] = np.cumsum(np.repeat(np.array(values)[:, None], most, axis=1), axis=1)
        # each class's links in ascending order: marked in a mask over the id space (kept
        # between calls, cleared after), their sums written beside them
        mask, sums = self._scratch(n_links)
        out = []
        for mine in pieces:
            for links, k, row in mine:
                mask[links] = True
                sums[links] = table[row].take(k)
            links = np.flatnonzero(mask)
            mask[links] = False
            out.append((links, sums[links]))
        return out

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

    def _scratch(self, n_links: int) -> tuple[np.ndarray, np.ndarray]:
        """A cleared mask and a sums buffer over ``n_links`` ids, kept between calls."""
        if self._mask is None or self._mask.size != n_links:
            self._mask = np.zeros(n_links, bool)
            self._sums = np.empty(n_links)
        return self._mask, self._sums


def _row_by_row(lengths: np.ndarray, *matrices: np.ndarray) -> tuple[np.ndarray, ...]:
    """The first ``lengths[i]`` entries of row ``i`` of each matrix (one row per route, as
    wide as the longest), concatenated row by row: the routes one after another."""
    n, width = matrices[0].shape
    if n and (lengths == width).all():  # every route as long: the matrices as they are
        return tuple(m.ravel() for m in matrices)
    kept = np.flatnonzero(np.arange(width) < lengths[:, None])
    return tuple(m.ravel().take(kept) for m in matrices)
