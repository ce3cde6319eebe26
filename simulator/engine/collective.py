"""Run collective plans on a FlowNetwork: route each transfer, build flow classes, chain phases.

A collective issued by one representative group may stand for ``copies``: other groups doing
the same collective at the same time (the 2,048 TP groups of a large job). Their transfers are
routed too, and each representative transfer becomes a flow class whose per-link counts say
how many copies cross each link (fractions where load balancing spreads a connection over
several paths; docs/design.md, Scale), so contention between the copies stays real while the
simulation follows one group. Routing and counting are done once per (plan shape, copies)
in a run and reused for its other sizes; runs on one network model share them, a run's copies
keyed also by the size the run first met the shape with (a class's bytes are a fraction of the
size, to the last bit a function of it), so a run is the same whatever ran before
(:meth:`CollectiveRunner.geometry`).

A ring (``Phase.lockstep``: the ring and hierarchical algorithms' rings and chains; a torus's
bidirectional dimension rings are not) is one flow class over all its hops: its chunks pass
every hop in turn, so the whole ring moves at the pace its slowest hop sets. Another phase of
more than 256 transfers (an all-to-all over 64 ranks has 4,032) becomes one flow class per
kind of transfer - same path length (inside a host, under a leaf, through a spine, through a
core), relayed over NVLink by PXN or not, and same bytes - whose counts add the transfers'
link use: the transfers of a symmetric pattern get equal max-min rates anyway, and the
water-filling stays small.

Routers that offer it route a whole phase at once, every copy's every transfer, as arrays of
link ids (a fat-tree's ``spread_ids`` and ``path_ids``; :mod:`simulator.topology.fat_tree_routes`)
with the same links, order and shares as routing each connection on its own, so the classes
are the same to the bit: a 1,024-rank tree and its copies (90K connections) take milliseconds,
not a second, and routing no longer grows with the data-parallel degree at Python speed. Where
a symmetric run's copies are folded (below), a fat-tree counts each class's links straight from
the connections' endpoints (``spread_counts``: per device, leaf and pod, no route built), the
same counts to the bit. Other routers (NVSwitch, torus, hashed ECMP sub-flows) route one
connection at a time, memoised.
A fat-tree also names the groups of links that every route crosses all or none of with equal
shares (a leaf's uplinks, a pod's core links); a class keeps one link per group for the
water-filling (``FlowClass.rating``), which gives the same rates over far fewer entries; and of
each GPU's two links to (from) its NIC, which routes cross together, the rating keeps the one of
smaller capacity (:meth:`~simulator.engine.reduced_rating.ReducedRating.dominated`: the
other never sets a bottleneck).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from operator import itemgetter

import numpy as np

from simulator.collectives.plan import CollectivePlan, Node
from simulator.engine.links import FlowClass, LinkTable
from simulator.engine.network import FlowNetwork
from simulator.engine.orbits import LinkOrbits
from simulator.engine.reduced_rating import ReducedRating
from simulator.engine.routed import (  # noqa: F401 - KeptPlans, RoutedShapes, delayed_phase: re-exported
    UNEVEN_COPIES,
    Geometry,
    KeptPlans,
    RoutedShapes,
    class_tails,
    class_tails_at_once,
    copies_per_link,
    delayed_phase,
    device_rows,
    devices_key,
    run_phase,
)
from simulator.engine.transfer_paths import TransferPaths

_SHAPES = itertools.count()  # unique pattern ids for rate reuse
MERGE_ABOVE = 256  # transfers in a phase beyond which equal ones share a flow class
_first, _second = itemgetter(0), itemgetter(1)


class CollectiveRunner:
    """Turns plans into flow batches on ``network``; ``router.path(src, dst, key)`` routes.

    ``switch_of_host`` maps a host to its NVLS switch, so a copy's switch endpoints follow its
    devices' host.
    """

    def __init__(
        self,
        network: FlowNetwork,
        router,
        host_of: dict[int, int] | None = None,
        switch_of_host: dict[int, Node] | None = None,
        geometry_cache: dict | None = None,
        route_cache: dict | None = None,
        orbits: LinkOrbits | None = None,
        copies_cache: dict | None = None,
        plan_cache: dict | None = None,
    ):
        self.network = network
        # equivalent GPUs' own links (symmetric mode): classes routed for this run get a
        # reduced rating with one link of each orbit (FlowClass.symmetric)
        self.orbits = orbits
        self.links: LinkTable = network.links
        self.router = router
        self.host_of = host_of if host_of is not None else {}
        self.switch_of_host = switch_of_host if switch_of_host is not None else {}
        self._geometry: dict[tuple, list[Geometry]] = (
            geometry_cache if geometry_cache is not None else {}
        )
        self._routes: dict[tuple, tuple[list[int], list[float]]] = (
            route_cache if route_cache is not None else {}
        )
        self._by_plan: dict[tuple, tuple[CollectivePlan, list[Geometry]]] = {}
        # collective plans and groups' bandwidths an executor found for this runner's
        # links, router and locality, for the runs that share ``plan_cache`` (a model's)
        self.plans: dict = plan_cache if plan_cache is not None else KeptPlans()
        # Shapes routed with a run's copies (``copies_key`` given): keyed by the copies'
        # devices, the run's link orbits (their token) and link tracking, and shared with
        # the runs on the network model that pass the same ``copies_cache`` (a sweep's
        # points of one layout, trials that slow ranks); a RoutedShapes keeps them within a
        # budget of bytes
        self._copies_geometry: dict[tuple, list[Geometry]] = (
            copies_cache if copies_cache is not None else RoutedShapes()
        )
        # this run's: each shape as first met (routed, the size it was routed at) and its
        # floored forms, so the run is the same whatever runs came before; the devices of
        # each (copy set, group) as a key
        self._here: dict[tuple, object] = {}
        self._copies_ids: dict[object, tuple] = {}
        self.rating = ReducedRating(self.links, router)
        self.paths = TransferPaths(self.links, router, self.host_of)

    def _map(self, node: Node, mapping: dict[int, int], first: int) -> Node:
        if isinstance(node, str):
            return self.switch_of_host[self.host_of[first]]
        return mapping[node]

    def _route(self, src: Node, dst: Node, key: int) -> tuple[list[int], list[float]]:
        """(link ids, share of the connection's bytes on each) along a connection (1.0 on a
        single path); memoised per (src, dst, key), as routing is a pure function of them."""
        memo = self._routes.get((src, dst, key))
        if memo is None:
            index = self.links.index
            spread = getattr(self.router, "spread", None)
            if spread is None:
                ids = list(map(index.__getitem__, self.router.path(src, dst, key)))
                memo = (ids, [1.0] * len(ids))
            else:  # an inter-pod spread lists ~550 links: map() in C, not a listcomp
                pairs = spread(src, dst, key)
                memo = (
                    list(map(index.__getitem__, map(_first, pairs))),
                    list(map(float, map(_second, pairs))),
                )
            self._routes[(src, dst, key)] = memo
        return memo

    def geometry(
        self, plan: CollectivePlan, copies: Sequence[Sequence[int]] = (), copies_key=None
    ) -> list[Geometry]:
        """Route ``plan`` for its group and every copy; cached by shape. ``copies_key``, when
        given, names the set of copies uniquely within this run: its classes then carry the
        run's orbits and fold their routes, and the shape is kept with the copies' devices,
        the orbits and whether links are tracked (``copies_cache``); without it the copies
        themselves are the key (``geometry_cache``). Either is shared by the runs on the
        network model.

        A class's bytes are a fraction of the collective's size, to the last bit a function
        of that size: a run routes each shape once, at the size it first meets it with, and
        uses that for its other sizes; the shapes of a run's copies are kept keyed by that
        first size too, so a run gets what it would get on a fresh model, whatever ran
        before. Shapes without ``copies_key`` are kept by shape alone, at the size first
        routed on the model (a table of one collective over 34 sizes routes it once; its
        rows may differ in the last bit from the same sizes timed alone)."""
        if copies_key is not None:  # the same plan object again: skip building the key
            hit = self._by_plan.get((id(plan), copies_key))
            if hit is not None and hit[0] is plan:
                return hit[1]
        key = self._shape_key(plan, copies, copies_key)
        out = self._here.get((key, plan.step_latency_s))
        if out is None:  # routed once per shape; tails again per protocol's step latency
            out = self._routed(plan, copies, copies_key, key)
        if copies_key is not None:
            self._by_plan[(id(plan), copies_key)] = (plan, out)
        return out

    def _shape_key(self, plan: CollectivePlan, copies, copies_key) -> tuple:
        """What routes ``plan`` alike: its kind, algorithm, group, copies (their devices, the
        run's orbits and link tracking when ``copies_key`` names them) and phases' shapes."""
        if copies_key is not None:
            devices = self._copies_ids.get((copies_key, plan.group))
            if devices is None:
                devices = devices_key(plan.group, copies)
                self._copies_ids[(copies_key, plan.group)] = devices
            orbits = None if self.orbits is None else self.orbits.token
            copies_id = (devices, orbits, self.network.fast)
        else:
            copies_id = tuple(map(tuple, copies))
        return (
            plan.kind,
            plan.algorithm,
            plan.group,
            copies_id,
            tuple(
                (len(p.transfers), p.steps, p.latency_hops, p.ring, p.fast_hops, p.lockstep)
                for p in plan.phases
            ),
        )

    def _routed(self, plan: CollectivePlan, copies, copies_key, key: tuple) -> list[Geometry]:
        """:meth:`geometry` of ``key`` not yet met in this run: routed (or found in the
        model's caches), its tails floored at the protocol's step latency."""
        cache = self._geometry if copies_key is None else self._copies_geometry
        floor = plan.step_latency_s
        here = self._here
        found = here.get(key)
        if found is None:
            # a run's copies: by the size first met in this run; other shapes (a table of
            # one collective over sizes: routed once) by the shape alone, as first routed
            first = key if copies_key is None else (key, plan.size_bytes)
            routed = cache.get(first)
            if routed is None:
                routed = cache[first] = self._route_plan(plan, copies, copies_key is not None)
            found = here[key] = (routed, first)
        routed, first = found
        out = routed
        if floor != (0.0, 0.0):
            out = cache.get((first, floor))
            if out is None:
                out = cache[(first, floor)] = [
                    self._floored(g, p, floor) for g, p in zip(routed, plan.phases, strict=True)
                ]
        here[(key, floor)] = out
        return out

    def _route_plan(
        self, plan: CollectivePlan, copies: Sequence[Sequence[int]], run_copies: bool = False
    ) -> list[Geometry]:
        """Each phase routed (every copy), its classes' tails from the paths' latency alone;
        ``run_copies``: the copies are a run's, named by its ``copies_key`` (its classes may
        carry the run's orbits and fold their routes: kept under a key that names both)."""
        orbits = self.orbits if run_copies else None
        groups = None  # the group and its copies as tuples, for routing one by one
        mappings = None
        out = []
        size = plan.size_bytes or 1.0
        same = self.rating.same_links()
        # Routes with each group of ``same`` folded to its first link, where the copies are a
        # run's (kept under a key that says links are not tracked: folded classes never meet
        # a run that tracks them) and link loads are not tracked (the full links name every
        # link a flow loads), and every group's links have one capacity: the folded route's
        # links and counts are then the rating the full one would be reduced to, entry for
        # entry in the same order, so the same bits (the 16K connections of a 1,024-rank
        # tree and its copies cross 68 links each through 32 spines, 6 folded)
        alike = same is not None and self.rating.alike(same)
        fold = run_copies and self.network.fast and alike
        whole_phase = getattr(self.router, "spread_ids", None) is not None
        for phase in plan.phases:
            merge = len(phase.transfers) > MERGE_ABOVE and not phase.lockstep
            # per class (one per transfer, or per merged kind): its factor, and the class of
            # each transfer; the size from the representative's path
            merged = self._merged_at_once(phase, size) if merge else None
            if merged is not None:
                factors, class_of, latency, tails, ends = merged
            else:
                factors, class_of, latency, tails = self._classes(phase, size, merge)
                ends = None
            crosses = self.paths.crosses(phase.transfers, ends)
            # every copy's every transfer as device arrays, for a router that takes a whole
            # phase at once (None: it takes none, or an endpoint is not a device)
            whole = self._connections(plan.group, copies, phase, ends) if whole_phase else None
            # each class's links and copies per link: counted from the endpoints where the
            # router can (folded routes), else from every copy's route of each class, in
            # (transfer, copy) order
            per_link = self._counted(whole, class_of, len(tails)) if fold else None
            firsts = per_link is not None  # folded links, each its group's first
            if per_link is None:
                routes = self._spread_phase(whole, class_of, len(tails), fold)
                if routes is None:
                    if mappings is None:
                        groups = [plan.group, *map(tuple, copies)]
                        mappings = [dict(zip(plan.group, g, strict=True)) for g in groups]
                    routes = self._route_phase(groups, mappings, phase, class_of, len(tails))
                n_links = len(self.links)
                per_link = [copies_per_link(ids, shares, n_links) for ids, shares in routes]
            flows = []
            for (links, counts), tail, factor in zip(per_link, tails, factors, strict=True):
                rating = self.rating.of(links, counts, same, firsts)
                pattern = (next(_SHAPES), len(flows))
                symmetric = None
                if orbits is not None:
                    symmetric = orbits.reduce(*(rating or (links, counts)))
                flows.append(FlowClass(links, counts, factor, tail, pattern, rating, symmetric))
            out.append(Geometry(flows, latency, class_of, crosses))
        return out

    def _classes(self, phase, size: float, merge: bool):
        """(factor of each class, class of each transfer, each transfer's path latency s,
        each class's tail s) of ``phase``: a class per transfer, per ring (lockstep), or with
        ``merge`` per kind of transfer (path length, relayed, bytes), numbered in order of
        first appearance; one transfer at a time."""
        factors: list[float] = []
        class_of: list[int] = []
        numbers: dict[tuple, int] = {}
        hops, latency = self.paths.of(phase.transfers)
        relayed = self.paths.relayed(phase.transfers) if merge else None
        for j, t in enumerate(phase.transfers):
            factor = t.bytes_ * phase.steps / size
            if phase.lockstep:  # a ring moves as one flow over all its hops
                kind: tuple = (j // phase.lockstep,)
            else:
                kind = (hops[j], relayed[j], factor) if merge else (j,)
            k = numbers.setdefault(kind, len(numbers))
            if k == len(factors):
                factors.append(factor)
            class_of.append(k)
        return factors, class_of, latency, class_tails(latency, phase, class_of, len(factors))

    def _merged_at_once(self, phase, size: float):
        """:meth:`_classes` of a merged phase as arrays, every transfer at once, plus the
        transfers' (source, destination) device arrays; None unless every endpoint is a
        device (an integer) and the router gives ``path_latencies`` or ``path_ids``, and
        ``relays``. Transfers held as arrays
        (:class:`~simulator.collectives.plan.TransferArrays`) are read as they are.
        Bytes are floats (a plan's divisions): as floats, bytes x steps is the loop's product.

        The same classes to the bit: the factors and tails are the same element-wise IEEE
        operations (bytes x steps / size; count x latency + fast), a class's tail the most
        of its transfers', and the kinds numbered in order of first appearance as the dict
        numbers them (a 1,024-rank tree phase has 2,046 transfers in 2 or 3 kinds)."""
        relays = getattr(self.router, "relays", None)
        if relays is None or phase.ring:
            return None
        arrays = getattr(phase.transfers, "arrays", None)  # TransferArrays: as they are
        if arrays is not None:
            src, dst, bytes_ = arrays()
        else:
            src, dst, bytes_ = map(np.array, zip(*phase.transfers, strict=True))
        if src.dtype.kind != "i" or dst.dtype.kind != "i":  # an NVLS switch, say
            return None
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
        found = self.paths.latency(src, dst)
        if found is None:
            return None
        hops, latency = found[0], np.array(found[1])
        relayed = relays(src, dst, self.links)
        factor = bytes_.astype(float, copy=False) * phase.steps / size
        # kinds: sorted (stably) by (hops, relayed, factor), a new kind where any differs,
        # each kind numbered by its first transfer's position
        order = np.lexsort((factor, relayed, hops))
        h, r, f = hops[order], relayed[order], factor[order]
        new = np.ones(order.size, bool)
        new[1:] = (h[1:] != h[:-1]) | (r[1:] != r[:-1]) | (f[1:] != f[:-1])
        first = order[new]  # each kind's first transfer (lexsort is stable)
        number = np.empty(first.size, np.int64)
        number[np.argsort(first)] = np.arange(first.size)
        class_of = np.empty(order.size, np.int64)
        class_of[order] = number[np.cumsum(new) - 1]
        factors = factor[np.sort(first)].tolist()
        tails = class_tails_at_once(latency, phase, class_of, len(factors))
        return factors, class_of, latency, tails, (src, dst)

    def _floored(self, routed: Geometry, phase, floor: tuple[float, float]) -> Geometry:
        """``routed`` with its classes' tails under NCCL's per-step latency ``floor``."""
        latency = self._at_least(routed.latency, routed.crosses, floor)
        at_once = isinstance(latency, np.ndarray)  # routed by _merged_at_once
        tails = (class_tails_at_once if at_once else class_tails)(
            latency, phase, routed.class_of, len(routed.classes)
        )
        classes = [replace(c, tail_s=t) for c, t in zip(routed.classes, tails, strict=True)]
        return Geometry(classes, routed.latency, routed.class_of, routed.crosses)

    @staticmethod
    def _at_least(latency: list[float] | np.ndarray, crosses, floor: tuple[float, float]):
        """Each transfer's path latency, at least NCCL's per-step latency of its protocol on
        its kind of hop (``floor``: inside a host, across hosts; s); ``crosses``: whether
        each transfer crosses hosts (:meth:`TransferPaths.crosses
        <simulator.engine.transfer_paths.TransferPaths.crosses>`)."""
        inside, across = floor
        if isinstance(latency, np.ndarray):  # np.maximum picks as max() does, element-wise
            return np.maximum(latency, np.where(crosses, across, inside))
        return [max(lat, across if c else inside) for lat, c in zip(latency, crosses, strict=True)]

    def _route_phase(
        self, groups, mappings, phase, class_of: list[int] | np.ndarray, n_classes: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """(link ids, shares) of each class: its transfers' routes in every copy, in
        (transfer, copy) order, routed one connection at a time."""
        ids: list[list[int]] = [[] for _ in range(n_classes)]
        shares: list[list[float]] = [[] for _ in range(n_classes)]
        for j, t in enumerate(phase.transfers):
            cls_ids, cls_shares = ids[class_of[j]], shares[class_of[j]]
            for g, m in zip(groups, mappings, strict=True):
                src, dst = self._map(t.src, m, g[0]), self._map(t.dst, m, g[0])
                route_ids, route_shares = self._route(src, dst, j)
                cls_ids += route_ids
                cls_shares += route_shares
        return [
            (np.array(i, dtype=np.int64), np.array(s, dtype=float))
            for i, s in zip(ids, shares, strict=True)
        ]

    def _spread_phase(
        self, connections, class_of, n_classes: int, folded: bool = False
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """As :meth:`_route_phase`, every connection of the phase (``connections``:
        :meth:`_connections`) routed at once by the router's ``spread_ids`` (identical
        routes, as arrays); None when there are no connections or the router declines."""
        if not connections:
            return None
        src, dst, n_groups = connections
        spread_ids = self.router.spread_ids
        routed = spread_ids(src, dst, self.links, folded=True) if folded else None
        if routed is None:
            routed = spread_ids(src, dst, self.links)
        if routed is None:
            return None
        ids, shares, lengths = routed
        entry_class = np.repeat(np.repeat(np.array(class_of), n_groups), lengths)
        if n_classes == 1:
            return [(ids, shares)]
        if n_classes <= 8:  # a few merged kinds: a mask each beats sorting every entry
            masks = [entry_class == k for k in range(n_classes)]
            return [(ids[m], shares[m]) for m in masks]
        order = np.argsort(entry_class, kind="stable")  # route order kept within a class
        bounds = np.cumsum(np.bincount(entry_class, minlength=n_classes))[:-1]
        return list(zip(np.split(ids[order], bounds), np.split(shares[order], bounds), strict=True))

    def _counted(
        self, connections, class_of, n_classes: int
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Each class's (links ascending, copies per link) as :func:`copies_per_link` of
        :meth:`_spread_phase`'s folded routes gives them, to the bit, counted by the router's
        ``spread_counts`` from the endpoints of ``connections`` (:meth:`_connections`); None
        when there are none, the router has no ``spread_counts`` or declines."""
        spread_counts = getattr(self.router, "spread_counts", None)
        if not connections or spread_counts is None:
            return None
        src, dst, n_groups = connections
        klass = np.repeat(np.asarray(class_of, np.int64), n_groups)
        return spread_counts(src, dst, klass, n_classes, self.links)

    def _connections(self, group, copies, phase, ends=None):
        """(sources, destinations, groups): every copy's every transfer of ``phase`` as device
        arrays in (transfer, copy) order, the group first; None when an endpoint is not a
        device (an NVLS switch). ``ends``: the transfers' (source, destination) devices as
        arrays, when known."""
        transfers = phase.transfers
        if ends is None and not all(type(t.src) is int and type(t.dst) is int for t in transfers):
            return None
        width = len(group)
        devices = device_rows(group, copies)
        n_groups = devices.shape[0]
        if ends is not None and len(set(group)) == width:  # positions by an array
            # over every device named (ends are devices, >= 0: path_ids accepted them)
            position = np.full(max(max(group), ends[0].max(), ends[1].max()) + 1, -1, np.int64)
            position[list(group)] = np.arange(width)
            at_src, at_dst = position[ends[0]], position[ends[1]]
            if min(at_src.min(), at_dst.min()) < 0:
                raise KeyError("a transfer's endpoint is not in the collective's group")
            src, dst = devices[:, at_src].T.ravel(), devices[:, at_dst].T.ravel()
        else:
            # a device's position in the group (the last one, as dict(zip(group, copy)) maps it)
            position = dict(zip(group, range(len(group)), strict=True))
            src = devices[:, [position[t.src] for t in transfers]].T.ravel()
            dst = devices[:, [position[t.dst] for t in transfers]].T.ravel()
        return src, dst, n_groups

    def run(
        self,
        plan: CollectivePlan,
        on_done: Callable[[], None],
        copies: Sequence[Sequence[int]] = (),
        copies_key=None,
    ) -> None:
        """Run the phases of ``plan`` one after another, then call ``on_done``."""
        geometry = self.geometry(plan, copies, copies_key)
        self.run_routed(geometry, plan.size_bytes / plan.efficiency, plan.base_latency_s, on_done)

    def run_routed(
        self,
        geometry: list[Geometry],
        scale: float,
        base_latency_s: float,
        on_done: Callable[[], None],
    ) -> None:
        """:meth:`run` of a plan already routed (its :meth:`geometry`), moving ``scale`` x
        each class's bytes (the plan's size over its efficiency) after ``base_latency_s``."""
        network = self.network
        classes = delayed_phase(geometry, base_latency_s)
        if classes is not None:  # one phase: submit it after the latency (as run_phase would)
            network.submit_later(base_latency_s, classes, on_done, scale)
        elif base_latency_s > 0:  # NCCL's per-collective latency, before any data moves
            network.call_in(base_latency_s, run_phase, network, geometry, 0, scale, on_done)
        else:
            run_phase(network, geometry, 0, scale, on_done)
