"""Collective algorithms as phases of point-to-point transfers.

``S`` is the full buffer (docs/design.md): the input of all-reduce and reduce-scatter, the output of
all-gather, the total a rank sends in all-to-all. With ``n`` ranks, per-link bandwidth ``B``
and per-step latency ``a`` on a non-blocking switch, the phases below take:

================== ============================================ ==================================
algorithm          all-reduce                                   reduce-scatter / all-gather
================== ============================================ ==================================
ring               2(n-1)/n S/B + 2(n-1) a                      (n-1)/n S/B + (n-1) a
                   (across hosts: one ring per local GPU, each leaving on its own NIC)
halving_doubling   2(n-1)/n S/B + 2 log2(n) a                   (n-1)/n S/B + log2(n) a
direct             2(n-1)/n S/B + 2 a                           (n-1)/n S/B + a
tree (double bin.) 2 S/B + 2 depth a                            -
nvls               (n+1)/n S/B + 2 a (in-switch reduction)      S/B + 2 a
hierarchical       intra-host ring RS, inter-host ring AR of S/g per rail, intra-host ring AG
torus              bidirectional ring RS dimension by dimension, then AG in reverse order
================== ============================================ ==================================

All-to-all is direct: every rank sends S/n to every other, (n-1)/n S/B + a.
Broadcast and reduce are pipelined chains: S/B + (n-1) a. The engine adds contention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat

import numpy as np

import simulator.collectives.deepep as deepep
import simulator.collectives.nccl_tuning as nccl_tuning
from simulator.collectives.nccl_tuning import ALGORITHM_EFFICIENCY
from simulator.collectives.plan import (
    CollectivePlan,
    Kind,
    Node,
    Phase,
    Transfer,
    TransferArrays,
    transfers_of,
)
from simulator.infeasible import InfeasibleError


@dataclass(frozen=True)
class Locality:
    """Where devices sit: their host (NVLink domain), NVLS switches, a torus shape."""

    host_of: dict[int, int] = field(default_factory=dict)
    nvls_switch: dict[int, Node] = field(default_factory=dict)
    torus_shape: tuple[int, ...] | None = None


def _ring(group: Sequence[int], bytes_: float, steps: int) -> Phase:
    n = len(group)
    transfers = tuple(Transfer(group[i], group[(i + 1) % n], bytes_) for i in range(n))
    return Phase(transfers, steps, ring=True, lockstep=n)


def _by_host(group: Sequence[int], loc: Locality) -> list[list[int]]:
    """``group``'s members host by host, in order of first appearance."""
    by_host: dict[int, list[int]] = {}
    for d in group:
        by_host.setdefault(loc.host_of.get(d, d), []).append(d)
    return list(by_host.values())


def ring_channels(group: Sequence[int], loc: Locality) -> list[list[int]]:
    """NCCL-style rings: when the group spans hosts with ``g`` members each, ``g`` rings
    (channels), each entering a host on one member and leaving it from another, so that each
    ring crosses the network on a different NIC (rail). As NCCL's search keeps a ring's
    network hop on one NIC index at both ends (``NCCL_CROSS_NIC``'s default avoids crossing
    rails), a ring leaves a host from the GPU whose local index the next host enters on: the
    hosts are walked in alternate directions (ring ``c`` goes ``c, c + 1, ..., c - 1`` on
    even hosts and back, ``c - 1, ..., c``, on odd ones), so on a rail-optimised fabric every
    hop between hosts stays on its rail - all of them with an even host count, all but the
    closing hop with an odd one, which PXN (when on) relays over NVLink to the next host's
    rail (:meth:`~simulator.topology.fat_tree.FatTreeRouter.relay`). Over hosts of unequal
    member counts, as many rings as the smallest host has members. One ring otherwise."""
    hosts = _by_host(group, loc)
    sizes = {len(v) for v in hosts}
    if len(hosts) < 2 or min(sizes) == 1:
        return [list(group)]
    if len(sizes) != 1:  # unequal hosts: as many rings as the smallest host has members,
        # each leaving every host from another member (rails may cross)
        return [
            [h[(c + i) % len(h)] for h in hosts for i in range(len(h))] for c in range(min(sizes))
        ]
    g = sizes.pop()
    rings = []
    for c in range(g):
        forward = [(c + i) % g for i in range(g)]  # enters on c, leaves from c - 1
        backward = [(c - 1 - i) % g for i in range(g)]  # enters on c - 1, leaves from c
        order = [forward if k % 2 == 0 else backward for k in range(len(hosts))]
        rings.append([h[i] for h, idx in zip(hosts, order, strict=True) for i in idx])
    return rings


