"""Warnings where a what-if study would mislead: settings that touch no traffic, a NIC capped by
its host link, communication groups that straddle the NVLink domain.

Each check is physics the simulator already gets right; the warning only says so before a user
draws a conclusion from a flat curve. Which ranks talk is taken from the rank grid
(:mod:`simulator.plan.grid`, rank ``r`` on device ``r``): every pair inside a process group is
treated as talking, a superset of any collective algorithm's pairs, so "no group crosses X"
means no traffic crosses X.

>>> from simulator.scenario import load_scenario_text
>>> from simulator.topology import build_topology
>>> s = load_scenario_text('''
... model: {name: llama3-8b, layers: 4}
... cluster:
...   accelerator: H100-SXM
...   topology: {kind: fat_tree, nodes: 2, nodes_per_leaf: 2, nic_bandwidth: 800 Gb/s,
...              oversubscription: [4]}
... parallelism: {tp: 8}
... training: {global_batch: 4, seq_len: 1024}
... ''')
>>> for w in topology_warnings(s, build_topology(s.cluster)): print(w[:60])
oversubscription 4:1 touches no traffic: every communication
NIC line rate 100 GB/s per direction (cluster.topology.nic_b
"""

from __future__ import annotations

from collections import defaultdict

from simulator.plan.grid import RankGrid
from simulator.scenario import Scenario
from simulator.scenario.schema import FatTreeTopology, TorusTopology
from simulator.topology import Topology

# Groups whose traffic is per layer (slide 42: TP belongs inside the node; EP and CP are the
# other per-layer collectives). DP and PP are expected to cross nodes and are not flagged.
_PER_LAYER = ("tp", "cp", "ep", "etp")


def rank_grid(scenario: Scenario) -> RankGrid:
    """The scenario's rank grid (degrees and layout order)."""
    p = scenario.parallelism
    return RankGrid(
        dp=scenario.dp, pp=p.pp, cp=p.cp, tp=p.tp, ep=p.ep, order=tuple(p.order), etp=p.etp
    )


def communication_groups(scenario: Scenario) -> dict[str, list[tuple[int, ...]]]:
    """Each kind of process group that communicates, with every group of that kind.

    ``dp`` is the gradient group (data x context parallel, as Megatron's distributed optimizer
    reduces over DP x CP); ``ep``, ``edp`` (expert data parallel) and, with an expert
    tensor-parallel degree other than tp, ``etp`` exist for MoE models.
    """
    grid = rank_grid(scenario)
    p = scenario.parallelism
    out: dict[str, list[tuple[int, ...]]] = {}
    for kind, dims in (("tp", ("tp",)), ("cp", ("cp",)), ("pp", ("pp",)), ("dp", ("dp", "cp"))):
        if all(getattr(grid, d) == 1 for d in dims):
            continue
        out[kind] = grid.groups(*dims)
    if scenario.model.moe is not None:
        if p.ep > 1:
            out["ep"] = sorted({grid.ep_group(r) for r in range(grid.size)})
        if p.etp != p.tp and p.etp > 1:
            out["etp"] = sorted({grid.expert_tp_group(r) for r in range(grid.size)})
        if grid.dp * grid.cp * grid.tp > p.ep * p.etp:
            out["edp"] = sorted({grid.expert_dp_group(r) for r in range(grid.size)})
    return out


def _leaf_and_pod(topo: Topology) -> tuple[dict[int, str], dict[str, int]]:
    """Device -> its NIC's leaf switch; leaf -> pod (from the graph's node kinds)."""
    g = topo.graph
    leaf_of: dict[int, str] = {}
    for d in topo.devices:
        nic = f"nic{d}"
        if nic in g:
            for nb in g.successors(nic):
                if g.nodes[nb].get("kind") == "leaf":
                    leaf_of[d] = nb
    pod_of: dict[str, int] = {}
    for leaf in set(leaf_of.values()):
        for nb in g.successors(leaf):
            if g.nodes[nb].get("kind") == "spine":
                pod_of[leaf] = g.nodes[nb].get("pod", 0)
                break
    return leaf_of, pod_of


