"""NCCL's protocols (LL, LL128, Simple) and base latency against tuning.cc's formulas by hand.

Constants are NCCL 2.20.3's (src/graph/tuning.cc), written out here rather than read from the
module, so that a mistranscription there fails here. Times in us and bandwidths in GB/s as
NCCL writes them: t = latency + S / (1000 x algbw).
"""

import pytest

from simulator.collectives import choose_protocol, nccl_time, plan_collective
from simulator.collectives.algorithms import Locality
from simulator.collectives.nccl_tuning import fastest_protocol
from simulator.engine import NetworkModel, run_taskgraph, time_collective
from simulator.schedule import CommSpec, Task, TaskGraph
from simulator.topology.nvswitch import nvswitch_topology

B = 360e9  # Simple's bus bandwidth (B/s): 18 channels of <= 20.6 GB/s
N = 8


def _crossover(lat_a, bw_a, lat_b, bw_b):
    """Size (B) where protocol a (lower latency, lower bandwidth) and b take equal time."""
    return (lat_b - lat_a) / (1 / (1000 * bw_a) - 1 / (1000 * bw_b))


def test_one_node_ring_crossovers_by_hand():
    steps = 2 * (N - 1)  # ring all-reduce
    lat = {"LL": 6.6 + steps * 0.6, "LL128": 14.0 + steps * 1.9, "Simple": 8.4 + steps * 3.4}
    bus = {"LL": min(87.7, 360 / 4), "LL128": min(0.92 * 360, 18 * 36.7), "Simple": 360.0}
    alg = {p: b * N / steps for p, b in bus.items()}
    ll_to_ll128 = _crossover(lat["LL"], alg["LL"], lat["LL128"], alg["LL128"])
    ll128_to_simple = _crossover(lat["LL128"], alg["LL128"], lat["Simple"], alg["Simple"])
    assert 1.7e6 < ll_to_ll128 < 1.8e6 and 36e6 < ll128_to_simple < 37e6  # the arithmetic
    for size, expected in [
        (8, "LL"),
        (ll_to_ll128 * 0.999, "LL"),  # 0.1% either side: well above float rounding
        (ll_to_ll128 * 1.001, "LL128"),
        (ll128_to_simple * 0.999, "LL128"),
        (ll128_to_simple * 1.001, "Simple"),
        (8 * 2**30, "Simple"),
    ]:
        assert choose_protocol("all_reduce", "ring", N, 1, size, B) == expected, size
    for p in lat:
        got = nccl_time("all_reduce", "ring", p, N, 1, 1e6, B)
        assert got == pytest.approx((lat[p] + 1e6 / (1000 * alg[p])) * 1e-6, rel=1e-12)


def test_multi_node_ring_latency_and_crossover_by_hand():
    # 16 nodes of 8 GPUs on 50 GB/s NICs: 254 steps, 32 of them across nodes; intra-node
    # steps pay at least the network post overhead (1 us, x3 for Simple); llMaxBw 20.4 GB/s.
    n, nodes, bw = 128, 16, 50e9
    steps, inter = 2 * (n - 1), 2 * nodes
    lat_ll = 6.6 + (steps - inter) * 1.0 + inter * 2.7
    lat_128 = 14.0 + (steps - inter) * 1.9 + inter * 4.0
    alg_ll, alg_128 = min(20.4, 50 / 4) * n / steps, min(0.92 * 50, 3 * 36.7) * n / steps
    cross = _crossover(lat_ll, alg_ll, lat_128, alg_128)
    assert choose_protocol("all_reduce", "ring", n, nodes, cross * 0.999, bw) == "LL"
    assert choose_protocol("all_reduce", "ring", n, nodes, cross * 1.001, bw) == "LL128"
    # Simple across nodes pays the ring's plateau factor 1.4 on its latency at this size.
    lat_simple = 1.4 * (8.4 + (steps - inter) * max(3.4, 3 * 1.0) + inter * 14.0)
    expected = (lat_simple + 1e9 / (1000 * 50 * n / steps)) * 1e-6
    assert nccl_time("all_reduce", "ring", "Simple", n, nodes, 1e9, bw) == pytest.approx(
        expected, rel=1e-12
    )


