"""NCCL's tuning model: per (algorithm, protocol) latency and bandwidth, and the protocol choice.

Transcribed from NCCL 2.20.3, ``src/graph/tuning.cc`` (``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``; github.com/NVIDIA/nccl at commit b6475625, ``makefiles/version.mk``
2.20.3). NCCL predicts a collective's time as ``latency + S / algbw`` (us, with S in bytes and
algbw in GB/s as ``1000 x`` B/us) and runs the (algorithm, protocol) of least time; this
module does the same for the protocol of a given algorithm.

Protocols (NCCL's ``prims_ll.h``, ``prims_ll128.h``): LL stores 4 B of data with a 4 B flag in
each 8 B line (50% payload), LL128 120 B of data in each 128 B line (93.75%), Simple moves
plain data with a fence per chunk. NCCL's model rates their bus bandwidth against Simple's
``B`` (nChannels x channel bandwidth), which here is the bottleneck link of a hop:

- ring LL: ``B / 4`` (all-reduce, reduce, or several nodes) else ``B / 3``, capped at
  ``llMaxBw``; ring LL128: ``0.92 B`` (0.7 below 2 GPUs per node), capped at
  ``nChannels x perChMaxRingLL128Bw``;
- tree Simple ``min(0.92 B, nChannels x perChMaxTreeBw)`` (the 0.92 is the tree's
  :data:`ALGORITHM_EFFICIENCY`), tree LL that / 3.8 capped at
  ``llMaxBw``, tree LL128 that x 7/9 (one node) or 120/128 (several), capped at
  ``nChannels x perChMaxTreeLL128Bw``;
- NVLS: Simple only.

Latency (us): ``baseLat[a][p]`` once per collective plus ``hwLat`` per step - ring:
``(nsteps - nInterSteps) x intraLat + nInterSteps x interLat``; tree:
``2 ((ppn - 1) intraLat + log2(nNodes) interLat)``; NVLS: ``intraLat`` (+ ``interLat`` across
nodes) and no base. ``nsteps`` is 2(n-1) for all-reduce, n-1 for reduce-scatter and
all-gather, n else; ``nInterSteps`` 2 nNodes (all-reduce across nodes), nNodes - 1, nNodes.

Assumptions, where NCCL reads the machine: Hopper (compute capability 9.0) for the per-channel
caps, Intel host CPUs (DGX H100) for the multi-node ``llMaxBw`` row and the 1 us network post
overhead, NVLink inside a node (``hwLat`` NVLINK) and the network across nodes (NET), no extra
network latency (``latencyInter`` 0), LL128 enabled (NVLink, same compute capability), and
``nChannels`` = ceil(B / 20.6 GB/s): NCCL's channels each carry at most one NVLink's bandwidth
on Hopper (``SM90_NVLINK_BW``, topo.h). With that channel count the per-channel caps of LL128
and trees never bind (36.7 GB/s per channel > 0.92 x 20.6); ``llMaxBw`` does.

Each algorithm's own loss in its Simple protocol (:data:`ALGORITHM_EFFICIENCY`; tuning.cc,
NCCL 2.19-2.23): ring none; tree ``busBw *= .92``; NVLS ``nvlsEfficiency`` 0.85 on Hopper
(Blackwell 0.74; Hopper's is applied, as collectives do not know the accelerator
generation); direct and halving-doubling point-to-point puts, taken as 1.0 (no NCCL figure).
Link-level payload efficiency (NVLink packets, InfiniBand headers) is the link's, on the
topology's edges. The module sits in ``plan`` because the plan chooses algorithms by this
model (:mod:`simulator.plan.collective_choice`) and the collectives apply it.

>>> nccl_time("all_reduce", "ring", "LL", 8, 1, 1024, 360e9) * 1e6  # doctest: +ELLIPSIS
15.02...
>>> choose_protocol("all_reduce", "ring", 8, 1, 1024, 360e9), choose_protocol(
...     "all_reduce", "ring", 8, 1, 2**30, 360e9)
('LL', 'Simple')
"""

