"""Run collective plans on a FlowNetwork: route each transfer, build flow classes, chain phases.

A collective issued by one representative group may stand for ``copies``: other groups doing
the same collective at the same time (the 2,048 TP groups of a large job). Their transfers are
routed too, and each representative transfer becomes a flow class whose per-link counts say
how many copies cross each link (fractions where load balancing spreads a connection over
several paths; DESIGN.md, Scale), so contention between the copies stays real while the
simulation follows one group. Routing and counting are done once per (plan shape, copies)
and reused for every size.

A phase of more than 256 transfers (an all-to-all over 64 ranks has 4,032) becomes one flow
class per kind of transfer - same path length (inside a host, under a leaf, through a spine,
through a core) and same bytes - whose counts add the transfers' link use: the transfers of
a symmetric pattern get equal max-min rates anyway, and the water-filling stays small.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.collectives.plan import CollectivePlan, Node
from simulator.engine.network import FlowClass, FlowNetwork, LinkTable

_SHAPES = itertools.count()  # unique pattern ids for rate reuse
MERGE_ABOVE = 256  # transfers in a phase beyond which equal ones share a flow class


@dataclass(frozen=True)
class _Geometry:
    """A routed phase: one flow class per transfer (or per merged kind of transfer), whose
    ``bytes_`` is its share of the collective's size (bytes x steps / size); the run scales
    it by the size."""

    classes: list[FlowClass]


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
    ):
        self.network = network
        self.links: LinkTable = network.links
        self.router = router
        self.host_of = host_of or {}
        self.switch_of_host = switch_of_host or {}
        self._geometry: dict[tuple, list[_Geometry]] = (
            geometry_cache if geometry_cache is not None else {}
        )
        self._routes: dict[tuple, tuple[np.ndarray, np.ndarray]] = (
            route_cache if route_cache is not None else {}
        )

    def _map(self, node: Node, mapping: dict[int, int], first: int) -> Node:
        if isinstance(node, str):
            return self.switch_of_host[self.host_of[first]]
        return mapping[node]

    def _route(self, src: Node, dst: Node, key: int) -> tuple[np.ndarray, np.ndarray]:
        """Link ids and the share of the connection's bytes on each (1.0 on a single path);
        memoised per (src, dst, key), as routing is a pure function of them."""
        memo = self._routes.get((src, dst, key))
        if memo is not None:
            return memo
        spread = getattr(self.router, "spread", None)
        if spread is None:
            ids = self.links.ids(self.router.path(src, dst, key))
            memo = ids, np.ones(ids.size)
        else:
            pairs = spread(src, dst, key)
            ids = self.links.ids([e for e, _ in pairs])
            memo = ids, np.array([w for _, w in pairs], dtype=float)
        self._routes[(src, dst, key)] = memo
        return memo

    def geometry(
        self, plan: CollectivePlan, copies: Sequence[Sequence[int]] = (), copies_key=None
    ) -> list[_Geometry]:
        """Route ``plan`` for its group and every copy; cached by shape (and by
        ``copies_key`` when given, which must name the set of copies uniquely)."""
        copies_id = copies_key if copies_key is not None else tuple(map(tuple, copies))
        key = (
            plan.kind,
            plan.algorithm,
            plan.group,
            copies_id,
            tuple((len(p.transfers), p.steps, p.latency_hops) for p in plan.phases),
        )
        cached = self._geometry.get(key)
        if cached is not None:
            return cached
        groups = [plan.group, *[tuple(c) for c in copies]]
        mappings = [dict(zip(plan.group, g, strict=True)) for g in groups]
        out = []
        size = plan.size_bytes or 1.0
        for phase in plan.phases:
            merge = len(phase.transfers) > MERGE_ABOVE
            classes: dict[tuple, list] = {}  # class key -> [ids parts, weight parts, tail, f]
            for j, t in enumerate(phase.transfers):
                path_ids = self.links.ids(self.router.path(t.src, t.dst, j))
                tail = phase.latency_count * float(self.links.latency[path_ids].sum())
                factor = t.bytes_ * phase.steps / size
                cls = classes.setdefault(
                    (path_ids.size, factor) if merge else (j,), [[], [], tail, factor]
                )
                for g, m in zip(groups, mappings, strict=True):
                    src, dst = self._map(t.src, m, g[0]), self._map(t.dst, m, g[0])
                    ids, weights = self._route(src, dst, j)
                    cls[0].append(ids)
                    cls[1].append(weights)
                cls[2] = max(cls[2], tail)
            flows = []
            for ids_parts, weight_parts, tail, factor in classes.values():
                ids, inverse = np.unique(np.concatenate(ids_parts), return_inverse=True)
                counts = np.bincount(inverse, weights=np.concatenate(weight_parts))
                flows.append(FlowClass(ids, counts, factor, tail, (next(_SHAPES), len(flows))))
            out.append(_Geometry(flows))
        self._geometry[key] = out
        return out

    def run(
        self,
        plan: CollectivePlan,
        on_done: Callable[[], None],
        copies: Sequence[Sequence[int]] = (),
        copies_key=None,
    ) -> None:
        """Run the phases of ``plan`` one after another, then call ``on_done``."""
        geometry = self.geometry(plan, copies, copies_key)
        scale = plan.size_bytes / plan.efficiency

        def start(i: int) -> None:
            if i == len(geometry):
                on_done()
                return
            self.network.submit(geometry[i].classes, lambda: start(i + 1), scale)

        start(0)