def test_multi_node_all_gather_steps_by_hand():
    # All-gather over 4 nodes x 8: n - 1 = 31 steps, nodes - 1 = 3 across; LL128 at 0.92 B.
    n, nodes, size = 32, 4, 1e6
    lat = 14.0 + (31 - 3) * 1.9 + 3 * 4.0
    algbw = 0.92 * 50 * n / 31
    got = nccl_time("all_gather", "ring", "LL128", n, nodes, size, 50e9)
    assert got == pytest.approx((lat + size / (1000 * algbw)) * 1e-6, rel=1e-12)


def test_tree_and_nvls():
    # Tree on 4 nodes x 8: small goes LL; its latency 6.8 + 2 (7 x 0.6 + 2 x 5.0).
    got = nccl_time("all_reduce", "tree", "LL", 32, 4, 64, 50e9)
    algbw = min(0.92 * 50, 3 * 36.0) / 3.8 * 0.5  # x treeCorrectionFactor 1.0 at 64 B
    assert got == pytest.approx((6.8 + 2 * (7 * 0.6 + 2 * 5.0) + 64 / (1000 * algbw)) * 1e-6)
    assert choose_protocol("all_reduce", "tree", 32, 4, 64, 50e9) == "LL"
    # NVLS runs Simple only, and NCCL's model charges its whole 23 us latency per call.
    plan = plan_collective(
        "all_reduce", range(8), 64, "nvls", Locality(dict.fromkeys(range(8), 0), {0: "sw"}), True, B
    )
    assert (plan.protocol, plan.base_latency_s) == ("Simple", pytest.approx(23e-6))


def test_plan_records_protocol_efficiency_and_base_latency():
    loc = Locality(dict.fromkeys(range(N), 0))
    small = plan_collective("all_reduce", range(N), 1024, "ring", loc, bus_Bps=B)
    assert small.protocol == "LL" and small.base_latency_s == pytest.approx(6.6e-6)
    assert small.efficiency == pytest.approx(87.7 / 360)  # llMaxBw caps B / 4
    mid = plan_collective("all_reduce", range(N), 8e6, "ring", loc, bus_Bps=B)
    assert (mid.protocol, mid.efficiency) == ("LL128", pytest.approx(0.92))
    assert mid.base_latency_s == pytest.approx(14e-6)
    tree = plan_collective("all_reduce", range(N), 1024, "tree", loc, bus_Bps=B)
    # Tree LL: 1 / 3.8 of the tree's 0.92 B = 87.2 GB/s, just under llMaxBw's 87.7.
    assert tree.protocol == "LL" and tree.efficiency == pytest.approx(0.92 / 3.8)
    forced = plan_collective("all_reduce", range(N), 8e9, "ring", loc, bus_Bps=B, protocol="LL")
    assert forced.protocol == "LL"
    # Without the hop bandwidth the plan runs Simple; algorithms NCCL does not tune pay no base.
    assert plan_collective("all_reduce", range(N), 1024, "ring", loc).protocol == "Simple"
    hd = plan_collective("all_reduce", range(N), 1024, "halving_doubling", loc, bus_Bps=B)
    assert (hd.protocol, hd.base_latency_s, hd.efficiency) == ("Simple", 0.0, 1.0)
    torus = Locality(torus_shape=(2, 2, 2))  # TPUs: no NCCL
    on_torus = plan_collective("all_reduce", range(N), 1024, "ring", torus, bus_Bps=B)
    assert (on_torus.protocol, on_torus.base_latency_s) == ("Simple", 0.0)
    ideal = plan_collective("all_reduce", range(N), 1024, "ring", loc, False, bus_Bps=B)
    assert (ideal.protocol, ideal.base_latency_s, ideal.efficiency) == ("Simple", 0.0, 1.0)


@pytest.mark.parametrize(
    ("algorithm", "protocol", "bus"), [("nvls", "LL", B), ("ring", "LL", None), ("ring", "X", B)]
)
def test_impossible_protocol_is_an_error(algorithm, protocol, bus):
    loc = Locality(dict.fromkeys(range(N), 0), {0: "sw"})
    with pytest.raises(ValueError, match="protocol|Simple"):
        plan_collective("all_reduce", range(N), 1e6, algorithm, loc, True, bus, protocol)


