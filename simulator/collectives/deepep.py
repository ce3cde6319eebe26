"""DeepEP-style expert all-to-all: tokens deduplicated per node over RDMA, then forwarded over
NVLink (DeepSeek's dispatch and combine kernels, github.com/deepseek-ai/DeepEP).

The direct all-to-all sends each of a token's ``k`` expert copies to its expert's GPU, so a
token bound for three experts on one remote node crosses the network three times. DeepEP's
normal kernels send it once per destination node, to the GPU of the same local index there
(the rail peer), which forwards it over NVLink to the node's GPUs that hold its experts
(once per GPU, whatever the number of its experts there); tokens for the sender's own node go
over NVLink directly. Both run at once (the kernels pipeline RDMA and NVLink in chunks): one
phase of transfers here, and the engine's flows share the NICs and NVLink ports.

Routing is uniform over the experts, spread evenly over the group's GPUs; ``max_nodes`` limits
a token to that many nodes (DeepSeek-V3's node-limited routing, M = 4: the token's nodes are
chosen first, then its ``k`` experts among theirs). With ``m = min(max_nodes, H)`` nodes
eligible and ``k`` copies, the expected number of nodes a token reaches is ``d = m (1 - (1 -
1/m)^k)``, each of the ``H`` nodes with probability ``d / H``; a reached node receives ``c =
k / d`` copies on average, which land on ``u = g (1 - (1 - 1/g)^c)`` of its ``g`` GPUs. So a
rank with ``S`` bytes of tokens (one copy each) sends ``S d / H`` to each remote rail peer, a
rail peer forwards ``(H - 1) S (d / H) (u / g)`` to each other GPU of its node, and a rank sends
``S (d / H) (u / g)`` to each GPU of its own node. Combine is the same traffic reversed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from simulator.collectives.plan import Kind, Phase, Transfer
from simulator.infeasible import InfeasibleError

NAME = re.compile(r"^deepep_k(\d+)_m(\d+)$")


def name(top_k: int, max_nodes: int) -> str:
    """The algorithm's name for ``top_k`` experts per token over at most ``max_nodes`` nodes
    (a large ``max_nodes``: no node limit)."""
    return f"deepep_k{top_k}_m{max_nodes}"


def parse(algorithm: str) -> tuple[int, int] | None:
    """(top_k, max_nodes) of a DeepEP algorithm's name, None for another name."""
    m = NAME.match(algorithm)
    return (int(m.group(1)), int(m.group(2))) if m else None


def routing(top_k: int, max_nodes: int, hosts: int, per_host: int) -> tuple[float, float]:
    """(d, u): the expected nodes a token reaches and GPUs it reaches on each of them."""
    m = min(max_nodes, hosts)
    d = m * (1 - (1 - 1 / m) ** top_k)
    copies = top_k / d
    u = per_host * (1 - (1 - 1 / per_host) ** copies)
    return d, u


def deepep_phases(
    kind: Kind, group: Sequence[int], size: float, host_of: dict, top_k: int, max_nodes: int
) -> list[Phase]:
    """One all-to-all of ``size`` bytes of tokens per rank (one copy each; the module doc)."""
    if kind != "all_to_all":
        raise InfeasibleError(f"deepep implements all_to_all, not {kind}")
    by_host: dict = {}
    for r in group:
        by_host.setdefault(host_of.get(r, r), []).append(r)
    sizes = {len(v) for v in by_host.values()}
    if len(sizes) != 1:
        raise InfeasibleError("deepep needs the same number of the group's GPUs on every node")
    hosts, g = len(by_host), sizes.pop()
    d, u = routing(top_k, max_nodes, hosts, g)
    reach = size * d / hosts  # bytes of a rank's tokens bound for one node
    local = reach * u / g  # ... for one GPU of it
    members = list(by_host.values())
    transfers: list[Transfer] = []
    for h, ranks in enumerate(members):
        for j, src in enumerate(ranks):
            for other in members[:h] + members[h + 1 :]:
                transfers.append(Transfer(src, other[j], reach))  # RDMA, rail to rail
            for dst in ranks:
                if dst != src:  # own node's tokens, and the remote ones forwarded
                    transfers.append(Transfer(src, dst, local * hosts))
    return [Phase(tuple(transfers))]
