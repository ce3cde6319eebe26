"""DeepEP's published all-to-all bandwidths against the DeepEP-style all-to-all
(:mod:`simulator.collectives.deepep`): the rows of ``deepep`` in
``scenarios/validation/published/rows.yaml``.

DeepEP's tests (github.com/deepseek-ai/DeepEP, ``tests/test_intranode.py`` and
``tests/test_internode.py`` at d8dd185) time a dispatch of 4,096 tokens of 7,168 values per
GPU (FP8: 1 + 4/128 bytes per value with its scales) and the combine back (BF16), top-8 of
256 experts (node-limited to the top min(nodes, 4) nodes across nodes), and report bytes over
time: on one node the bytes each GPU receives over NVLink (its own tokens included), across
nodes the bytes its tokens take to the nodes they reach (its own node included) - the
"bottleneck bandwidth" of the README's table. The simulated rows time the same exchange on a
DGX H100 fabric with H800's NVLink (200 GB/s a direction) and CX7 400 Gb/s NICs.
"""

from __future__ import annotations

from simulator import api
from simulator.collectives import deepep
from simulator.collectives.algorithms import plan_collective
from simulator.engine.simulate import time_collective
from simulator.scenario.loader import PROJECT_ROOT

TOKENS, HIDDEN, TOP_K, MAX_NODES, PER_NODE = 4096, 7168, 8, 4, 8
BYTES = {"fp8": 1 + 4 / 128, "bf16": 2.0}


def deepep_bandwidth(topology: str, overrides: list[str], ranks: int, dtype: str) -> float:
    """DeepEP's reported bandwidth (B/s) of one dispatch or combine of ``ranks`` GPUs."""
    topo = api.topology_from_file(PROJECT_ROOT / topology, "H100-SXM", overrides)
    model = api.network_model(topo)
    group = tuple(range(ranks))
    nodes = ranks // PER_NODE
    size = TOKENS * HIDDEN * BYTES[dtype]
    algorithm = deepep.name(TOP_K, min(nodes, MAX_NODES))
    seconds, _ = time_collective(
        model, plan_collective("all_to_all", group, size, algorithm, model.locality)
    )
    d, u = deepep.routing(TOP_K, min(nodes, MAX_NODES), nodes, PER_NODE)
    counted = size * (u if nodes == 1 else d)  # received over NVLink / sent to nodes
    return counted / seconds


def deepep_rows(spec: dict, make_row) -> list[dict]:
    """Each published row against :func:`deepep_bandwidth` (``make_row`` as validation's)."""
    out = []
    for r in spec["rows"]:
        sim = deepep_bandwidth(r["topology"], r.get("set", []), r["ranks"], r["dtype"])
        row = make_row(
            "DeepEP all-to-all bandwidth", r["name"], r["published"], sim / 1e9,
            spec["tolerance"], "GB/s",
        )  # fmt: skip
        row["expected_miss"] = r.get("expected_miss", "")
        out.append(row)
    return out
