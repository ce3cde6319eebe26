"""Warnings where a study would mislead (simulator/plan/topology_warnings.py)."""

from __future__ import annotations

import pytest

from simulator.plan.topology_warnings import topology_warnings
from simulator.scenario import load_scenario_text
from simulator.topology import build_topology


def _warnings(
    topology: str,
    parallelism: str,
    model: str = "{name: llama3-8b, layers: 4}",
    batch: int = 64,
    gpus: str = "",
) -> list[str]:
    s = load_scenario_text(
        f"model: {model}\n"
        f"cluster: {{accelerator: H100-SXM, {gpus} topology: {topology}}}\n"
        f"parallelism: {parallelism}\n"
        f"training: {{global_batch: {batch}, seq_len: 1024}}\n"
    )
    return topology_warnings(s, build_topology(s.cluster))


def _has(warnings: list[str], text: str) -> bool:
    return any(text in w for w in warnings)


def test_oversubscription_under_one_leaf_touches_no_traffic():
    # 16 nodes, 32 per leaf group (the shipped SuperPOD's shape): DP stays on its rail leaf
    one_leaf = "{kind: fat_tree, nodes: 16, nodes_per_leaf: 32, oversubscription: [4]}"
    w = _warnings(one_leaf, "{tp: 8}", batch=64)
    assert _has(w, "oversubscription 4:1 touches no traffic")
    assert _has(w, "all 16 nodes sit under one leaf group (32 hosts each)")
    # 4 nodes per leaf group: the DP group of 16 nodes crosses spines, so no such warning
    split = "{kind: fat_tree, nodes: 16, nodes_per_leaf: 4, oversubscription: [4]}"
    assert not _has(_warnings(split, "{tp: 8}"), "oversubscription")


def test_cross_rail_traffic_counts_as_crossing_leaves():
    # Rail-optimised leaves: GPU i of every node hangs off leaf i. With tp 8 the DP pairs are
    # (i, i + 8), one rail, one leaf. With tp 1 the DP group holds every rank, and pairs such
    # as (0, 9) change node and rail: without PXN the router takes them up to a spine; with
    # it (NCCL's default) they change rails over NVLink and stay under the leaves (review:
    # the warning compared leaves, not leaf groups)
    topo = "{kind: fat_tree, nodes: 2, nodes_per_leaf: 2, oversubscription: [2], pxn: %s}"
    for pxn in ("true", "false"):
        w = _warnings(topo % pxn, "{tp: 8}", batch=16)
        assert _has(w, "oversubscription 2:1 touches no traffic")
    assert _has(_warnings(topo % "true", "{tp: 1}", batch=16), "oversubscription 2:1 touches")
    assert not _has(_warnings(topo % "false", "{tp: 1}", batch=16), "oversubscription")
    # two leaf groups, the job on the first (16 GPUs, DP 16 over its two nodes): every group's
    # ranks share a leaf group, which keeps them off the uplinks only with PXN
    two = "{kind: fat_tree, nodes: 4, nodes_per_leaf: 2, oversubscription: [2], pxn: %s}"
    w = _warnings(two % "true", "{tp: 1}", batch=16, gpus="gpus: 16,")
    assert _has(w, "share a leaf group, whose rails PXN joins over NVLink")
    assert not _has(_warnings(two % "false", "{tp: 1}", batch=16, gpus="gpus: 16,"), "oversub")


def test_nic_faster_than_pcie():
    fast = "{kind: fat_tree, nodes: 2, nic_bandwidth: 800 Gb/s}"
    [w] = [x for x in _warnings(fast, "{tp: 8}", batch=16) if "PCIe" in x]
    assert "100 GB/s" in w and "capped at 64 GB/s" in w  # 800 Gb/s = 100 GB/s > 64 GB/s
    ok = "{kind: fat_tree, nodes: 2, nic_bandwidth: 400 Gb/s}"  # 50 GB/s < 64 GB/s
    assert not _has(_warnings(ok, "{tp: 8}", batch=16), "PCIe")


