"""Compute slowed by communication in flight on the same rank, against closed forms.

A rank's compute runs at rate 1 / (1 + s) while it has a collective in flight. The comm here is
a two-rank all-gather of 2S through one NVSwitch (direct algorithm, Simple, no NCCL base
latency): each rank sends its S, which takes exactly S / B + l: B = 100 GB/s, l = 1 us GPU to
GPU. Pipeline send/recv pairs do not slow compute (p2p channels, a few SMs).
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import NetworkModel
from simulator.engine.simulate import run_taskgraph_with_memory
from simulator.schedule import CommSpec, Task, TaskGraph
from simulator.topology.nvswitch import nvswitch_topology

BW, LAT = 100e9, 1e-6
S_FRAC = 0.189
REL = 1e-12  # a few float operations from the closed form


def _model():
    topo = nvswitch_topology(4, BW, latency=LAT)
    return NetworkModel(topo.graph, topo.router, topo.host_of)


def _run(g, s, index=True):
    trace, _, _ = run_taskgraph_with_memory(_model(), g, {r: r for r in range(4)}, interference=s)
    frame = trace.to_frame()
    return frame.set_index("name") if index else frame


def _send(g, pair, size, instance, deps=(), name="send", kind="all_gather"):
    """A collective moving ``size`` bytes each way between the pair (or a real send/recv)."""
    if kind == "all_gather":
        spec = CommSpec(kind, pair, 2 * size, instance=instance, algorithm="direct")
    else:
        spec = CommSpec(kind, pair, size, instance=instance)
    for r in pair:
        g.add(Task(r, "comm", "comm", name, deps=deps, comm=spec))


def test_a_pipeline_send_does_not_slow_compute():
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", 1.0))
    _send(g, (0, 1), 1e12, 0, kind="send_recv")  # 10 s beside the whole GEMM
    assert _run(g, 0.5).loc["gemm", "end_s"] == 1.0


@pytest.mark.parametrize("s", [0.189, 0.4, 1.0])
def test_fully_overlapped_compute_takes_d_times_one_plus_s(s):
    d = 1.0
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", d))
    _send(g, (0, 1), 1e12, 0)  # 10 s: outlasts the GEMM
    frame = _run(g, s)
    assert frame.loc["gemm", "start_s"] == 0.0
    assert frame.loc["gemm", "end_s"] == pytest.approx(d * (1 + s), rel=REL)


def test_comm_starting_half_way_slows_the_second_half():
    d, s = 1.0, S_FRAC
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", d))
    half = g.add(Task(0, "side", "compute", "half", d / 2))  # ends as the comm starts
    _send(g, (0, 1), 1e12, 0, deps=(half,))
    frame = _run(g, s)
    assert frame.loc["half", "end_s"] == d / 2  # nothing in flight before it: full speed
    # d/2 of work at full speed, then the other d/2 at 1/(1+s): d + s d/2.
    assert frame.loc["gemm", "end_s"] == pytest.approx(d + s * d / 2, rel=REL)


def test_comm_ending_half_way_slows_the_first_part_only():
    from simulator.collectives.nccl_tuning import P2P_BASE_US

    d, s, size = 1.0, S_FRAC, 4e10
    c = P2P_BASE_US * 1e-6 + size / BW + LAT  # NCCL's p2p base, 0.4 s, 1 us
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", d))
    _send(g, (0, 1), size, 0)
    frame = _run(g, s)
    assert frame.loc["send", "end_s"].tolist() == pytest.approx([c, c], rel=REL)
    # c seconds at 1/(1+s) do c/(1+s) of work; the rest at full speed: d + c s / (1 + s).
    assert frame.loc["gemm", "end_s"] == pytest.approx(d + c * s / (1 + s), rel=REL)


def test_two_comms_at_once_slow_no_more_than_one():
    d, s = 1.0, S_FRAC
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", d))
    _send(g, (0, 1), 1e12, 0)
    spec = CommSpec("all_gather", (0, 2), 2e12, instance=1, algorithm="direct")
    g.add(Task(0, "comm2", "comm", "send2", comm=spec))
    g.add(Task(2, "comm", "comm", "send2", comm=spec))
    assert _run(g, s).loc["gemm", "end_s"] == pytest.approx(d * (1 + s), rel=REL)


def test_comm_on_another_rank_does_not_slow_compute():
    d = 1.0
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", d))
    _send(g, (2, 3), 1e12, 0)
    assert _run(g, S_FRAC).loc["gemm", "end_s"] == d


def test_zero_reproduces_the_undisturbed_trace_exactly():
    # Compute overlapping comm: with s = 0 every compute task ends at exactly start + d (no
    # re-timing arithmetic), and the whole trace equals the default run's.
    durations = {"a": 0.1, "b": 0.7, "c": 0.3}
    g = TaskGraph()
    a = g.add(Task(0, "compute", "compute", "a", durations["a"]))
    g.add(Task(0, "compute", "compute", "b", durations["b"]))
    _send(g, (0, 1), 3e10, 0, deps=(a,))
    g.add(Task(1, "compute", "compute", "c", durations["c"]))
    frame = _run(g, 0.0)
    assert frame.loc["send", "start_s"].tolist() == [0.1, 0.1]  # overlaps b on rank 0
    for name, d in durations.items():
        assert frame.loc[name, "end_s"] == frame.loc[name, "start_s"] + d
    trace, _, _ = run_taskgraph_with_memory(_model(), g, {r: r for r in range(4)})
    assert trace.to_frame().equals(_run(g, 0.0, index=False))


@pytest.mark.parametrize("bad", [-0.1, float("inf"), float("nan")])
def test_bad_interference_is_an_error(bad):
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "gemm", 1.0))
    with pytest.raises(ValueError, match="interference"):
        _run(g, bad)


def _chain_graph(durations, sizes):
    """Two ranks; each computes its chain; after compute task j both ranks all-reduce
    (on one FIFO comm stream, so one collective at a time and no network contention)."""
    g = TaskGraph()
    ids = {0: [], 1: []}
    for r in (0, 1):
        for j, d in enumerate(durations[r]):
            ids[r].append(g.add(Task(r, "compute", "compute", f"f{r}.{j}", d)))
    for k, (j, size) in enumerate(sizes):
        spec = CommSpec("all_reduce", (0, 1), size, instance=k)
        for r in (0, 1):
            g.add(Task(r, "comm", "comm", f"ar{k}", deps=(ids[r][j],), comm=spec))
    return g


chains = st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    durations=st.tuples(chains, chains),
    comms=st.lists(st.tuples(st.integers(0, 1), st.floats(1e3, 1e11)), min_size=1, max_size=4),
    s=st.floats(1e-3, 1.0),
)
def test_interference_never_shortens_a_step(durations, comms, s):
    g = _chain_graph(durations, comms)
    base = _run(g, 0.0)["end_s"].max()
    slowed = _run(g, s)["end_s"].max()
    # Never faster; and never slower than every compute task stretched by (1 + s), as the
    # comm times do not change (no contention) and the step is a longest path.
    assert slowed >= base * (1 - 1e-12)
    assert slowed <= base * (1 + s) * (1 + 1e-12)


def test_a_collective_over_the_network_slows_compute_by_its_bandwidth_share():
    # Two hosts of 2 GPUs, NVLink 450 GB/s, NICs 50 GB/s: an all-gather between the hosts
    # crosses a 50 GB/s hop, so it slows compute by s x 50/450 (module doc); one inside a host
    # by the full s.
    from tests.fat_trees import fat_tree as fat_tree_topology

    topo = fat_tree_topology(2, gpus_per_node=2, nvlink_bandwidth=450e9, nic_bandwidth=50e9)
    model = NetworkModel(topo.graph, topo.router, topo.host_of)
    devices = {r: d for r, d in enumerate(topo.devices)}
    s, d = 0.4, 1.0
    for pair, share in (((0, 2), 50 / 450), ((0, 1), 1.0)):
        g = TaskGraph()
        g.add(Task(0, "compute", "compute", "gemm", d))
        _send(g, pair, 1e12, 0)  # outlasts the GEMM
        trace, _, _ = run_taskgraph_with_memory(model, g, devices, interference=s)
        frame = trace.to_frame().set_index("name")
        assert frame.loc["gemm", "end_s"] == pytest.approx(d * (1 + s * share), rel=REL)


def test_the_scenario_default_reaches_the_simulation():
    from simulator import api
    from simulator.scenario import load_scenario_text

    text = """
model: {layers: 2, hidden: 1024, heads: 16, ffn: 4096, vocab: 1024}
cluster: {accelerator: H100, topology: {kind: nvswitch, node: {gpus: 8}}}
parallelism: {zero: 3}
training: {global_batch: 8, micro_batch: 1, seq_len: 1024}
"""
    on = api.run(load_scenario_text(text)).metrics.step_time_s
    off = api.run(load_scenario_text(text + "simulation: {comm_interference: 0}")).metrics
    # ZeRO-3's gathers and reduce-scatters overlap compute: the default slows the step
    assert on > off.step_time_s * 1.01
