"""Which collective algorithm each communication group uses, as NCCL's tuner would choose.

NCCL picks an algorithm and a protocol per call from its cost model (``tuning.cc``): NVLink
SHARP (NVLS) for all-reduce inside an NVSwitch domain that supports it (Hopper and later),
rings for large messages across hosts, double binary trees where a ring's ``2(n-1)`` latency
steps would dominate (many ranks, small buffers). Across hosts we compare, as NCCL does, the
predicted time of ring and tree each with its fastest protocol (LL, LL128, Simple:
:func:`simulator.collectives.nccl_tuning.fastest_protocol`, NCCL 2.20.3's latencies and bandwidths,
for the network bandwidth of the group's GPUs on one host: a channel per GPU and NIC).
Inside a node NVLS (Simple only, 23 us of latency in NCCL's model) against the ring with its
fastest protocol by the same model at the host's NVLink bandwidth: a ring's LL wins below
about 512 KiB over 8 H100 (15 us against 23), NVLS above. Without that bandwidth the choice is
by bytes moved alone (``S (n+1)/n`` each way at NVLS's efficiency against the ring's
``2 (n-1)/n S``: NVLS from 4 ranks up). A scenario can force an algorithm per stream
(``parallelism.collectives``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from simulator.collectives.algorithms import ALGORITHMS
from simulator.collectives.nccl_tuning import (
    ALGORITHM_EFFICIENCY,
    channels_per_host,
    fastest_protocol,
)
from simulator.infeasible import InfeasibleError

NVLS_KINDS = ("all_reduce",)


@dataclass(frozen=True)
class NetworkFacts:
    """What the choice needs to know of the cluster.

    ``gpus_per_host``: devices per scale-up (NVLink) domain, numbered host by host;
    ``nvls``: the domain's switch reduces in-network; ``inter_Bps``/``inter_latency_s``: one
    GPU's bandwidth and one hop's latency across hosts; ``torus``: devices form a torus;
    ``intra_Bps``: the slowest link's capacity between two GPUs of one host (B/s; None:
    unknown), the bandwidth NCCL's model reads for a collective inside the host.
    """

    gpus_per_host: int
    nvls: bool = False
    inter_Bps: float = 50e9
    inter_latency_s: float = 5e-6
    torus: bool = False
    intra_Bps: float | None = None


def hosts_spanned(group: tuple[int, ...], facts: NetworkFacts) -> int:
    """Hosts the ranks of ``group`` sit on (ranks numbered host by host)."""
    return len(members_per_host(tuple(group), facts.gpus_per_host))


@lru_cache(maxsize=256)
def members_per_host(group: tuple[int, ...], gpus_per_host: int) -> tuple[int, ...]:
    """Members of ``group`` on each host it spans (ranks numbered host by host), in order of
    first appearance: found once per group (a 1,024-rank data-parallel group is chosen for
    at every bucket size of every stage)."""
    return tuple(Counter(r // gpus_per_host for r in group).values())


def choose_algorithm(
    kind: str, group: tuple[int, ...], size: float, facts: NetworkFacts | None
) -> str | None:
    """The algorithm for one ``kind`` collective over ranks ``group`` (None: the engine's
    default, ring; direct for all-to-all and send/recv)."""
    if facts is None or len(group) < 2 or kind in ("all_to_all", "send_recv"):
        return None
    hosts = hosts_spanned(group, facts)
    n = len(group)
    if hosts == 1:
        if not (facts.nvls and kind in NVLS_KINDS):
            return None
        if facts.intra_Bps is None:
            # NVLS moves S (n+1)/n each way at its efficiency, a ring 2 (n-1)/n S: from 4 up
            return "nvls" if (n + 1) / ALGORITHM_EFFICIENCY["nvls"] < 2 * (n - 1) else None
        nvls = fastest_protocol(kind, "nvls", n, 1, size, facts.intra_Bps)[1]
        ring = fastest_protocol(kind, "ring", n, 1, size, facts.intra_Bps)[1]
        return "nvls" if nvls < ring else None
    if kind != "all_reduce" or facts.torus:
        return None
    # NCCL's bus bandwidth is its channels' across hosts, a channel per GPU and NIC
    members = members_per_host(tuple(group), facts.gpus_per_host)
    bus = facts.inter_Bps * channels_per_host(list(members))
    ring = fastest_protocol(kind, "ring", n, hosts, size, bus)[1]
    tree = fastest_protocol(kind, "tree", n, hosts, size, bus)[1]
    return "tree" if tree < ring else None


IMPLEMENTS = {name: a.kinds for name, a in ALGORITHMS.items()}  # what each implements


def algorithm_for(
    stream: str,
    kind: str,
    group: tuple[int, ...],
    size: float,
    facts: NetworkFacts | None,
    forced: str = "auto",
) -> str | None:
    """The algorithm of one collective on ``stream``: ``forced`` (from the scenario's
    ``parallelism.collectives``) where it implements ``kind``, else the automatic choice.
    ValueError where a forced algorithm cannot run on this group."""
    if forced == "auto" or kind not in IMPLEMENTS.get(forced, ()) or len(group) < 2:
        return choose_algorithm(kind, group, size, facts)
    if forced == "nvls" and (facts is None or not facts.nvls or hosts_spanned(group, facts) > 1):
        raise InfeasibleError(
            f"parallelism.collectives.{stream}: nvls needs each {stream} group inside one "
            "NVLink domain with NVLS support"
        )
    if forced == "torus" and (facts is None or not facts.torus):
        raise InfeasibleError(f"parallelism.collectives.{stream}: torus needs a torus topology")
    return forced