def test_no_group_leaves_the_node():
    # 16 GPUs of topology, the job uses the first node only: fabric settings touch nothing
    s = load_scenario_text(
        "model: {name: llama3-8b, layers: 4}\n"
        "cluster: {accelerator: H100-SXM, gpus: 8, topology: {kind: fat_tree, nodes: 2}}\n"
        "parallelism: {tp: 8}\ntraining: {global_batch: 8, seq_len: 1024}\n"
    )
    w = topology_warnings(s, build_topology(s.cluster))
    assert _has(w, "no communication group spans two nodes")


def test_expert_groups_straddling_a_72_gpu_domain():
    # 128 GPUs on two 72-GPU NVLink domains, tp 1, EP 32: groups 0-31, 32-63, 64-95 and
    # 96-127; only 64-95 crosses the boundary at 72. EP 8 groups never cross it (72 = 9 x 8).
    nvl = "{kind: fat_tree, nodes: 2, node: {gpus: 72}}"
    moe = "{name: mixtral-8x7b, layers: 4, moe: {experts: 32, top_k: 2, expert_ffn: 1024}}"
    w = _warnings(nvl, "{ep: 32}", model=moe, batch=128, gpus="gpus: 128,")
    [straddle] = [x for x in w if "EP groups" in x]
    assert straddle.startswith("1 of 4 EP groups (32 ranks each) straddle NVLink domains of 72")
    assert "e.g. 24" in straddle  # the largest group size up to 32 that divides 72
    w8 = _warnings(nvl, "{ep: 8}", model=moe, batch=128, gpus="gpus: 128,")
    assert not _has(w8, "EP groups")


def test_tp_beyond_the_node():
    w = _warnings(
        "{kind: fat_tree, nodes: 2}",
        "{tp: 16}",
        batch=16,
        model="{name: llama3-8b, layers: 4, kv_heads: 32}",
    )
    assert _has(w, "TP groups of 16 ranks span 2 NVLink domains of 8 GPUs")


def test_one_node_has_no_fabric_warnings():
    assert _warnings("{include: topologies/dgx-h100.yaml}", "{tp: 8}", batch=8) == []


@pytest.mark.parametrize(
    "accelerator, expected",
    [
        ("H100-SXM", None),
        ("A100-SXM4-80GB", "NVLink 450 GB/s per GPU (cluster.topology.node.nvlink_bandwidth) "
         "where the A100-SXM4-80GB has 300 GB/s"),
        ("TPU-v5p", "TPU-v5p (tpu) runs on an NVSwitch node"),
    ],
)  # fmt: skip
def test_an_accelerator_on_a_machine_written_for_another_is_said(accelerator, expected):
    # QA: an A100 silently got the DGX H100 file's 450 GB/s NVLink, a TPU an NVSwitch node
    from simulator.plan.topology_warnings import topology_warnings
    from simulator.scenario import load_scenario
    from simulator.topology import build_topology

    s = load_scenario(
        "scenarios/examples/llama3-8b-fsdp.yaml", [f"cluster.accelerator={accelerator}"]
    )
    found = [w for w in topology_warnings(s, build_topology(s.cluster)) if "accelerator" in w
             or "NVLink" in w and "per GPU" in w]  # fmt: skip
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0]


def test_three_levels_with_one_pod_build_no_core_and_say_so():
    # QA: levels: 3 on a fabric whose leaves all fit one pod silently dropped the core level
    # and its oversubscription
    w = _warnings(
        "{kind: fat_tree, nodes: 4, nodes_per_leaf: 2, levels: 3, oversubscription: [1, 4]}",
        "{tp: 8}",
    )
    assert _has(
        w, "levels: 3 but all 16 leaves form one pod (nodes_per_pod default: every host)"
    )  # 8 rails
    assert _has(w, "so oversubscription 4:1 above the pods touches nothing")
    two_pods = _warnings(
        "{kind: fat_tree, nodes: 4, nodes_per_leaf: 1, levels: 3, nodes_per_pod: 2,"
        " oversubscription: [1, 4]}",
        "{tp: 8}",
    )
    assert not _has(two_pods, "form one pod")