def test_fastest_protocol_and_unknown_algorithm():
    assert fastest_protocol("all_reduce", "ring", N, 1, 8, B) == (
        "LL",
        pytest.approx((6.6 + 14 * 0.6 + 8 / (1000 * 87.7 * N / 14)) * 1e-6, rel=1e-12),
    )
    with pytest.raises(ValueError, match="no 'direct'"):
        nccl_time("all_reduce", "direct", "Simple", N, 1, 8, B)


def _node(lat=0.7e-6):
    topo = nvswitch_topology(N, 450e9, latency=lat, efficiency=0.8)  # B = 360 GB/s
    return NetworkModel(topo.graph, topo.router, topo.host_of)


def _all_reduce_through_executor(size):
    g = TaskGraph()
    spec = CommSpec("all_reduce", tuple(range(N)), size, instance=0)
    for r in range(N):
        g.add(Task(r, "comm", "comm", "ar", comm=spec))
    frame = run_taskgraph(_node(), g, {r: r for r in range(N)})[0].to_frame()
    return frame["end_s"].max()


def test_eight_byte_all_reduce_is_base_latency_plus_hops():
    # LL: base 6.6 us, then 2(n-1) steps each paying the 0.7 us path, and 8 B at LL's
    # 87.7 GB/s bus bandwidth (negligible but included: the closed form is exact).
    expected = 6.6e-6 + 2 * (N - 1) * 0.7e-6 + 2 * (N - 1) / N * 8 / 87.7e9
    assert _all_reduce_through_executor(8.0) == pytest.approx(expected, rel=1e-9)


def test_large_all_reduce_keeps_simple_bus_bandwidth():
    size = 8 * 2**30
    t = _all_reduce_through_executor(size)
    # each of the 2(n-1) steps pays Simple's NVLink step latency (NCCL's hwLat, 3.4 us), above
    # the 0.7 us path
    expected = 8.4e-6 + 2 * (N - 1) / N * size / 360e9 + 2 * (N - 1) * 3.4e-6
    assert t == pytest.approx(expected, rel=1e-9)
    busbw = 2 * (N - 1) / N * size / t
    assert busbw == pytest.approx(360e9, rel=2e-3)  # 56 us of latency is 0.13% of 42 ms


def test_base_latency_is_paid_once_per_collective():
    # The same plan with and without its base latency differs by exactly the base.
    model = _node()
    loc = model.locality
    plan = plan_collective("all_gather", range(N), 4096, "ring", loc, bus_Bps=B)
    ideal = plan_collective("all_gather", range(N), 4096, "ring", loc, protocol="Simple")
    assert plan.protocol == "LL"
    t, t_ideal = time_collective(model, plan)[0], time_collective(model, ideal)[0]
    # LL's all-gather on one node: B / 3 (not / 4) = 120 GB/s, capped at llMaxBw 87.7 GB/s;
    # base 6.6 us against Simple's 8.4 us; the same 7 hops, each at LL's NVLink step latency
    # (0.6 us: the 0.7 us path governs) against Simple's 3.4 us
    data = (N - 1) / N * 4096
    hops = 7 * (3.4e-6 - 0.7e-6)
    assert t - data / 87.7e9 == pytest.approx(t_ideal - 8.4e-6 - data / 360e9 + 6.6e-6 - hops)


def test_point_to_point_operations_pay_nccls_p2p_base():
    # QA: an 8 B send/recv over NVLink took 0.7 us (the wire alone); nccl-tests' sendrecv_perf
    # gives about 3 us on H100 (NVIDIA/nccl#1487): 2.3 us of NCCL's own plus the 0.7 us path
    from simulator import api
    from simulator.collectives.nccl_tuning import P2P_BASE_US

    topo = api.topology_from_file("topologies/dgx-h100.yaml", "H100-SXM", [])
    for op, ranks in (("send_recv", 2), ("all_to_all", 8)):
        t = api.collective_table(topo, op, ranks, None, [8.0])["time_s"].iloc[0]
        assert t == pytest.approx(P2P_BASE_US * 1e-6 + 0.7e-6, rel=0.01), op  # 8 B: ~0 bytes


