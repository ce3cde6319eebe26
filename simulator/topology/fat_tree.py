"""Fat-trees (folded Clos) of NVSwitch nodes, one NIC per GPU, 1 to 3 switch levels.

Structure, bottom up:

- each host is an NVSwitch domain of ``gpus_per_node`` GPUs; GPU ``i`` reaches NIC ``i`` of its
  host over PCIe;
- leaves: hosts are grouped ``nodes_per_leaf`` at a time. Rail-optimised, each group has one
  leaf per GPU index (rail) joining NIC ``i`` of every host in the group; otherwise one leaf
  (top of rack) joins every NIC of the group. ``D`` = a leaf's downlinks;
- spines: a leaf's uplinks carry ``D x nic / oversubscription[0]``, spread over
  ``S = min(ceil(D / oversubscription[0]), 32)`` spines (of its pod, with 3 levels);
- cores (3 levels): pods of ``leaves_per_pod`` leaves; each spine's uplinks carry its
  downlink total divided by ``oversubscription[1]``, spread over ``C`` cores shared by all pods.

Routing is up-down: a flow climbs only as high as its endpoints' lowest common switch level.
Among the equal-cost spines (and cores) a connection is either spread evenly (``ecmp_flows``
= 0: adaptive routing, packet spraying) or split into ``ecmp_flows`` sub-flows, each placed by
a deterministic hash (static ECMP, whose collisions are real and visible).

PXN (``pxn``, on by default on rail-optimised fabrics): a connection between GPUs of different
rails on different hosts first crosses NVLink to the GPU of its own host on the destination's
rail and leaves through that GPU's NIC, so it never crosses rails in the fabric. NCCL does this
from 2.12 on ("PCI x NVLink", on unless ``NCCL_PXN_DISABLE=1``; NVIDIA, "Doubling all2all
Performance with NVIDIA Collective Communication Library 2.12", 2022): an all-to-all between
two rail-optimised hosts then stays under the rails' leaves instead of climbing to the spines.
NCCL relays whatever would leave through a NIC other than the one on the destination's rail,
point-to-point and collective alike; so does the router (rings and trees rarely need it:
their channels cross hosts on one rail, :func:`~simulator.collectives.algorithms.ring_channels`).

>>> from simulator.scenario.topology_config import FatTreeTopology
>>> tree = FatTreeTopology(kind="fat_tree", nodes=4, nodes_per_leaf=2, nic_bandwidth=50e9)
>>> topo = fat_tree_topology(tree, nvlink_bandwidth=450e9)
>>> [e[1] for e in topo.path(0, 8)]  # host 0 to host 1, same rail leaf
['nic0', 'leaf0.0', 'nic8', 8]
>>> len(topo.path(0, 16))  # another leaf group: up through a spine
6
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from simulator.infeasible import InfeasibleError
from simulator.scenario.topology_config import FatTreeTopology
from simulator.topology.fat_tree_labels import FatTreeLinks
from simulator.topology.fat_tree_routes import SpreadTable
from simulator.topology.graph import LinkRecorder, Node, Path, Topology, ecmp_hash
from simulator.topology.nvswitch import NVSwitchRouter, add_nvswitch_domain

MAX_FANOUT = 32  # spines per pod and cores: enough ECMP width without millions of edges


def fat_tree_topology(t: FatTreeTopology, nvlink_bandwidth: float) -> Topology:
    """Build the fat-tree ``t`` describes (see the module doc for the structure); its NVLink
    bandwidth is ``t.node.nvlink_bandwidth`` or, when that is not given, ``nvlink_bandwidth``
    (the accelerator's scale-up figure), B/s per direction.

    The builder reads every setting from ``t`` itself (no forwarded parameters that a new
    setting could miss). Bandwidths are B/s per direction, latencies seconds per link
    (``nic_latency`` is split between the NIC-leaf link and its twin at the far end;
    ``switch_latency`` is paid per switch-to-switch link).
    """
    n = t.node
    nodes, gpus_per_node = t.nodes, n.gpus
    nvlink_bandwidth = n.nvlink_bandwidth or nvlink_bandwidth
    g = nx.DiGraph(name=t.name or f"fat-tree {nodes}x{gpus_per_node}")
    links = LinkRecorder(g)
    # link ids by structure, as they are added (FatTreeLinks): each GPU's own six links
    own = np.full((nodes * gpus_per_node, 6), -1, np.int64)
    place = np.full((nodes * gpus_per_node, 2), -1, np.int64)  # each GPU's host, leaf number
    nvlink = (nvlink_bandwidth, n.nvlink_latency, n.nvlink_efficiency)
    host_of, nvls_switch = _hosts(
        links, own, place, nodes, gpus_per_node, nvlink, n.pcie_bandwidth, n.pcie_latency, n.nvls
    )
    nic = (t.nic_bandwidth, t.nic_latency, t.nic_efficiency)
    leaves, leaf_of, down = _leaves(
        links, own, place, nodes, gpus_per_node, t.hosts_per_leaf, t.rail_optimized, nic
    )
    levels = _switch_levels(t, links, leaves, down, nic)
    pods, spines, cores, leaf_links, pod_links = levels
    rails = gpus_per_node if t.pxn and t.rail_optimized and gpus_per_node > 1 else 0
    router = FatTreeRouter(host_of, leaf_of, pods, spines, cores, t.ecmp_flows, rails)
    layout = links.layout()
    if layout is not None:
        router.recorded = FatTreeLinks.of(
            layout, own, leaf_links, pod_links, len(leaves), place[:, 0], place[:, 1]
        )
    over = list(t.oversubscription) + [1.0] * 3
    return Topology(
        graph=g,
        devices=sorted(host_of),
        host_of=host_of,
        router=router,
        nvls_switch=nvls_switch,
        name=g.graph["name"],
        meta={
            "kind": "fat_tree",
            "leaves": len(leaves),
            "levels": t.levels,
            "spines_per_pod": len(spines[0]) if spines else 0,
            "pods": len(spines),
            "cores": len(cores),
            "leaf_downlinks": down,
            "rail_optimized": bool(t.rail_optimized and gpus_per_node > 1),
            "hosts_per_leaf": min(t.hosts_per_leaf, nodes),
            "hosts_per_pod": _hosts_per_pod(pods, leaf_of, host_of),
            "oversubscription": over[: max(0, t.levels - 1)],
        },
        layout=layout,
    )


def _switch_levels(t: FatTreeTopology, links, leaves: list, down: int, nic: tuple):
    """The spines and cores above ``leaves`` (``down`` NIC links each): (pod of each leaf,
    spines per pod, cores, leaf-spine link ids, spine-core link ids); the ids None for a
    level the fabric does not have. A one-level fabric must fit under one leaf."""
    levels, over = t.levels, list(t.oversubscription) + [1.0] * 3
    pods: dict[str, int] = {}
    spines: list[list[str]] = []
    cores: list[str] = []
    leaf_links = pod_links = None
    if levels >= 2 and len(leaves) > 1:
        leaves_per_pod = leaves_per_pod_of(t)
        per_pod = leaves_per_pod if (levels >= 3 and leaves_per_pod) else len(leaves)
        pods, spines, uplink, leaf_links = _spines(
            links, leaves, per_pod, down, over[0], nic, t.switch_latency
        )
        if levels >= 3 and len(spines) > 1:
            cores, pod_links = _cores(
                links, spines, per_pod * uplink, over[1], nic, t.switch_latency
            )
    elif len(leaves) > 1:
        gpus_per_node = t.node.gpus
        if t.rail_optimized and gpus_per_node > 1 and t.nodes <= t.hosts_per_leaf:
            raise InfeasibleError(
                "a one-level fat-tree must fit under one leaf, and rail_optimized gives each of "
                f"a node's {gpus_per_node} NICs a leaf of its own: set rail_optimized: false"
            )
        raise InfeasibleError("a one-level fat-tree must fit under one leaf: raise nodes_per_leaf")
    else:
        pods = dict.fromkeys(leaves, 0)
    return pods, spines, cores, leaf_links, pod_links


def _hosts_per_pod(pods: dict, leaf_of: dict, host_of: dict) -> int:
    """Hosts under the largest pod (every host when there is one pod)."""
    if not pods:
        return len(set(host_of.values()))
    hosts: dict[int, set] = {}
    for device, leaf in leaf_of.items():
        hosts.setdefault(pods.get(leaf, 0), set()).add(host_of[device])
    return max(len(h) for h in hosts.values())


def _hosts(links, own, place, nodes, gpus_per_node, nvlink, pcie_bandwidth, pcie_latency, nvls):
    """Each host's NVSwitch domain and one NIC per GPU on PCIe; (device -> host, NVLS
    switch of each host). Fills ``own``'s GPU <-> NVSwitch and GPU <-> NIC columns and
    ``place``'s host column."""
    g = links.graph
    host_of: dict[int, int] = {}
    nvls_switch: dict[int, Node] = {}
    for h in range(nodes):
        first = h * gpus_per_node
        sw, nvlinks = add_nvswitch_domain(links, h, first, gpus_per_node, *nvlink)
        own[first : first + gpus_per_node, 0:2] = nvlinks
        place[first : first + gpus_per_node, 0] = h
        if nvls:
            nvls_switch[h] = sw
        for d in range(first, first + gpus_per_node):
            host_of[d] = h
            g.add_node(f"nic{d}", kind="nic", host=h)
            own[d, 2], own[d, 5] = links.add(d, f"nic{d}", pcie_bandwidth, pcie_latency, "pcie")
    return host_of, nvls_switch