def _spans(
    groups: dict[str, list[tuple[int, ...]]],
    where: dict[int, object],
    host_of: dict[int, int] | None = None,
) -> bool:
    """Whether two ranks of one group sit at different ``where`` (leaf, pod, host). With
    ``host_of``, only pairs on different hosts count: ranks of one host talk over NVLink."""
    for gs in groups.values():
        for grp in gs:
            if host_of is None:
                if len({where[r] for r in grp}) > 1:
                    return True
                continue
            sites = {(host_of[r], where[r]) for r in grp}
            if any(h1 != h2 and w1 != w2 for h1, w1 in sites for h2, w2 in sites):
                return True
    return False


def _fmt_ratio(x: float) -> str:
    """Downlink:uplink, as switch vendors write it: 4 -> "4:1"."""
    return f"{x:g}:1"


def _fat_tree_warnings(
    t: FatTreeTopology, topo: Topology, groups: dict[str, list[tuple[int, ...]]]
) -> list[str]:
    out: list[str] = []
    hosts = len(set(topo.host_of.values()))
    if hosts < 2:
        return out
    crosses_nodes = _spans(groups, topo.host_of)
    if not crosses_nodes:
        out.append(
            "no communication group spans two nodes: all traffic stays on NVLink, so NIC, "
            "PCIe and fabric settings (cluster.topology.nic_bandwidth, oversubscription, "
            "nodes_per_leaf, rail_optimized) touch no traffic"
        )
    leaf_of, pod_of = _leaf_and_pod(topo)
    over = list(t.oversubscription)
    # with PXN a connection between rails changes rails over NVLink, so hosts of one leaf
    # group reach each other under the leaves whatever their GPUs' rails
    reach: dict[int, object] = leaf_of
    if getattr(topo.router, "rails", 0):
        reach = {d: topo.graph.nodes[leaf].get("group", leaf) for d, leaf in leaf_of.items()}
    if crosses_nodes and leaf_of and over and over[0] > 1:
        if not _spans(groups, reach, topo.host_of):
            why = (
                f"all {t.nodes} nodes sit under one leaf group ({t.hosts_per_leaf} hosts each)"
                if t.nodes <= t.hosts_per_leaf
                else "every group's ranks share a leaf"
                if reach is leaf_of
                else "every group's ranks share a leaf group, whose rails PXN joins over NVLink"
            )
            out.append(
                f"oversubscription {_fmt_ratio(over[0])} touches no traffic: every "
                f"communication group stays under one leaf switch ({why}), and oversubscription "
                "only thins the leaf-spine links"
            )
    if t.levels >= 3 and len(over) > 1 and over[1] > 1 and len(set(pod_of.values())) == 1:
        # (at 1:1 above the pods a missing core changes nothing but a switch hop's latency)
        out.append(
            f"levels: 3 but all {len(pod_of)} leaves form one pod (nodes_per_pod "
            f"{t.hosts_per_pod or 'default: every host'}): no core level is built, so "
            "oversubscription "
            f"{_fmt_ratio(over[1])} above the pods touches nothing"
        )
    elif crosses_nodes and t.levels >= 3 and len(over) > 1 and over[1] > 1 and pod_of:
        pods = {d: pod_of.get(leaf, 0) for d, leaf in leaf_of.items()}
        if not _spans(groups, pods, topo.host_of):
            out.append(
                f"oversubscription {_fmt_ratio(over[1])} above the pods touches no traffic: "
                "every communication group stays inside one pod"
            )
    out += _host_link_warnings(topo)
    return out


def _host_link_warnings(topo: Topology) -> list[str]:
    """A NIC whose line rate exceeds its GPU's PCIe link is capped by the PCIe link."""
    g = topo.graph
    d = topo.devices[0]
    nic = f"nic{d}"
    if nic not in g or not g.has_edge(d, nic):
        return []
    pcie = g.edges[d, nic]["bandwidth"]
    ups = [g.edges[nic, nb]["bandwidth"] for nb in g.successors(nic) if nb != d]
    if not ups or max(ups) <= pcie:
        return []
    nic_bw = max(ups)
    return [
        f"NIC line rate {nic_bw / 1e9:,.0f} GB/s per direction (cluster.topology.nic_bandwidth"
        f" = {nic_bw * 8 / 1e9:,.0f} Gb/s) is faster than its {pcie / 1e9:,.0f} GB/s PCIe host "
        "link (cluster.topology.node.pcie_bandwidth): GPU-NIC traffic is capped at "
        f"{pcie / 1e9:,.0f} GB/s, so NIC speed-ups beyond it change nothing"
    ]


