"""One collective timed over a topology for a range of sizes, like nccl-tests
(``trainsim collective``), and a topology's summary (``trainsim topology``)."""

from __future__ import annotations

import math

import pandas as pd

from simulator.collectives import BUSBW_FACTORS, bus_bandwidth, plan_collective
from simulator.engine import time_collective
from simulator.engine.executor import channels_Bps, hop_bandwidth
from simulator.plan.collective_choice import choose_algorithm
from simulator.stages.facts import network_facts, network_model
from simulator.topology import Topology
from simulator.topology.summary import link_levels, summary
from simulator.units import parse_quantity

MAX_SIZES = 1000  # rows of one collective table; nccl-tests' 1 B..8 GiB at -f 2 is 34


def parse_sizes(spec: str) -> list[float]:
    """``"1MiB:8GiB"`` -> 1 MiB, 2 MiB, ... 8 GiB (doubling, as nccl-tests' -f 2);
    ``"1MiB:1GiB:4"`` multiplies by 4; ``"256MiB"`` is one size. At most ``MAX_SIZES``
    sizes; the count is computed before any list is built.

    >>> parse_sizes("1MiB:4MiB")
    [1048576.0, 2097152.0, 4194304.0]

    Raises
    ------
    ValueError
        For anything else, naming the part that is wrong.
    """
    parts = spec.split(":")
    if len(parts) > 3:
        raise ValueError(f"{spec!r} has {len(parts)} parts; want MIN:MAX[:FACTOR] or one size")
    lo = parse_quantity(parts[0], "bytes")
    if len(parts) == 1:
        if lo <= 0:
            raise ValueError(f"{spec!r}: a size must be positive")
        return [lo]
    hi = parse_quantity(parts[1], "bytes")
    try:
        factor = float(parts[2]) if len(parts) > 2 else 2.0
    except ValueError:
        raise ValueError(f"FACTOR {parts[2]!r} is not a number (in {spec!r})") from None
    if not math.isfinite(factor) or factor <= 1:
        raise ValueError(f"FACTOR {parts[2]!r} must be a finite number above 1 (in {spec!r})")
    if lo <= 0 or hi < lo:
        raise ValueError(f"bad size range {spec!r}: want MIN:MAX[:FACTOR], 0 < MIN <= MAX")
    count = math.floor(math.log(hi * (1 + 1e-12) / lo) / math.log(factor)) + 1
    if count > MAX_SIZES:
        raise ValueError(
            f"{spec!r} gives {count:,} sizes, more than {MAX_SIZES:,}; raise FACTOR "
            f"(nccl-tests doubles: 1B:8GiB is 34 sizes)"
        )
    sizes = [lo * factor**i for i in range(count)]
    return [x for x in sizes if x <= hi * (1 + 1e-12)]