def _leaves(links, own, place, nodes, gpus_per_node, nodes_per_leaf, rail_optimized, nic):
    """Leaf switches (one per rail per leaf group, or one top-of-rack) and the NIC links;
    (leaves, device -> its leaf, downlinks per leaf). Fills ``own``'s NIC <-> leaf columns
    and ``place``'s leaf column (the leaf's position in the leaves)."""
    g = links.graph
    nic_bandwidth, nic_latency, nic_efficiency = nic
    nodes_per_leaf = min(nodes_per_leaf, nodes)  # a small cluster fills one leaf group
    groups = math.ceil(nodes / nodes_per_leaf)
    rails = gpus_per_node if rail_optimized else 1
    down = nodes_per_leaf * (1 if rail_optimized else gpus_per_node)
    leaf_of: dict[int, str] = {}
    leaves: list[str] = []
    for grp in range(groups):
        for rail in range(rails):
            leaf = f"leaf{grp}.{rail}"
            leaves.append(leaf)
            g.add_node(leaf, kind="leaf", group=grp, rail=rail)
        numbers = grp * rails + (np.arange(gpus_per_node) if rail_optimized else 0)
        for h in range(grp * nodes_per_leaf, min(nodes, (grp + 1) * nodes_per_leaf)):
            place[h * gpus_per_node : (h + 1) * gpus_per_node, 1] = numbers
            for i in range(gpus_per_node):
                d = h * gpus_per_node + i
                leaf = f"leaf{grp}.{i if rail_optimized else 0}"
                leaf_of[d] = leaf
                own[d, 3], own[d, 4] = links.add(
                    f"nic{d}", leaf, nic_bandwidth, nic_latency / 2, "network", nic_efficiency
                )
    return leaves, leaf_of, down