from __future__ import annotations

import math

PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_VERSION = "2.20.3"
_P = {p: i for i, p in enumerate(PROTOCOLS)}

# Latencies in us, bandwidths in GB/s (tuning.cc). Rows: algorithm; columns: LL, LL128, Simple.
BASE_LATENCY_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0)}
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 23.0)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0)},
}
# llMaxBws: one node by GPU (Hopper row), several nodes by CPU (Intel row): N1, N2, N4+.
LL_MAX_GBPS_ONE_NODE = 87.7
LL_MAX_GBPS_NODES = (39.0, 39.0, 20.4)
PER_CHANNEL_RING_LL128_GBPS = 36.7  # Hopper, any node count
PER_CHANNEL_TREE_GBPS = (38.7, 41.4, 36.0)  # Hopper N1, N2, N4+
PER_CHANNEL_TREE_LL128_GBPS = (36.7, 36.7, 29.0)
CHANNEL_GBPS = 20.6  # SM90_NVLINK_BW, topo.h: the bandwidth of one channel
NET_OVERHEAD_US = 1.0  # getNetOverhead on Intel x86; x3 for Simple
RING_PLATEAU = 1.4  # multi-node ring Simple all-reduce latency factor (compute capability >= 80)
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)  # fmt: skip
ALGORITHM_EFFICIENCY = {
    "ring": 1.0,
    "tree": 0.92,
    "direct": 1.0,
    "halving_doubling": 1.0,
    "hierarchical": 1.0,
    "torus": 1.0,
    "nvls": 0.85,
}
TUNED = ("ring", "tree", "nvls")  # NCCL's algorithms among ours; others run Simple
# NCCL's point-to-point operations (send/recv, and the all-to-all it builds from them) have no
# entry in the tuning model but a base cost of their own: a small send/recv between two H100
# over NVLink takes about 3 us in nccl-tests' sendrecv_perf (as quoted in NVIDIA/nccl#1487,
# 2024); less the 0.7 us GPU-to-GPU path latency our NVLink nodes give, a base of 2.3 us per
# operation, paid before the bytes as the tuned algorithms' baseLat is.
P2P_BASE_US = 2.3


def _log2i(x: int) -> int:
    return x.bit_length() - 1 if x > 0 else 0


def _node_index(nodes: int) -> int:
    return 0 if nodes <= 1 else 1 if nodes == 2 else 2


def protocols_for(algorithm: str) -> tuple[str, ...]:
    """The protocols NCCL's model offers for ``algorithm`` (NVLS: Simple only)."""
    return PROTOCOLS if algorithm in ("ring", "tree") else ("Simple",)


def _steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    """(nsteps, nInterSteps) of NCCL's ring model."""
    if kind == "all_reduce":
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    if kind in ("reduce_scatter", "all_gather"):
        return n - 1, nodes - 1
    return n, nodes


def bus_bandwidth_GBps(
    kind: str, algorithm: str, protocol: str, n: int, nodes: int, bus_Bps: float
) -> float:
    """NCCL's bus bandwidth (GB/s) of ``protocol`` given Simple's ``bus_Bps`` (B/s) before
    any algorithm factor; the tree's includes its 0.92, NVLS's its 0.85."""
    b = bus_Bps / 1e9
    channels = max(1, math.ceil(b / CHANNEL_GBPS))
    k = _node_index(nodes)
    ll_max = LL_MAX_GBPS_ONE_NODE if nodes <= 1 else LL_MAX_GBPS_NODES[k]
    if algorithm == "ring":
        if protocol == "LL":
            quarter = nodes > 1 or kind in ("all_reduce", "reduce")
            return min(ll_max, b * (1 / 4 if quarter else 1 / 3))
        if protocol == "LL128":
            ppn = n / nodes
            return min(b * (0.7 if ppn < 2 else 0.92), channels * PER_CHANNEL_RING_LL128_GBPS)
        return b
    if algorithm == "tree":
        tree = min(b * 0.92, channels * PER_CHANNEL_TREE_GBPS[k])
        if protocol == "LL":
            return min(tree / 3.8, ll_max)
        if protocol == "LL128":
            factor = 7 / 9 if nodes == 1 else 120 / 128
            return min(tree * factor, channels * PER_CHANNEL_TREE_LL128_GBPS[k])
        return tree
    if algorithm == "nvls":  # busBw *= nvlsEfficiency, as the tree's 0.92 above
        return b * ALGORITHM_EFFICIENCY["nvls"]
    return b


