"""What the engine and the plan know of a topology, found once and kept on it
(``topo.derived``), and where ranks sit on its devices."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from itertools import compress, count, repeat
from operator import eq, is_not, ne

import numpy as np

from simulator.engine import NetworkModel
from simulator.engine.placement import DeviceLabels, RanksOnDevices
from simulator.infeasible import InfeasibleError
from simulator.plan.collective_choice import NetworkFacts
from simulator.schedule.perturb import SlowLink
from simulator.stages.bounds import Reach
from simulator.topology import Topology


def network_model(topo: Topology) -> NetworkModel:
    """The engine's view of a topology (links as arrays, router, locality), made once per
    topology and kept in ``topo.derived``: runs on one topology (a sweep's points, a plan
    search, failure trials) share its link table (from the builder's numbering when the
    topology has its own, else read from the graph: 0.13 s for the 131K links of 16K GPUs)
    and the collective routes it has learnt.

    >>> from simulator.api import build_topology, load
    >>> topo = build_topology(load("scenarios/examples/pipeline-1f1b.yaml").cluster)
    >>> model = network_model(topo)
    >>> len(model.links), model is network_model(topo)  # 8 GPUs' links up and down; kept
    (16, True)
    """
    model = topo.derived.get("network_model")
    if model is None or model.graph is not topo.graph:  # a graph swapped in: model it anew
        model = topo.derived["network_model"] = NetworkModel(
            topo.graph,
            topo.router,
            topo.host_of,
            topo.nvls_switch,
            topo.meta.get("shape") if topo.meta.get("kind") == "torus" else None,
            layout=topo.own_layout,
        )
    return model


def network_facts(topo: Topology) -> NetworkFacts:
    """What the plan's collective choice needs to know of ``topo``: devices per host, NVLS,
    one GPU's bandwidth and per-hop latency to another host, and the bandwidth between two
    GPUs of one host. Found once per topology (its graph, devices and hosts) and kept in
    ``topo.derived`` (as :func:`network_model`): a walk over every device's host, 1.5 ms at
    16K GPUs.

    >>> from simulator.api import build_topology, load
    >>> topo = build_topology(load("scenarios/examples/pipeline-1f1b.yaml").cluster)  # a DGX
    >>> facts = network_facts(topo)
    >>> facts.gpus_per_host, facts.nvls, facts.intra_Bps / 1e9  # 450 GB/s x 0.8 efficiency
    (8, True, 360.0)
    """
    kept = topo.derived.get("network_facts")
    reads = (topo.graph, topo.devices, topo.host_of)
    if kept is None or any(map(is_not, kept[0], reads)):  # one swapped in: found anew
        kept = topo.derived["network_facts"] = (reads, _network_facts(topo))
    return kept[1]


def _network_facts(topo: Topology) -> NetworkFacts:
    """:func:`network_facts`, found."""
    first = topo.devices[0]
    # whether each device shares the first's host, compared in C (16K devices at 16K GPUs)
    with_first = list(
        map(eq, map(topo.host_of.__getitem__, topo.devices), repeat(topo.host_of[first]))
    )
    mates = list(compress(topo.devices, with_first))
    other = topo.devices[with_first.index(False)] if not all(with_first) else None

    def capacity(path) -> float:
        return min(
            topo.graph.edges[e]["bandwidth"] * topo.graph.edges[e].get("efficiency", 1.0)
            for e in path
        )

    bw, lat = 50e9, 5e-6
    if other is not None:
        path = topo.path(first, other)
        bw = capacity(path)
        lat = sum(topo.graph.edges[e].get("latency", 0.0) for e in path)
    return NetworkFacts(
        gpus_per_host=len(mates),
        nvls=bool(topo.nvls_switch),
        inter_Bps=bw,
        inter_latency_s=lat,
        torus=topo.meta.get("kind") == "torus",
        intra_Bps=capacity(topo.path(first, mates[1])) if len(mates) > 1 else None,
    )


# Symmetric mode's water-fillings keep one link of each orbit of equivalent GPUs' own links
# (simulator/engine/orbits.py; exact): a switch for the tests that compare with and without.
SYMMETRIC_ORBITS = True


def _orbit_labels(plan, device_of: Mapping[int, int]) -> Mapping[int, int] | None:
    """Device -> the stage of its rank, in symmetric mode (the ranks of a stage do the same
    thing at the same time); None in full mode."""
    if not plan.symmetric:
        return None
    stages = plan.grid.coord_of_every_rank("pp")  # plan.stage_of of every rank
    if isinstance(device_of, RanksOnDevices):  # rank r on device r: two arrays, no dict
        return DeviceLabels(np.arange(stages.size), stages)
    stages = stages.tolist()
    return dict(zip(map(device_of.__getitem__, range(len(stages))), stages, strict=True))


def _placement(ranks: int, devices: list[int], numbered: int | None = None) -> Mapping[int, int]:
    """Rank r on ``devices[r]``: :class:`RanksOnDevices` when that is device r (the
    topologies number their devices 0 .. n-1), else a dict. ``numbered``: how many of
    ``devices`` from the first are their own position, when known (:func:`_numbered`)."""
    if numbered is None:
        numbered = _numbered(devices[:ranks])
    if ranks <= numbered:
        return RanksOnDevices(ranks)
    return dict(zip(range(ranks), devices, strict=False))


def _numbered(devices: list) -> int:
    """How many of ``devices``, from the first, equal their position (device r at r)."""
    return next(compress(count(), map(ne, devices, count())), len(devices))


def _numbered_devices(topo: Topology) -> int:
    """:func:`_numbered` of ``topo.devices``, kept in ``topo.derived`` while the list is the
    same (16K devices compared once per topology, not once per run)."""
    kept = topo.derived.get("numbered_devices")
    if kept is None or kept[0] is not topo.devices:
        kept = topo.derived["numbered_devices"] = (topo.devices, _numbered(topo.devices))
    return kept[1]


def _degraded(topo: Topology, perturbations) -> Topology:
    slow = [p for p in perturbations if isinstance(p, SlowLink)]
    if not slow:
        return topo
    graph = topo.graph.copy()
    for p in slow:
        if not graph.has_edge(p.src, p.dst):
            raise InfeasibleError(f"no link {p.src} -> {p.dst} in the topology")
        graph.edges[p.src, p.dst]["bandwidth"] *= p.fraction
    return dataclasses.replace(topo, graph=graph)


def reach_of(topo: Topology) -> Reach:
    """What the first GPU of ``topo`` can receive per second (:class:`Reach`), found once and
    kept on it: over all its links, and from other hosts over its network links (a link in
    from a node that other hosts reach, such as its NIC, counted at the least of its capacity
    and that node's own links in from outside the host; none on a torus, whose devices link
    to each other directly)."""
    kept = topo.derived.get("reach")
    if kept is None or kept[0] is not topo.graph:
        kept = topo.derived["reach"] = (topo.graph, _reach(topo))
    return kept[1]


def _reach(topo: Topology) -> Reach:
    g, device = topo.graph, topo.devices[0]
    into = list(g.in_edges(device, data=True))
    ingress = float(sum(d.get("bandwidth", 0.0) for _, _, d in into))
    if any(u in topo.host_of for u, _, _ in into):  # a device's own link: no host boundary
        return Reach(ingress)
    local = {d for d, h in topo.host_of.items() if h == topo.host_of[device]}
    outside = 0.0
    for u, _, d in into:
        feeds = g.in_edges(u, data=True)
        feed = sum(e.get("bandwidth", 0.0) for w, _, e in feeds if w not in local)
        outside += min(d.get("bandwidth", 0.0), feed)
    return Reach(ingress, outside or None, len(local))