def _spines(links, leaves, per_pod, down, over, nic, switch_latency):
    """Spines of each pod, every leaf of the pod linked to each; (leaf -> pod, spines per pod,
    one uplink's bandwidth, each leaf's (leaf -> spine, spine -> leaf) link ids per spine of
    its pod). The uplinks carry a leaf's downlink bandwidth over ``over``."""
    g = links.graph
    nic_bandwidth, _, nic_efficiency = nic
    n_spines = min(MAX_FANOUT, max(1, math.ceil(down / over)))
    uplink = down * nic_bandwidth / over / n_spines
    pods: dict[str, int] = {}
    spines: list[list[str]] = []
    ids = []
    for p in range(math.ceil(len(leaves) / per_pod)):
        pod_spines = [f"spine{p}.{s}" for s in range(n_spines)]
        spines.append(pod_spines)
        for sp in pod_spines:
            g.add_node(sp, kind="spine", pod=p)
        for leaf in leaves[p * per_pod : (p + 1) * per_pod]:
            pods[leaf] = p
            ids.append(
                [links.add(leaf, sp, uplink, switch_latency, "network", nic_efficiency)
                 for sp in pod_spines]
            )  # fmt: skip
    return pods, spines, uplink, np.array(ids, np.int64).reshape(len(leaves), n_spines, 2)


