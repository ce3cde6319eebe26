"""NCCL's own device memory on one rank (B): the buffers of the communicators its step uses,
allocated by NCCL outside PyTorch's caching allocator.

NCCL gives each channel of a connection a buffer per protocol (NVIDIA/nccl v2.23.4,
``src/init.cc``: LL 512 KiB, LL128 4.6875 MiB, SIMPLE 4 MiB, ``NCCL_BUFFSIZE``). Inside a host
the receiving GPU holds the three, each rounded up to 2 MiB (10 MiB), and the sending one a
2 MiB header (``src/transport/p2p.cc``): 12 MiB per channel of a ring (1 connection in, 1
out), the two sizes NVIDIA/nccl#1685 logs on H100. Across hosts, with GPUDirect RDMA
(``src/transport/net.cc``), the receiver holds 9.19 MiB and the sender 8.69 MiB (LL lives in
host memory): 17.9 MiB per channel. Send/receive (pipeline sends, ring attention, the expert
all-to-all) takes up to 32 channels per peer inside a host, 12 MiB each (an 8-GPU H100
all-to-all grew NCCL's memory by 3.3 GB in #1685; 7 peers x 384 MiB is 2.6 GiB), and one pool
per direction across hosts (32 channels x 16 x ``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB = 64 MiB).

Counted per rank: a ring over each group the step reduces or gathers over (TP, the
data-parallel group with CP, expert TP, expert data parallelism), ``channels`` of them
(``framework.nccl_channels``: 24, the count NCCL logs of H100/H200 nodes show most often, from
16 to 32), and send/receive to each peer it exchanges with (its pipeline neighbours, its ring
attention neighbours, every member of its expert-parallel group). NCCL >= 2.22 connects an
algorithm's buffers on its first use (``NCCL_RUNTIME_CONNECT``), so trees and NVLS (NVLink
SHARP: 256 MiB on 8 GPUs from 2.22, more before; NVIDIA's recipes turn it off to save memory)
are not counted: a floor. A torus (TPUs) has no NCCL: nothing.
"""

from __future__ import annotations

from simulator.plan.plan import Plan

MiB = 2**20
RING_IN_HOST = 12 * MiB  # per channel: receiver's 10 MiB + sender's 2 MiB
RING_ACROSS_HOSTS = (9.19 + 8.69) * MiB  # per channel, GPUDirect RDMA
P2P_IN_HOST = 12 * MiB  # per channel and peer inside a host
P2P_CHANNELS_PER_PEER = 32
P2P_POOL_ACROSS_HOSTS = 2 * 64 * MiB  # one pool per direction


def gpus_per_host(plan: Plan) -> int | None:
    """Devices per scale-up domain (ranks numbered host by host); None for a torus or an
    unknown cluster (no NCCL counted)."""
    if plan.network is not None:
        return None if plan.network.torus else plan.network.gpus_per_host
    topo = plan.scenario.cluster.topology
    node = getattr(topo, "node", None)
    return None if node is None else node.gpus


def nccl_bytes(plan: Plan, rank: int) -> float:
    """NCCL's buffers on ``rank`` (B): the module doc's count, with the framework's
    ``nccl_channels``; 0 when ``framework.nccl_buffers`` is off or there is no NCCL."""
    fw = plan.scenario.framework
    per_host = gpus_per_host(plan)
    if not fw.nccl_buffers or per_host is None:
        return 0.0
    grid = plan.grid
    host = rank // per_host

    def spans(group) -> bool:
        return any(r // per_host != host for r in group)

    rings = [grid.group(rank, "tp"), grid.group(rank, "dp", "cp")]
    if grid.ep > 1 or grid.expert_tp != grid.tp:
        rings += [grid.expert_tp_group(rank), grid.expert_dp_group(rank)]
    total = 0.0
    for group in {tuple(g) for g in rings if len(g) > 1}:
        per_channel = RING_ACROSS_HOSTS if spans(group) else RING_IN_HOST
        total += fw.nccl_channels * per_channel
    for peers in _exchanges(plan, rank):
        near = [p for p in peers if p // per_host == host]
        total += len(near) * P2P_CHANNELS_PER_PEER * P2P_IN_HOST
        total += P2P_POOL_ACROSS_HOSTS if len(near) < len(peers) else 0.0
    return total


def _exchanges(plan: Plan, rank: int) -> list[list[int]]:
    """The peers ``rank`` sends to and receives from, per communicator: its pipeline
    neighbours (the last stage's next is the first under interleaving), its context-parallel
    ring neighbours, the rest of its expert-parallel group."""
    grid, out = plan.grid, []
    for dim in ("pp", "cp"):
        group = grid.group(rank, dim)
        n = len(group)
        if n < 2:
            continue
        i = group.index(rank)
        cyclic = dim == "cp" or plan.chunks_per_stage > 1
        near = {i - 1, i + 1} if cyclic else {j for j in (i - 1, i + 1) if 0 <= j < n}
        out.append(sorted({group[j % n] for j in near} - {rank}))
    if grid.ep > 1:
        out.append([p for p in grid.ep_group(rank) if p != rank])
    return out