def _rings(rings: list[list[int]], bytes_: float, steps: int) -> Phase:
    share = bytes_ / len(rings)
    transfers = tuple(t for r in rings for t in _ring(r, share, steps).transfers)
    return Phase(transfers, steps, ring=True, lockstep=len(rings[0]))


def ring(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """Ring all-reduce / reduce-scatter / all-gather over NCCL-style channels (each carries an
    equal share of the buffer), and pipelined chains for broadcast and reduce: NCCL runs them
    on the same rings, each channel a chain from (to) the root ``group[0]`` along its ring,
    carrying its share, so that across hosts every NIC carries a share, not one NIC it all."""
    n = len(group)
    if kind == "all_reduce":
        return [_rings(ring_channels(group, loc), size / n, 2 * (n - 1))]
    if kind in ("reduce_scatter", "all_gather"):
        return [_rings(ring_channels(group, loc), size / n, n - 1)]
    if kind in ("broadcast", "reduce"):
        rings = ring_channels(group, loc)
        share = size / len(rings)
        transfers = []
        for r in rings:
            k = r.index(group[0])
            chain = r[k:] + r[:k]  # from the root along the ring
            if kind == "reduce":
                chain.reverse()  # towards the root
            transfers += [Transfer(chain[i], chain[i + 1], share) for i in range(n - 1)]
        return [Phase(tuple(transfers), steps=1, latency_hops=n - 1, ring=True, lockstep=n - 1)]
    raise InfeasibleError(f"ring does not implement {kind}")


def _direct_exchange(group: Sequence[int], bytes_: float) -> Phase:
    return Phase(tuple(Transfer(a, b, bytes_) for a in group for b in group if a != b))


def direct(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    n = len(group)
    if kind in ("all_to_all", "reduce_scatter", "all_gather"):
        return [_direct_exchange(group, size / n)]
    if kind == "all_reduce":
        return [_direct_exchange(group, size / n), _direct_exchange(group, size / n)]
    if kind == "broadcast":
        return [Phase(tuple(Transfer(group[0], b, size) for b in group[1:]))]
    if kind == "reduce":
        return [Phase(tuple(Transfer(b, group[0], size) for b in group[1:]))]
    raise InfeasibleError(f"direct does not implement {kind}")


def halving_doubling(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """Recursive halving reduce-scatter then recursive doubling all-gather (Rabenseifner)."""
    n = len(group)
    if n & (n - 1):
        raise InfeasibleError(f"halving_doubling needs a power-of-two group, not {n}")
    halving = []
    dist, chunk = n // 2, size / 2
    while dist >= 1:
        halving.append(Phase(tuple(Transfer(group[i], group[i ^ dist], chunk) for i in range(n))))
        dist, chunk = dist // 2, chunk / 2
    doubling = list(reversed(halving))
    if kind == "all_reduce":
        return halving + doubling
    if kind == "reduce_scatter":
        return halving
    if kind == "all_gather":
        return doubling
    raise InfeasibleError(f"halving_doubling does not implement {kind}")


def _btree_parent(rank: int, n: int) -> int | None:
    """Parent in NCCL's in-order binary tree over ranks 0..n-1 (rank 0 is the root)."""
    if rank == 0:
        return None
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= n else up


def double_binary_trees(n: int) -> list[dict[int, int]]:
    """Child -> parent maps of NCCL's two complementary trees (the second mirrored, or shifted
    by one for odd n, so that most ranks are a leaf in one tree and interior in the other)."""
    first = {r: p for r in range(n) if (p := _btree_parent(r, n)) is not None}
    if n % 2 == 0:
        relabel = {r: n - 1 - r for r in range(n)}  # mirror
    else:
        relabel = {r: (r + 1) % n for r in range(n)}  # shift by one
    second = {relabel[c]: relabel[p] for c, p in first.items()}
    return [first, second]


@lru_cache(maxsize=64)
def _trees_and_depth(n: int) -> tuple[tuple[tuple[tuple[int, int], ...], ...], int]:
    """NCCL's two trees over ``n`` ranks as (child, parent) pairs in
    :func:`double_binary_trees`' order, and the deeper one's depth: a function of ``n``
    alone, made once per ``n`` (a 1,024-rank data-parallel group's trees are planned for
    every stage and size)."""
    trees = double_binary_trees(n)
    return tuple(tuple(t.items()) for t in trees), max(_depth(t) for t in trees)


@lru_cache(maxsize=64)
def _tree_ends(n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The children and the parents of both trees' edges over ``n`` ranks, in
    :func:`_trees_and_depth`'s order."""
    edges = [e for t in _trees_and_depth(n)[0] for e in t]
    return tuple(c for c, _ in edges), tuple(p for _, p in edges)


@lru_cache(maxsize=64)
def _tree_ends_array(n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_tree_ends` as read-only integer arrays (positions in the group)."""
    out = tuple(np.array(ends, dtype=np.int64) for ends in _tree_ends(n))
    for a in out:
        a.flags.writeable = False
    return out


def _depth(parents: dict[int, int]) -> int:
    """The most edges from a rank up to its root (each rank's depth found once, from its
    first ancestor whose depth is known: a root's is 0)."""
    depth: dict[int, int] = {}
    for r in parents:
        chain, x = [], r
        while x in parents and x not in depth:
            chain.append(x)
            x = parents[x]
        d = depth.get(x, 0)
        for y in reversed(chain):
            d += 1
            depth[y] = d
    return max(depth.values(), default=0)


def tree(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """Double binary tree all-reduce: each tree reduces then broadcasts half the buffer,
    pipelined in chunks (bytes cross each edge once, latency is paid per level).

    Over hosts of ``g > 1`` members each, NCCL's shape (``graph/trees.cc``): the double
    binary trees join the hosts, and inside each host the members form a chain under the
    host's tree node; there is one such tree pair per channel, a channel per local GPU (as
    the rings), each host's chain starting at another member, so every GPU's NIC carries a
    share: ``g`` channels x 2 trees of ``S / 2g`` each."""
    if kind != "all_reduce":
        raise InfeasibleError(f"tree does not implement {kind}")
    n = len(group)
    if n == 1:
        return []
    # every member on a host of its own (a data-parallel group of one GPU per node): no
    # chains, found by a set of the hosts rather than a list per host
    alone = len(set(map(loc.host_of.get, group, group))) == n
    hosts = [] if alone else _by_host(group, loc)
    g = len(hosts[0]) if hosts else 0
    if alone or len(hosts) < 2 or g < 2 or any(len(h) != g for h in hosts):
        depth = _trees_and_depth(n)[1]
        if all(type(d) is int for d in group):  # devices: the transfers as arrays
            children, parents = _tree_ends_array(n)
            at = np.array(group, dtype=np.int64)
            child, parent = at[children], at[parents]
            up = TransferArrays(child, parent, size / 2)
            down = TransferArrays(parent, child, size / 2)
        else:
            children, parents = _tree_ends(n)
            child = list(map(group.__getitem__, children))
            parent = list(map(group.__getitem__, parents))
            up = transfers_of(child, parent, repeat(size / 2))
            down = transfers_of(parent, child, repeat(size / 2))
        return [Phase(up, 1, depth), Phase(down, 1, depth)]
    trees, depth = _trees_and_depth(len(hosts))
    depth += g - 1
    share = size / (2 * g)
    edges: list[tuple[int, int]] = []  # (child, parent) of every channel's two trees
    for c in range(g):
        chains = [[h[(c + i) % g] for i in range(g)] for h in hosts]  # head first
        for t in trees:
            edges += [(chains[child][0], chains[parent][0]) for child, parent in t]
            edges += [(ch[i + 1], ch[i]) for ch in chains for i in range(g - 1)]
    children, parents = zip(*edges, strict=True)
    up = transfers_of(children, parents, repeat(share))
    down = transfers_of(parents, children, repeat(share))
    # a chunk's path: g - 1 chain hops inside a host, then the tree's levels between hosts
    return [Phase(up, 1, depth, fast_hops=g - 1), Phase(down, 1, depth, fast_hops=g - 1)]


def nvls(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """NVLink SHARP: the switch reduces (multimem load-reduce) and multicasts (multimem store).

    All-reduce: each GPU's buffer is read once through the switch (S up) and it receives its
    reduced slice (S/n down), then stores that slice (S/n up) and receives every slice by
    multicast (S down): S (n+1)/n each way, the two halves pipelined.
    """
    hosts = {loc.host_of[d] for d in group}
    if len(hosts) != 1 or next(iter(hosts)) not in loc.nvls_switch:
        raise InfeasibleError("nvls needs a group inside one NVLink domain with NVLS support")
    sw = loc.nvls_switch[next(iter(hosts))]
    n = len(group)
    up_bytes, down_bytes = {
        "all_reduce": (size * (n + 1) / n, size * (n + 1) / n),
        "reduce_scatter": (size, size / n),
        "all_gather": (size / n, size),
    }.get(kind, (None, None))
    if up_bytes is None:
        raise InfeasibleError(f"nvls does not implement {kind}")
    hops = 2 if kind == "all_reduce" else 1
    transfers = tuple(Transfer(d, sw, up_bytes) for d in group) + tuple(
        Transfer(sw, d, down_bytes) for d in group
    )
    return [Phase(transfers, 1, hops)]


def hierarchical(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """Intra-host ring reduce-scatter, inter-host ring all-reduce of each rank's S/g slice
    (one ring per local index, concurrently), intra-host ring all-gather."""
    if kind != "all_reduce":
        raise InfeasibleError(f"hierarchical does not implement {kind}")
    locals_ = _by_host(group, loc)
    g = len(locals_[0])
    if any(len(x) != g for x in locals_):
        raise InfeasibleError("hierarchical needs the same number of ranks on every host")
    h = len(locals_)
    phases: list[Phase] = []
    if g > 1:
        intra = tuple(t for x in locals_ for t in _ring(x, size / g, g - 1).transfers)
        phases.append(Phase(intra, g - 1, ring=True, lockstep=g))
    if h > 1:
        inter = tuple(
            t for i in range(g) for t in _ring([x[i] for x in locals_], size / g / h, 1).transfers
        )
        phases.append(Phase(inter, 2 * (h - 1), ring=True, lockstep=h))
    if g > 1:
        phases.append(Phase(phases[0].transfers, g - 1, ring=True, lockstep=g))
    return phases


def torus(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    """Bidirectional rings along each torus dimension in turn (reduce-scatter x, y, z, then
    all-gather z, y, x); each ring step sends half its chunk each way round."""
    shape = loc.torus_shape
    if shape is None or sorted(group) != list(range(_prod(shape))):
        raise InfeasibleError("torus needs the whole torus as its group")
    if kind not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise InfeasibleError(f"torus does not implement {kind}")
    rs: list[Phase] = []
    chunk = size
    stride = 1
    for d in shape:
        if d > 1:
            transfers = []
            for dev in range(_prod(shape)):
                x = (dev // stride) % d
                nxt = dev + (((x + 1) % d) - x) * stride
                prv = dev + (((x - 1) % d) - x) * stride
                transfers += [Transfer(dev, nxt, chunk / d / 2), Transfer(dev, prv, chunk / d / 2)]
            rs.append(Phase(tuple(transfers), d - 1))
            chunk /= d
        stride *= d
    ag = [Phase(p.transfers, p.steps) for p in reversed(rs)]
    return {"all_reduce": rs + ag, "reduce_scatter": rs, "all_gather": ag}[kind]


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def send_recv(kind: Kind, group: Sequence[int], size: float, loc: Locality) -> list[Phase]:
    if len(group) != 2:
        raise InfeasibleError("send_recv takes a group of two: (sender, receiver)")
    return [Phase((Transfer(group[0], group[1], size),))]


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm: the collectives it implements, the function that lays one
    out as phases of transfers (``phases(kind, group, size, locality)``), what it needs of
    the group or the topology (said when a forced choice is refused), and its bandwidth
    efficiency (:data:`~simulator.collectives.nccl_tuning.ALGORITHM_EFFICIENCY`, 1 where NCCL
    gives none). The scenario's ``parallelism.collectives``, the plan's choice and the
    engine all read this registry: a new algorithm is its function and one line here."""

    name: str
    kinds: tuple[str, ...]
    phases: Callable[..., list[Phase]]
    needs: str = ""

    @property
    def efficiency(self) -> float:
        return ALGORITHM_EFFICIENCY.get(self.name, 1.0)


_REDUCTIONS = ("all_reduce", "all_gather", "reduce_scatter")
ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("ring", _REDUCTIONS, ring),
        Algorithm("direct", (*_REDUCTIONS, "all_to_all"), direct),
        Algorithm("halving_doubling", _REDUCTIONS, halving_doubling, "a power-of-two group"),
        Algorithm("tree", ("all_reduce",), tree),
        Algorithm("nvls", _REDUCTIONS, nvls, "NVLink SHARP inside one NVLink domain"),
        Algorithm("hierarchical", ("all_reduce",), hierarchical),
        Algorithm("torus", _REDUCTIONS, torus, "a torus topology"),
    )
}
DEFAULT_ALGORITHM = {"all_to_all": "direct", "send_recv": "direct"}


def _phases(kind, group, size_bytes, algorithm, locality) -> list[Phase]:
    """The phases of one collective by its algorithm (DeepEP's all-to-all: ``size_bytes`` of
    tokens, one copy each; :mod:`simulator.collectives.deepep`)."""
    if kind == "send_recv":
        return send_recv(kind, group, size_bytes, locality)
    if len(group) == 1:
        return []
    if (routing := deepep.parse(algorithm)) is not None:
        return deepep.deepep_phases(kind, group, size_bytes, locality.host_of, *routing)
    try:
        fn = ALGORITHMS[algorithm].phases
    except KeyError:
        raise InfeasibleError(
            f"unknown algorithm {algorithm!r}; known: {', '.join(sorted(ALGORITHMS))}"
        ) from None
    return fn(kind, group, size_bytes, locality)


def plan_collective(
    kind: Kind,
    group: Sequence[int],
    size_bytes: float,
    algorithm: str | None = None,
    locality: Locality = Locality(),
    protocol_efficiency: bool = True,
    bus_Bps: float | None = None,
    protocol: str | None = None,
) -> CollectivePlan:
    """Decompose one collective into phases of transfers, with NCCL's protocol.

    ``algorithm`` None picks ring (direct for all-to-all and send/recv). ``bus_Bps`` (B/s), the
    bandwidth of the slowest link a hop of the group crosses, lets the plan pick the protocol
    NCCL's tuning model predicts fastest for the size (:mod:`~simulator.collectives.nccl_tuning`);
    without it the plan runs Simple. ``protocol`` forces one (LL and LL128 need ``bus_Bps`` for
    their bandwidth caps). The plan's efficiency is the algorithm's times the protocol's share
    of Simple's bandwidth, and it carries NCCL's per-collective base latency. With
    ``protocol_efficiency`` False the plan is the ideal algorithm (efficiency 1, Simple, no
    base latency or per-step floor), which the closed-form tests use. A plan on a torus runs
    Simple with no base latency: TPUs run XLA's collectives, not NCCL's.
    """
    algorithm = algorithm or DEFAULT_ALGORITHM.get(kind, "ring")
    group = tuple(group)
    if len(group) < 1:
        raise InfeasibleError("a collective needs at least one rank")
    phases = _phases(kind, group, size_bytes, algorithm, locality)
    if not protocol_efficiency or not phases:
        return CollectivePlan(kind, algorithm, group, size_bytes, tuple(phases))
    if locality.torus_shape is not None:  # a TPU torus runs XLA's collectives, not NCCL's
        eff = ALGORITHM_EFFICIENCY.get(algorithm, 1.0)
        return CollectivePlan(kind, algorithm, group, size_bytes, tuple(phases), eff)
    n = len(group)
    nodes = len(set(map(locality.host_of.get, group, group)))
    tuned = algorithm in nccl_tuning.TUNED
    if protocol is None:
        protocol = "Simple"
        if tuned and bus_Bps is not None:
            protocol = nccl_tuning.choose_protocol(kind, algorithm, n, nodes, size_bytes, bus_Bps)
    elif protocol not in nccl_tuning.protocols_for(algorithm):
        raise InfeasibleError(f"{algorithm} runs protocol Simple, not {protocol!r}")
    elif protocol != "Simple" and bus_Bps is None:
        raise InfeasibleError(f"protocol {protocol} needs the hop bandwidth bus_Bps")
    factor = 1.0
    if protocol != "Simple":
        factor = nccl_tuning.protocol_factor(kind, algorithm, protocol, n, nodes, bus_Bps)
    eff = ALGORITHM_EFFICIENCY.get(algorithm, 1.0) * factor
    base = nccl_tuning.base_latency_s(algorithm, protocol, nodes)
    step = tuple(t * 1e-6 for t in nccl_tuning.step_latency_us(kind, algorithm, protocol, nodes))
    return CollectivePlan(
        kind, algorithm, group, size_bytes, tuple(phases), eff, protocol, base, step
    )