def collective_table(
    topo: Topology,
    op: str,
    ranks: int | None = None,
    algorithm: str | None = None,
    sizes: list[float] | None = None,
    groups: int = 1,
    protocol_efficiency: bool = True,
) -> pd.DataFrame:
    """An nccl-tests-like table: for each size, the time of ``op`` over the first ``ranks``
    devices, its algbw and busbw (B/s), and the algorithm and NCCL protocol it ran with (the
    protocol NCCL's model picks by size; the algorithm asked for, the engine's default, ring or
    direct, for None, or for ``"auto"`` the one the plan would pick for a group like it: NVLS,
    ring or tree by NCCL's model, :func:`~simulator.plan.collective_choice.choose_algorithm`),
    with ``groups`` - 1 identical groups (the next blocks of devices) running the same
    collective at the same time.

    ValueError for an unknown ``op``, fewer than 2 ranks, fewer than 1 group, or more
    devices than the topology has.

    A ring all-reduce of 1 GiB on a DGX H100: its busbw is near NVLink's 450 GB/s x 0.8.

    >>> from simulator.api import build_topology, load
    >>> topo = build_topology(load("scenarios/examples/pipeline-1f1b.yaml").cluster)
    >>> row = collective_table(topo, "all_reduce", 8, "ring", [2**30]).iloc[0]
    >>> row.algorithm, row.protocol, round(row.busbw_Bps / 1e9)
    ('ring', 'Simple', 356)
    """
    ranks = _checked_ranks(topo, op, ranks, groups)
    model = network_model(topo)
    group = topo.devices[:ranks]
    copies = [topo.devices[g * ranks : (g + 1) * ranks] for g in range(1, groups)]
    bus = None
    if protocol_efficiency:  # NCCL's channels' total, as the executor plans it
        hop = hop_bandwidth(model.links, model.router, tuple(group))
        bus = channels_Bps(hop, topo.host_of, tuple(group))
    facts = network_facts(topo) if algorithm == "auto" else None
    rows = []
    for size in sizes or parse_sizes("1MiB:8GiB"):
        algo = algorithm
        if algorithm == "auto":  # the devices are numbered host by host, as ranks are
            algo = choose_algorithm(op, tuple(group), size, facts)
        plan = plan_collective(
            op, group, size, algo, model.locality, protocol_efficiency, bus_Bps=bus
        )
        seconds, _ = time_collective(model, plan, copies)
        algbw, busbw = bus_bandwidth(op, ranks, size, seconds)
        rows.append(
            {
                "size_bytes": size,
                "time_s": seconds,
                "algbw_Bps": algbw,
                "busbw_Bps": busbw,
                "algorithm": plan.algorithm,
                "protocol": plan.protocol,
            }
        )
    return pd.DataFrame(rows)


def _checked_ranks(topo: Topology, op: str, ranks: int | None, groups: int) -> int:
    """The ranks of :func:`collective_table` (every device for None); ValueError for an
    unknown ``op`` or counts the topology cannot hold."""
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown operation {op!r}; known: {', '.join(BUSBW_FACTORS)}")
    ranks = topo.num_devices if ranks is None else ranks
    if ranks < 2:
        raise ValueError(f"a collective needs 2 or more ranks, not {ranks}")
    if groups < 1:
        raise ValueError(f"groups must be 1 or more, not {groups}")
    if ranks * groups > topo.num_devices:
        raise ValueError(
            f"{groups} groups of {ranks} ranks need {ranks * groups} devices; "
            f"the topology has {topo.num_devices}"
        )
    return ranks


def topology_report(topo: Topology) -> tuple[dict, pd.DataFrame]:
    """Headline numbers and the per-level link table of ``topo``.

    >>> from simulator.api import build_topology, load
    >>> topo = build_topology(load("scenarios/examples/pipeline-1f1b.yaml").cluster)
    >>> meta, levels = topology_report(topo)
    >>> meta["devices"], meta["bisection_Bps"] / 1e12  # 8 GPUs; 4 x 450 GB/s each way
    (8, 1.8)
    >>> levels[["level", "links", "efficiency"]].to_dict("records")
    [{'level': 'gpu-nvswitch', 'links': 8, 'efficiency': 0.8}]
    """
    return summary(topo), link_levels(topo)


def fabric_line(info: dict) -> str:
    """A fat-tree's shape in hosts: leaves (rail or top-of-rack) and their host ports, pods,
    and every level's oversubscription.

    >>> from simulator.api import topology_from_file
    >>> pod = topology_from_file("topologies/dgx-h100-superpod.yaml", overrides=["nodes=4"])
    >>> for part in fabric_line(topology_report(pod)[0]).split("; "):
    ...     print(part)
    fabric: rail-optimised, 4 hosts per leaf group (4 host ports per leaf)
    1 pod(s) of 4 hosts
    oversubscription 1:1 leaf
    """
    rails = "rail-optimised" if info["rail_optimized"] else "top-of-rack leaves"
    per_leaf = info["hosts_per_leaf"]
    over = info["oversubscription"]
    levels = " / ".join(f"{r:g}:1 {name}" for r, name in zip(over, ("leaf", "spine"), strict=False))
    return (
        f"fabric: {rails}, {per_leaf:,} hosts per leaf group ({info['leaf_downlinks']:,} host "
        f"ports per leaf); {info['pods']:,} pod(s) of {info['hosts_per_pod']:,} hosts; "
        f"oversubscription {levels or 'none (one level)'}"
    )