def _straddle_warnings(topo: Topology, groups: dict[str, list[tuple[int, ...]]]) -> list[str]:
    """Per-layer groups (TP, CP, EP) that leave their NVLink domain."""
    per_host: dict[int, int] = defaultdict(int)
    for d in topo.devices:
        per_host[topo.host_of[d]] += 1
    domain = max(per_host.values())
    if len(per_host) < 2:
        return []
    out = []
    for kind in _PER_LAYER:
        gs = groups.get(kind, [])
        if not gs:
            continue
        size = len(gs[0])
        spread = [len({topo.host_of[r] for r in grp}) for grp in gs]
        crossing = sum(1 for s in spread if s > 1)
        if not crossing:
            continue
        if size <= domain:
            if domain % size:
                fits = [k for k in range(size, 0, -1) if domain % k == 0][0]
                hint = f"a group size dividing {domain}, e.g. {fits}, stays inside"
            else:
                hint = (
                    "its ranks are strided by the inner dimensions of parallelism.order; "
                    "an order or degrees that keep it contiguous stay inside"
                )
            out.append(
                f"{crossing} of {len(gs)} {kind.upper()} groups ({size} ranks each) straddle "
                f"NVLink domains of {domain} GPUs although a group fits in one: their "
                f"{kind.upper()} traffic crosses the scale-out network ({hint})"
            )
        elif kind == "tp":
            out.append(
                f"TP groups of {size} ranks span {max(spread)} NVLink domains of {domain} GPUs: "
                "every layer's tensor-parallel collectives cross the scale-out network (TP "
                "belongs inside the NVLink domain, lecture 8 slide 42)"
            )
    return out


def topology_warnings(scenario: Scenario, topo: Topology) -> list[str]:
    """Warnings (plain sentences) about ``scenario`` on its built topology ``topo`` that a
    what-if study should see: settings that touch no traffic (oversubscription when every
    group stays under one leaf, fabric settings when no group leaves a node), a NIC faster
    than its PCIe host link, and TP/CP/EP groups that straddle the NVLink domain.

    Returns an empty list when the grid needs more devices than ``topo`` has (the run itself
    reports that) or when nothing applies.
    """
    grid = rank_grid(scenario)
    if grid.size > topo.num_devices or grid.size < 1:
        return []
    groups = communication_groups(scenario)
    out: list[str] = []
    t = scenario.cluster.topology
    if isinstance(t, FatTreeTopology) and topo.meta.get("kind") == "fat_tree":
        out += _fat_tree_warnings(t, topo, groups)
    if topo.meta.get("kind") != "torus":
        out += _straddle_warnings(topo, groups)
    out += _machine_warnings(scenario)
    return out


def _machine_warnings(scenario: Scenario) -> list[str]:
    """An accelerator on a machine description written for another: a topology file's NVLink
    rate that is not the accelerator's (the file's is used), a TPU on an NVSwitch node or a
    GPU on a TPU torus."""
    acc, t = scenario.cluster.accelerator, scenario.cluster.topology
    node = getattr(t, "node", None)
    out = []
    if isinstance(t, TorusTopology) != (acc.kind == "tpu") and t is not None:
        machine = {"torus": "a TPU torus", "nvswitch": "an NVSwitch node"}.get(
            t.kind, "NVSwitch nodes on a fat tree"
        )
        out.append(
            f"{acc.name} ({acc.kind}) runs on {machine} (cluster.topology): the machine "
            "description was written for another accelerator"
        )
    elif node is not None and node.nvlink_bandwidth is not None and acc.kind == "gpu":
        file_GBps, acc_GBps = node.nvlink_bandwidth / 1e9, acc.scale_up_bandwidth_Bps / 1e9
        if abs(file_GBps - acc_GBps) > 1e-6 * acc_GBps:
            out.append(
                f"the topology gives NVLink {file_GBps:,.0f} GB/s per GPU "
                f"(cluster.topology.node.nvlink_bandwidth) where the {acc.name} has "
                f"{acc_GBps:,.0f} GB/s: the topology's figure is used"
            )
    return out