def test_across_hosts_the_protocol_is_chosen_and_capped_at_nccls_channel_total():
    # QA: a ring over 16 DGX H100 chose and rated its protocol from one NIC's bandwidth,
    # so LL moved about 100 GB/s in total over the 8 NICs where NCCL caps LL at llMaxBw;
    # NCCL's B is its channels' total, a channel per GPU and NIC
    from simulator import api
    from simulator.engine.executor import channels_Bps

    host_of = {d: d // 8 for d in range(32)}
    assert channels_Bps(50e9, host_of, tuple(range(32))) == 8 * 50e9
    assert channels_Bps(50e9, host_of, tuple(range(8))) == 50e9  # inside one host
    assert channels_Bps(50e9, host_of, tuple(range(12))) == 4 * 50e9  # 8 + 4: 4 channels
    topo = api.topology_from_file("topologies/dgx-h100-superpod.yaml", "H100-SXM", ["nodes=16"])
    nic = 50e9 * 4096 / 4122  # NDR line rate x InfiniBand payload efficiency
    for size in (2**16, 2**20, 2**22):
        row = api.collective_table(topo, "all_reduce", 128, "ring", [float(size)]).iloc[0]
        assert row["protocol"] == choose_protocol("all_reduce", "ring", 128, 16, size, 8 * nic)
    # 1 MiB runs LL; its bus bandwidth stays under NCCL's LL figure for 16 nodes (llMaxBw)
    from simulator.collectives.nccl_tuning import bus_bandwidth_GBps

    row = api.collective_table(topo, "all_reduce", 128, "ring", [2.0**20]).iloc[0]
    cap = bus_bandwidth_GBps("all_reduce", "ring", "LL", 128, 16, 8 * nic) * 1e9
    assert row["protocol"] == "LL" and row["busbw_Bps"] <= cap


def test_each_step_pays_at_least_nccls_step_latency_of_its_protocol():
    # NCCL's hwLat per step (tuning.cc, written out): ring NVLink LL 0.6, LL128 1.9, Simple
    # 3.4 us; NET 2.7, 4.0, 14.0; across nodes an intra-node step pays at least the network
    # post overhead (1 us, x3 for Simple). Against the ideal plan (no base, path latency only),
    # a ring pays its base and, on every step, the floor less the path where the floor is above
    from simulator import api
    from simulator.collectives.nccl_tuning import step_latency_us

    assert step_latency_us("all_reduce", "ring", "Simple", 1) == (3.4, 14.0)
    assert step_latency_us("all_reduce", "ring", "LL", 2) == (1.0, 2.7)
    assert step_latency_us("all_reduce", "ring", "LL128", 2) == (1.9, 4.0)
    assert step_latency_us("all_reduce", "tree", "LL128", 2) == (1.25, 8.5)
    assert step_latency_us("all_reduce", "nvls", "Simple", 1) == (0.0, 0.0)
    # a ring broadcast pays one kind of hop's latency on every step (review): NVLink's on one
    # node, the network's across nodes, the tree's in Simple
    assert step_latency_us("broadcast", "ring", "LL128", 1) == (1.9, 1.9)
    assert step_latency_us("broadcast", "ring", "LL", 4) == (2.7, 2.7)
    assert step_latency_us("reduce", "ring", "Simple", 4) == (28.0, 28.0)
    topo = api.topology_from_file("topologies/dgx-h100-superpod.yaml", "H100-SXM", [])
    model = api.network_model(topo)
    graph = topo.graph

    def path_latency(a, b):
        return sum(graph.edges[e]["latency"] for e in topo.path(a, b))

    size = 2.0**26
    for ranks in (8, 16):
        group = list(range(ranks))
        ideal = plan_collective("all_reduce", group, size, "ring", model.locality, False)
        simple = plan_collective("all_reduce", group, size, "ring", model.locality, True)
        assert simple.protocol == "Simple" and simple.efficiency == 1.0  # the same bytes
        # the rings' hops (over 2 hosts a ring per GPU, crossing on its rail: ring_channels);
        # each step pays the mean hop latency (Phase.ring)
        (phase,) = simple.phases
        assert phase.ring and phase.steps == 2 * (ranks - 1)
        hops = [(t.src, t.dst) for t in phase.transfers]
        floor = [14e-6 if topo.host_of[a] != topo.host_of[b] else 3.4e-6 for a, b in hops]
        paths = [path_latency(a, b) for a, b in hops]
        extra = 2 * (ranks - 1) * (sum(map(max, floor, paths)) - sum(paths)) / len(hops)
        t_ideal = time_collective(model, ideal)[0]
        t = time_collective(model, simple)[0]
        assert t - t_ideal == pytest.approx(8.4e-6 + extra, rel=1e-9), ranks