def latency_us(kind: str, algorithm: str, protocol: str, n: int, nodes: int) -> float:
    """NCCL's latency (us) of one collective: ``baseLat`` plus the per-step ``hwLat``."""
    p = _P[protocol]
    intra = HW_LATENCY_US["nvlink"][algorithm][p]
    inter = HW_LATENCY_US["net"][algorithm][p]
    base = BASE_LATENCY_US[algorithm][p]
    if algorithm == "ring":
        nsteps, inter_steps = _steps(kind, n, nodes)
        hw = intra if nodes == 1 else inter
        if kind in ("broadcast", "reduce"):
            # not sameChannels: Simple pays the tree's chunk latency per step (tuning.cc)
            if protocol == "Simple":
                hw = HW_LATENCY_US["nvlink" if nodes == 1 else "net"]["tree"][p]
            return base + nsteps * hw
        if nodes > 1:
            intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
        return base + (nsteps - inter_steps) * intra + inter_steps * inter
    if algorithm == "tree":
        return base + 2 * ((n // nodes - 1) * intra + _log2i(nodes) * inter)
    return intra + (inter if nodes > 1 else 0.0)


def step_latency_us(kind: str, algorithm: str, protocol: str, nodes: int) -> tuple[float, float]:
    """NCCL's per-step latency (us) of ``protocol`` on a hop inside a host and on one across
    hosts, as :func:`latency_us` charges each step (``hwLat``: NVLink and NET rows; across
    nodes a ring's intra-node steps pay at least the network post overhead; a ring's
    broadcast or reduce pays one kind of hop's on every step: NVLink's on one node, the
    network's across nodes, the tree's chunk latency in Simple). (0, 0) for algorithms NCCL's
    model has no steps for (NVLS: its whole latency is per collective; direct, halving-doubling,
    hierarchical, torus).

    The engine charges each step the larger of this and its hop's path latency: ``hwLat`` is
    what a step costs on the hardware NCCL tuned it on (protocol synchronisation included: a
    Simple step over NVLink 3.4 us against LL's 0.6); a slower hop shows through.
    """
    if algorithm not in ("ring", "tree"):
        return 0.0, 0.0
    p = _P[protocol]
    intra = HW_LATENCY_US["nvlink"][algorithm][p]
    inter = HW_LATENCY_US["net"][algorithm][p]
    if algorithm == "ring" and kind in ("broadcast", "reduce"):
        # every step pays one hop's latency: NVLink's on one node, the network's across nodes
        # (Simple: the tree's chunk latency), as latency_us charges them
        row = "tree" if protocol == "Simple" else "ring"
        hw = HW_LATENCY_US["nvlink" if nodes == 1 else "net"][row][p]
        return hw, hw
    if algorithm == "ring" and nodes > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
    return intra, inter


def algorithm_bandwidth_GBps(
    kind: str, algorithm: str, protocol: str, n: int, nodes: int, bus_Bps: float
) -> float:
    """NCCL's algorithm bandwidth (GB/s): bus bandwidth x n / nsteps (ring), 5/6 (NVLS) or
    1/2 (tree)."""
    bus = bus_bandwidth_GBps(kind, algorithm, protocol, n, nodes, bus_Bps)
    if algorithm == "ring":
        return bus * n / _steps(kind, n, nodes)[0]
    return bus * (5 / 6 if algorithm == "nvls" else 0.5)


def nccl_time(
    kind: str, algorithm: str, protocol: str, n: int, nodes: int, size: float, bus_Bps: float
) -> float:
    """Seconds NCCL's model predicts for ``size`` bytes (``ncclTopoGetAlgoTime``, one
    operation): latency (with the ring's multi-node plateau and the tree's correction by
    size) plus size / algbw. ValueError for an algorithm NCCL does not have."""
    if algorithm not in TUNED:
        raise ValueError(f"NCCL's tuning model has no {algorithm!r}; it has {', '.join(TUNED)}")
    lat = latency_us(kind, algorithm, protocol, n, nodes)
    bw = algorithm_bandwidth_GBps(kind, algorithm, protocol, n, nodes, bus_Bps)
    if algorithm == "tree":
        log_size = _log2i(int(size) >> 6)
        if log_size < len(TREE_CORRECTION[0]):
            bw *= TREE_CORRECTION[_P[protocol]][log_size]
    channels = max(1, math.ceil(bus_Bps / 1e9 / CHANNEL_GBPS))
    plateau = size / (channels * n) >= 64
    if algorithm == "ring" and protocol == "Simple" and nodes > 1 and kind == "all_reduce":
        lat *= RING_PLATEAU if plateau else 1.0
    return (lat + size / (1000 * bw)) * 1e-6


def fastest_protocol(
    kind: str, algorithm: str, n: int, nodes: int, size: float, bus_Bps: float
) -> tuple[str, float]:
    """(protocol, seconds) of least predicted time for ``algorithm``: what an algorithm choice
    compares across algorithms, as NCCL's ``topoGetAlgoInfo`` does. A tie keeps the first of
    LL, LL128, Simple, as NCCL's strict ``<`` does scanning them in that order."""
    best, best_t = "Simple", math.inf
    for p in protocols_for(algorithm):
        t = nccl_time(kind, algorithm, p, n, nodes, size, bus_Bps)
        if t < best_t:
            best, best_t = p, t
    return best, best_t


def choose_protocol(
    kind: str, algorithm: str, n: int, nodes: int, size: float, bus_Bps: float
) -> str:
    """The protocol of least predicted time for ``algorithm`` (Simple for algorithms NCCL
    does not tune)."""
    if algorithm not in TUNED:
        return "Simple"
    return fastest_protocol(kind, algorithm, n, nodes, size, bus_Bps)[0]


def channels_per_host(members_per_host: list[int]) -> int:
    """NCCL's channels across hosts for a group with these members on each host: a channel
    per GPU and NIC of the host with fewest members (1 inside one host), as
    :func:`simulator.collectives.algorithms.ring_channels` builds them. Its bus bandwidth is
    that many NICs'."""
    return min(members_per_host) if len(members_per_host) > 1 else 1


def base_latency_s(algorithm: str, protocol: str, nodes: int) -> float:
    """The part of NCCL's latency (s) paid once per collective, whatever its step count:
    ``baseLat`` for rings and trees; for NVLS, its whole latency (NCCL models no steps); for
    point-to-point puts (``direct``: send/recv, all-to-all) :data:`P2P_BASE_US`."""
    if algorithm == "direct":
        return P2P_BASE_US * 1e-6
    if algorithm not in TUNED:
        return 0.0
    if algorithm == "nvls":
        return latency_us("all_reduce", "nvls", "Simple", 2, nodes) * 1e-6
    return BASE_LATENCY_US[algorithm][_P[protocol]] * 1e-6


def protocol_factor(
    kind: str, algorithm: str, protocol: str, n: int, nodes: int, bus_Bps: float
) -> float:
    """The fraction of Simple's bus bandwidth ``protocol`` gets (1 for Simple): what the plan
    folds into its efficiency."""
    if algorithm not in TUNED or protocol == "Simple":
        return 1.0
    simple = bus_bandwidth_GBps(kind, algorithm, "Simple", n, nodes, bus_Bps)
    return bus_bandwidth_GBps(kind, algorithm, protocol, n, nodes, bus_Bps) / simple
