"""Simulated bus bandwidth against published nccl-tests measurements.

Link efficiencies come from physical arguments, not from these rows: NVLink moves 20 of its
25 GB/s per link as payload with 128-byte writes (nccl-tests issue 149, derived for A100);
NVLS applies NCCL's own nvlsEfficiency (0.85, Hopper); InfiniBand loses 26 header bytes per
4,096-byte packet.
"""

from simulator import api
from tests.conftest import published

MEASURED = published("collective_bandwidth_measurements.csv")
BIG = [8 * 2**30]


def _busbw(root, topology, algo, accelerator="H100-SXM", op="all_reduce", ranks=None, sets=()):
    topo = api.topology_from_file(root / "topologies" / topology, accelerator, list(sets))
    table = api.collective_table(topo, op, ranks, algo, BIG)
    return table["busbw_Bps"].iloc[0] / 1e9


def _published(system_prefix, collective_prefix):
    rows = MEASURED[
        MEASURED["system"].str.startswith(system_prefix)
        & MEASURED["collective"].str.startswith(collective_prefix)
    ]
    return [float(str(v).split("-")[0]) for v in rows["busbw_GBps"]]


def test_h100_ring_busbw_in_published_band(root):
    [published_ring] = _published("8x H100-SXM", "non-allreduce collectives or NCCL_ALGO=RING")
    ours = _busbw(root, "dgx-h100.yaml", "ring")
    # Published "~370"; ours 360 = 450 x 0.8. 5% covers the "~" of a maintainer's estimate.
    assert abs(ours - published_ring) / published_ring < 0.05


def test_h100_nvls_busbw_in_published_band(root):
    values = _published("8x H100", "all_reduce_perf (NVLS") + _published("8x H200", "all_reduce")
    ours = _busbw(root, "dgx-h100.yaml", "nvls")
    # Published 475-480 GB/s (three measurements); allow the band plus 2%.
    assert min(values) * 0.98 <= ours <= max(values) * 1.02


def test_a100_ring_busbw(root):
    values = _published("8x A100", "all_reduce_perf")
    ours = _busbw(
        root, "dgx-h100.yaml", "ring", "A100-SXM4-80GB", sets=["node.nvlink_bandwidth=300 GB/s"]
    )
    # Published 230 and 232.5 GB/s; ours 240 (= 300 x 0.8): NCCL adds ~4% its own overhead.
    assert all(abs(ours - v) / v < 0.05 for v in values)


def test_ndr_nic_point_to_point(root):
    from simulator.collectives import plan_collective
    from simulator.engine import time_collective

    [low] = _published("ConnectX-7 NDR 400 Gb/s", "per-NIC peak")
    topo = api.topology_from_file(
        root / "topologies/dgx-h100-superpod.yaml", "H100-SXM", ["nodes=2"]
    )
    t = time_collective(api.network_model(topo), plan_collective("send_recv", [0, 8], BIG[0]))[0]
    ours = BIG[0] / t / 1e9
    # Published per-NIC peak 48-49 GB/s; ours 49.7 (50 x 4096/4122). Within 4%.
    assert abs(ours - low) / low < 0.04


def test_multi_node_dgx_a100_all_reduce(root):
    [published_bw] = [
        float(v)
        for v in MEASURED[MEASURED["system"].str.startswith("DGX-A100, 8x 200 Gb/s")]["busbw_GBps"]
    ]
    topo = api.topology_from_file(
        root / "topologies/dgx-a100-superpod.yaml", "A100-80GB", ["nodes=4"]
    )
    ours = api.collective_table(topo, "all_reduce", 32, "ring", BIG)["busbw_Bps"].iloc[0] / 1e9
    # Eight rings, one per NIC (NCCL channels): 8 x 25 GB/s per node x IB payload efficiency,
    # 198 GB/s against the published 192; NCCL's own ~3% overhead is not modelled: 5%.
    assert abs(ours - published_bw) / published_bw < 0.05


def test_all_reduce_times_against_nccl_tests_logs():
    # nccl-tests' time at every 8x size from 1 MiB to 4 GiB of two public logs (rows.yaml):
    # from 64 MiB, where bandwidth dominates, within 10% (the throughput rows' bar); below it
    # NCCL spends more than its own tuning model (which the plan follows) and the rows are
    # expected misses. Every row is on the fast side but one (the 2-node ring at 512 MiB,
    # +1.2%): the simulator is optimistic on collectives, never by less than the model.
    from simulator.validation import validate

    frame = validate(["nccl_time"], workers=1)
    assert len(frame) == 10
    big = frame[frame["row"].str.contains("64 MiB|512 MiB|4 GiB")]
    assert len(big) == 6 and big["within"].all() and (big["error"].abs() <= 0.10).all()
    small = frame[~frame.index.isin(big.index)]
    assert (small["expected_miss"] != "").all() and not small["within"].any()
    assert (small["error"] < -0.25).all()  # NCCL's model alone: 25-50% fast at 1-8 MiB
    assert (frame["error"] <= 0.02).all()