def _cores(links, spines, spine_down, over, nic, switch_latency):
    """Core switches linking every pod's spines; (the cores, each pod's (spine -> core,
    core -> spine) link ids by spine and core). The core links carry a spine's downlink
    bandwidth over ``over``."""
    g = links.graph
    nic_bandwidth, _, nic_efficiency = nic
    n_cores = min(MAX_FANOUT, max(1, math.ceil(spine_down / over / nic_bandwidth)))
    core_link = spine_down / over / n_cores
    cores = [f"core{c}" for c in range(n_cores)]
    ids = np.full((len(spines), len(spines[0]), n_cores, 2), -1, np.int64)
    for k, c in enumerate(cores):
        g.add_node(c, kind="core")
        for p, pod_spines in enumerate(spines):
            for i, sp in enumerate(pod_spines):
                ids[p, i, k] = links.add(
                    sp, c, core_link, switch_latency, "network", nic_efficiency
                )
    return cores, ids


class FatTreeRouter:
    """Up-down routing: NVLink inside a host, else NIC -> leaf [-> spine [-> core -> spine]].

    ``path`` gives one hashed path; ``spread`` gives each link's share of a connection's bytes
    under the fabric's load balancing (see the module doc). ``rails`` > 0: PXN over hosts of
    that many GPUs numbered host by host, GPU ``d`` on rail ``d % rails`` (0: no PXN).
    """

    def __init__(
        self, host_of, leaf_of, pod_of_leaf, spines, cores, ecmp_flows: int = 0, rails: int = 0
    ):
        self.host_of = host_of
        self.rails = rails
        self.leaf_of = leaf_of
        self.pod_of_leaf = pod_of_leaf
        self.spines = spines
        self.cores = cores
        self.ecmp_flows = ecmp_flows
        # pods of equally many spines: the SpreadTable's arrays describe them
        self._even_pods = len({len(p) for p in spines}) <= 1
        self._nvswitch = NVSwitchRouter(host_of)
        self._table: SpreadTable | None = None
        # the link ids its builder gave, by structure (None: look them up by (u, v))
        self.recorded: FatTreeLinks | None = None

    def forget_links(self) -> None:
        """Drop the recorded ids and the table of ids last used (Topology.release)."""
        self.recorded = None
        self._table = None

    def spread_ids(self, src, dst, links, folded: bool = False):
        """:meth:`spread` of the connections ``src[i]`` -> ``dst[i]`` (integer arrays of
        devices) as link ids under ``links`` (an (u, v) -> id dict, or a link table with
        ``index`` and ``layout``: see :meth:`_spread_table`): (ids, shares, route length per
        connection), routes concatenated in order, identical to ``spread`` one at a time.
        None where that is not guaranteed (hashed ECMP, whose paths depend on each pair's
        hash; pods of unequal spines; an endpoint that is not a device): route one by one.
        ``folded``: each group of :meth:`spread_representatives` as its first link alone
        (``SpreadTable.routes``).
        """
        if self.ecmp_flows or not self._even_pods:
            return None
        return self._spread_table(links).routes(src, dst, folded)

    def spread_counts(self, src, dst, klass, n_classes: int, links):
        """Per class of connections (``klass[i]``: connection ``i``'s, of ``n_classes``):
        the links their folded :meth:`spread_ids` cross (ascending) and the sum of the shares
        on each, as ``np.bincount`` of the routes gives it, without building the routes
        (``SpreadTable.folded_counts``); None where that is not guaranteed: use
        :meth:`spread_ids`."""
        if self.ecmp_flows or not self._even_pods:
            return None
        return self._spread_table(links).folded_counts(src, dst, klass, n_classes, len(links))

    def path_ids(self, src, dst, key, links):
        """:meth:`path` of the connections ``src[i]`` -> ``dst[i]`` with ``key[i]`` (integer
        arrays) as link ids under ``links``: (ids, path length per connection), paths
        concatenated in order, identical to ``path`` one at a time; None where the endpoints
        are not devices or the pods' spines differ in number."""
        if not self._even_pods:
            return None
        return self._spread_table(links).paths(src, dst, key)

    def path_latencies(self, src, dst, links):
        """(path length per connection, the sum of its links' latencies s, as a list) of
        :meth:`path_ids`' paths, without building them, where every link of each role the
        paths take (a GPU's six own links by column, leaf uplinks, downlinks, pod links) has
        one latency: then a path's latencies are its kind's row, whatever spine or core its
        hash picks (``SpreadTable.path_latencies``); None otherwise, or where
        :meth:`path_ids` would decline."""
        latency = getattr(links, "latency", None)
        if latency is None or not self._even_pods:
            return None
        return self._spread_table(links).path_latencies(src, dst, latency)

    def spread_representatives(self, links):
        """Groups of links that every route crosses all or none of, each with the same share
        (a leaf's uplinks and its downlinks, a pod's links to and from the cores), as an
        array mapping each link id under ``links`` to its group's first (itself when in no
        group), every switch's groups. None with hashed ECMP (its sub-flows cross some links
        of a group only)."""
        if self.ecmp_flows or not self._even_pods:
            return None
        return self._spread_table(links).representatives()

    def spread_dominated(self, links):
        """Links a water-filling may leave out, as a boolean array by link id under
        ``links`` (a link table, for its capacities): of each pair of a GPU's links that
        every route crosses both or neither of with the same share (GPU -> NIC and NIC ->
        leaf; leaf -> NIC and NIC -> GPU: a route that leaves or enters a host through a
        NIC, PXN relays included, takes both), the one of larger capacity (the first when
        equal). None with hashed ECMP, pods of unequal spines, or without capacities."""
        capacity = getattr(links, "capacity", None)
        if capacity is None or self.ecmp_flows or not self._even_pods:
            return None
        return self._spread_table(links).dominated(capacity)

    def device_link_ids(self, devices, links):
        """Each device's own links as ids under ``links``: an (n, 6) array of GPU ->
        NVSwitch, NVSwitch -> GPU, GPU -> NIC, NIC -> leaf, leaf -> NIC, NIC -> GPU (-1 where
        the topology has no such link); None where the table cannot be built (pods of
        unequal spines)."""
        if not self._even_pods:
            return None
        return self._spread_table(links).device_link_ids(devices)

    def _spread_table(self, links) -> SpreadTable:
        """The table of ids under ``links``: an (u, v) -> id dict, or a link table (its
        ``index``; or, when its ``layout`` is the one this router's builder numbered, the
        ids the builder recorded, with nothing to look up). Kept for the last ``links``."""
        table = self._table
        if table is None or table.key is not links:
            table = self._table = SpreadTable(self, links)
        return table

    def relays(self, src, dst, links) -> np.ndarray:
        """Whether :meth:`relay` names a relay for each connection ``src[i]`` -> ``dst[i]``
        (arrays of devices: :meth:`path_ids` has accepted them), as a boolean array."""
        relayed = self._spread_table(links).relays(src, dst)[1]
        return np.zeros(src.size, bool) if relayed is None else relayed

    def hosts(self, devices, links) -> np.ndarray:
        """The host of each device of ``devices`` (an integer array of devices, as
        :meth:`path_ids` accepts them), as ``host_of`` says, as an array."""
        return self._spread_table(links).host[devices]

    def relay(self, src: Node, dst: Node) -> int | None:
        """The GPU on ``src``'s host and ``dst``'s rail a PXN connection crosses NVLink to
        (None: the connection leaves through ``src``'s own NIC)."""
        r = self.rails
        if not r or isinstance(src, str) or isinstance(dst, str) or src % r == dst % r:
            return None
        if self.host_of[src] == self.host_of[dst]:
            return None
        return src - src % r + dst % r

    def spread(self, src: Node, dst: Node, key: int = 0) -> list[tuple[tuple[Node, Node], float]]:
        """(link, fraction of the connection's bytes) for every link it uses."""
        via = None if self.ecmp_flows else self.relay(src, dst)
        if via is not None:  # (hashed ECMP: ``path`` takes the relay itself)
            return [(e, 1.0) for e in self._nvswitch.path(src, via)] + self.spread(via, dst, key)
        if self.ecmp_flows:
            share: dict[tuple[Node, Node], float] = {}
            k = self.ecmp_flows
            for i in range(k):
                for e in self.path(src, dst, key * k + i):
                    share[e] = share.get(e, 0.0) + 1.0 / k
            return list(share.items())
        if isinstance(src, str) or isinstance(dst, str) or self.host_of[src] == self.host_of[dst]:
            return [(e, 1.0) for e in self._nvswitch.path(src, dst, key)]
        a_leaf, b_leaf = self.leaf_of[src], self.leaf_of[dst]
        ends = [
            ((src, f"nic{src}"), 1.0),
            ((f"nic{src}", a_leaf), 1.0),
            ((b_leaf, f"nic{dst}"), 1.0),
            ((f"nic{dst}", dst), 1.0),
        ]
        if a_leaf == b_leaf:
            return ends
        pa, pb = self.pod_of_leaf[a_leaf], self.pod_of_leaf[b_leaf]
        up, down = self.spines[pa], self.spines[pb]
        if pa == pb:
            return (
                ends
                + [((a_leaf, s), 1 / len(up)) for s in up]
                + [((s, b_leaf), 1 / len(up)) for s in up]
            )
        w = 1 / (len(up) * len(self.cores))
        return (
            ends
            + [((a_leaf, s), 1 / len(up)) for s in up]
            + [((s, c), w) for s in up for c in self.cores]
            + [((c, s), 1 / (len(self.cores) * len(down))) for c in self.cores for s in down]
            + [((s, b_leaf), 1 / len(down)) for s in down]
        )

    def path(self, src: Node, dst: Node, key: int = 0) -> Path:
        if src == dst:
            return []
        if isinstance(src, str) or isinstance(dst, str) or self.host_of[src] == self.host_of[dst]:
            return self._nvswitch.path(src, dst, key)
        via = self.relay(src, dst)
        if via is not None:
            return self._nvswitch.path(src, via) + self.path(via, dst, key)
        a_nic, b_nic = f"nic{src}", f"nic{dst}"
        a_leaf, b_leaf = self.leaf_of[src], self.leaf_of[dst]
        up: Path = [(src, a_nic), (a_nic, a_leaf)]
        down: Path = [(b_leaf, b_nic), (b_nic, dst)]
        if a_leaf == b_leaf:
            return up + down
        h = ecmp_hash(src, dst, key)
        pa, pb = self.pod_of_leaf[a_leaf], self.pod_of_leaf[b_leaf]
        sa = self.spines[pa][h % len(self.spines[pa])]
        if pa == pb:
            return up + [(a_leaf, sa), (sa, b_leaf)] + down
        core = self.cores[(h >> 8) % len(self.cores)]
        sb = self.spines[pb][(h >> 16) % len(self.spines[pb])]
        return up + [(a_leaf, sa), (sa, core), (core, sb), (sb, b_leaf)] + down


def leaves_per_pod_of(t: FatTreeTopology) -> int | None:
    """Leaves per pod from the pod's hosts: its leaf groups times the leaves of a group (one
    per rail, or one top-of-rack leaf); None: one pod of every leaf."""
    hosts = t.hosts_per_pod
    if hosts is None:
        return None
    groups = max(1, -(-hosts // t.hosts_per_leaf))
    return groups * (t.node.gpus if t.rail_optimized and t.node.gpus > 1 else 1)
