"""A fat-tree's spread routes as link-id arrays, many connections at once.

:meth:`FatTreeRouter.spread <simulator.topology.fat_tree.FatTreeRouter.spread>` lists, for one
connection, every link it uses and its share of the bytes. With ``ecmp_flows`` = 0 that list
depends on the endpoints only through a few labels: the two devices' own links (GPU-NIC,
NIC-leaf, or GPU-NVSwitch inside a host), their leaves, and their pods. :class:`SpreadTable`
takes each label's link ids (:mod:`simulator.topology.fat_tree_labels`) and builds the routes
of thousands of connections with a few numpy gathers: the same links, in the
same order, with the same shares (the same IEEE divisions), as ``spread`` one connection at a
time, so whatever is computed from them is bit-identical. The 16,384 GPUs of a data-parallel
job's gradient trees and their copies (90K connections) take a few milliseconds instead of a
second. A PXN connection (between rails: :meth:`FatTreeRouter.relay
<simulator.topology.fat_tree.FatTreeRouter.relay>`) is its relay's route with the two NVLink
links to the relay in front.
"""

from __future__ import annotations

import numpy as np

from simulator.topology.fat_tree_labels import CROSS, HOST, KINDS, LEAF, POD, FatTreeLabels
from simulator.topology.graph import ecmp_hash_array


class SpreadTable(FatTreeLabels):
    """Routes of many connections at once from a fat-tree's link ids by label
    (:class:`~simulator.topology.fat_tree_labels.FatTreeLabels`, module doc)."""

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
            HOST: lambda a, b, k: [dev[a, 0:1], dev[b, 1:2]],
            LEAF: lambda a, b, k: [dev[a, 2:4], dev[b, 4:6]],
            POD: lambda a, b, k: [
                dev[a, 2:4],
                self.leaf_up[leaf_s[k], up[k]][:, None],
                self.leaf_down[leaf_d[k], up[k]][:, None],
                dev[b, 4:6],
            ],
            CROSS: lambda a, b, k: [
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
            code += np.where(relayed, KINDS, 0)  # a relayed path's kind, after the rest
        first = np.full(2 * KINDS, -1, np.int64)  # each code's first connection
        first[code[::-1]] = np.arange(code.size - 1, -1, -1)
        present = np.flatnonzero(first >= 0)
        one = first[present]
        found = self.paths(src[one], dst[one], np.zeros(one.size, np.int64))
        if found is None:
            return None
        ids, per_row = found
        number = np.empty(2 * KINDS, np.int64)
        number[present] = np.arange(present.size)
        code = number[code]  # rows numbered in order of their code
        ends = np.cumsum(per_row)
        rows = [
            values[ids[b - n : b]] for n, b in zip(per_row.tolist(), ends.tolist(), strict=True)
        ]
        return per_row[code], code, rows

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
        sel = {k: np.flatnonzero(kind == k) for k in (HOST, POD, CROSS)}
        between = kind >= LEAF  # through the NICs: GPU -> NIC -> leaf first
        if n and between.all():
            ids[:, 0:2], ids[:, 2:4] = dev[src, 2:4], dev[dst, 4:6]
            shares[:, 0:4] = 1.0
        elif between.any():
            far = np.flatnonzero(between)
            ids[far, 0:2], ids[far, 2:4] = dev[src[far], 2:4], dev[dst[far], 4:6]
            shares[far, 0:4] = 1.0
        if sel[HOST].size:
            k = sel[HOST]
            ids[k, 0], ids[k, 1] = dev[src[k], 0], dev[dst[k], 1]
            shares[k, 0:2] = 1.0
        labels = (leaf_s, leaf_d, pod_s, pod_d)
        self._switch_columns(ids, shares, sel, labels, (span, pod_span), folded)
        ids, shares = _row_by_row(lengths, ids, shares)
        if (ids < 0).any():
            return None  # a link spread would not find (a malformed graph): route one by one
        if relayed is None:
            return ids, shares, lengths
        return self._with_relays(origin, src, relayed, ids, lengths, shares)

    def _switch_columns(self, ids, shares, sel: dict, labels: tuple, spans: tuple, folded: bool):
        """Write the switch links (and their shares) of the routes between pods
        (``sel[POD]``) and across them (``sel[CROSS]``) into ``ids`` and ``shares`` from
        column 4; ``spans``: the spines a leaf and the spine-core links a pod crosses (one
        each when ``folded``)."""
        leaf_s, leaf_d, pod_s, pod_d = labels
        span, pod_span = spans
        s, c = self.n_spines, self.n_cores
        share_pod, share_cross = self.share_pod, self.share_cross
        if folded:  # the same shares, one of each group's
            share_pod = share_pod[: 4 + 2 * span]
            share_cross = np.concatenate(
                [share_cross[: 4 + span], share_cross[4 + s : 4 + s + pod_span],
                 share_cross[4 + s + s * c : 4 + s + s * c + pod_span],
                 share_cross[-span:] if span else share_cross[:0]]
            )  # fmt: skip
        if sel[POD].size:
            k = sel[POD]
            ids[k, 4 : 4 + span] = self.leaf_up[leaf_s[k], :span]
            ids[k, 4 + span : 4 + 2 * span] = self.leaf_down[leaf_d[k], :span]
            shares[k, 4 : 4 + 2 * span] = share_pod[4:]
        if sel[CROSS].size:
            k = sel[CROSS]
            at = np.cumsum([4, span, pod_span, pod_span, span])
            ids[k, at[0] : at[1]] = self.leaf_up[leaf_s[k], :span]
            ids[k, at[1] : at[2]] = self.pod_up[pod_s[k], :pod_span]
            ids[k, at[2] : at[3]] = self.pod_down[pod_d[k], :pod_span]
            ids[k, at[3] : at[4]] = self.leaf_down[leaf_d[k], :span]
            shares[k, 4 : at[4]] = share_cross[4:]

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
        counted = self._label_counts(
            src, dst, klass, n_classes, (kind, leaf_s, leaf_d, pod_s, pod_d)
        )
        if counted is None:
            return None
        pieces, most = counted
        table = self._repeated_shares(most)
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

    def _label_counts(self, src, dst, klass, n_classes: int, kinds: tuple):
        """Per class, (links, how many of its connections cross each, the share's row of
        :meth:`_repeated_shares`) for every label its connections name, and the largest
        count; None where a route would cross a link the fabric lacks."""
        kind, leaf_s, leaf_d, pod_s, pod_d = kinds
        s, c = self.n_spines, self.n_cores
        dev = self.device_links
        host = np.flatnonzero(kind == HOST)
        between = np.flatnonzero(kind >= LEAF)
        pods = np.flatnonzero(kind >= POD)
        cross = np.flatnonzero(kind == CROSS)
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
        return pieces, most

    def _repeated_shares(self, most: int) -> np.ndarray:
        """Row r, column j: j additions of share r in a row (as bincount adds them; column 0
        none, so that a count indexes its row as it is); rows: a device link's share, a
        leaf link's, a pod's up and down core links'."""
        s, c = self.n_spines, self.n_cores
        share = self.share_cross
        values = [
            1.0,
            *([share[4]] if s else []),
            *([share[4 + s], share[4 + s + s * c]] if c else []),
        ]
        table = np.zeros((len(values), most + 1))
        table[:, 1:] = np.cumsum(np.repeat(np.array(values)[:, None], most, axis=1), axis=1)
        return table

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
