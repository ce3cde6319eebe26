"""NCCL's own device memory on one rank (B): the buffers of the communicators its step uses,
allocated by NCCL outside PyTorch's caching allocator.

NCCL gives each channel of a connection a buffer per protocol (NVIDIA/nccl v2.23.4,
``src/init.cc``: LL 512 KiB, LL128 4.6875 MiB, SIMPLE 4 MiB, ``NCCL_BUFFSIZE``). Inside a host
the receiving GPU holds the three (9.19 MiB, rounded up to 2 MiB granules: 10 MiB) and the
sending one a 2 MiB header (``src/transport/p2p.cc``): 12 MiB per channel of a ring (1
connection in, 1 out), the two sizes NVIDIA/nccl#1685 logs on H100. Across hosts, with
GPUDirect RDMA (``src/transport/net.cc``), the receiver holds the three (9.19 MiB) and the
sender LL128 and SIMPLE (8.69 MiB; its LL buffer lives in host memory): 17.9 MiB per
channel. A ring with ``k`` members on a host enters and leaves it once per channel, so a
host's members hold one network connection each way between them: per member and channel,
12 MiB plus a ``k``-th of the difference (NCCL rotates the ring per channel). Send/receive
(pipeline sends, the expert all-to-all) takes up to 32 channels per peer inside a host, 12 MiB
each (an 8-GPU H100 all-to-all grew NCCL's memory by 3.3 GB in #1685; 7 peers x 384 MiB is
2.8 GB), and one pool per direction across hosts (32 channels x 16 x
``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB = 64 MiB).

Counted per rank: a ring over each group the step reduces or gathers over (TP, CP's
all-gathers and reduce-scatters, the data-parallel group with CP, expert TP, expert data
parallelism), ``channels`` of them (``framework.nccl_channels``: 24, the count NCCL logs of
H100/H200 nodes show most often, from 16 to 32), and send/receive to each peer it exchanges
with (the stages holding its chunks' neighbours, every member of its expert-parallel group).
NCCL >= 2.22 connects an algorithm's buffers on its first use (``NCCL_RUNTIME_CONNECT``), so
trees and NVLS (NVLink SHARP: 256 MiB on 8 GPUs from 2.22, more before; NVIDIA's recipes turn
it off to save memory) are not counted. A torus (TPUs) has no NCCL: nothing. The memory
ledger takes each stage's first rank (the symmetric simulation's), whose groups other ranks
of the stage share in shape.
"""

from __future__ import annotations

from simulator.plan.plan import Plan
from simulator.topology.build import DEFAULT_NODE_GPUS

MiB = 2**20
RING_IN_HOST = 12 * MiB  # per channel: receiver's 10 MiB + sender's 2 MiB
RING_ACROSS_HOSTS = (9.19 + 8.69) * MiB  # per channel, GPUDirect RDMA
P2P_IN_HOST = 12 * MiB  # per channel and peer inside a host
P2P_CHANNELS_PER_PEER = 32
P2P_POOL_ACROSS_HOSTS = 2 * 64 * MiB  # one pool per direction


def gpus_per_host(plan: Plan) -> int | None:
    """Devices per scale-up domain (ranks numbered host by host); None for a torus (no NCCL
    counted). Without a topology the cluster is the default fabric's 8-GPU nodes."""
    if plan.network is not None:
        return None if plan.network.torus else plan.network.gpus_per_host
    topo = plan.scenario.cluster.topology
    if topo is None:
        return min(DEFAULT_NODE_GPUS, plan.scenario.num_gpus)
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
    rings = [grid.group(rank, "tp"), grid.group(rank, "cp"), grid.group(rank, "dp", "cp")]
    if grid.ep > 1 or grid.expert_tp != grid.tp:
        rings += [grid.expert_tp_group(rank), grid.expert_dp_group(rank)]
    total = 0.0
    for group in {tuple(g) for g in rings if len(g) > 1}:
        here = sum(1 for r in group if r // per_host == host)
        across = here < len(group)  # the ring leaves the host: a k-th of a network channel
        extra = (RING_ACROSS_HOSTS - RING_IN_HOST) / here if across else 0.0
        total += fw.nccl_channels * (RING_IN_HOST + extra)
    for peers in _exchanges(plan, rank):
        near = [p for p in peers if p // per_host == host]
        total += len(near) * P2P_CHANNELS_PER_PEER * P2P_IN_HOST
        total += P2P_POOL_ACROSS_HOSTS if len(near) < len(peers) else 0.0
    return total


def _exchanges(plan: Plan, rank: int) -> list[list[int]]:
    """The peers ``rank`` sends to and receives from, per communicator: the stages holding the
    model chunks next to its own (a V-shaped schedule's stage 0 holds both ends, so its
    neighbours are stage 1 alone), the rest of its expert-parallel group."""
    grid, out = plan.grid, []
    if grid.pp > 1:
        out.append(_pipeline_peers(plan, rank))
    if grid.ep > 1:
        out.append([p for p in grid.ep_group(rank) if p != rank])
    return out


def _pipeline_peers(plan: Plan, rank: int) -> list[int]:
    """The ranks of ``rank``'s pipeline group holding the model chunks before and after its
    own (:meth:`~simulator.pipelines.base.PipelineSchedule.model_chunk`), itself left out."""
    sched, grid = plan.schedule, plan.grid
    p, v = grid.pp, plan.scenario.parallelism.pipeline.virtual_stages
    group = grid.group(rank, "pp")  # stage s's rank is the s-th
    stage_of = {
        sched.model_chunk(p, v, st, j): st
        for st in range(p)
        for j in range(sched.chunks_per_stage(v))
    }
    mine = grid.coords(rank)["pp"]
    near = {stage_of.get(k + d) for k, st in stage_of.items() if st == mine for d in (-1, 1)}
    return sorted(group[st] for st in near - {None, mine})
