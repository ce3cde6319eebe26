"""The TaskGraph executor on small graphs with known answers."""

import math

import pytest

from simulator.engine import NetworkModel, run_taskgraph
from simulator.engine.executor import DeadlockError
from simulator.schedule import CommSpec, Task, TaskGraph
from simulator.topology.nvswitch import nvswitch_topology


def _model():
    topo = nvswitch_topology(8, 100e9, latency=1e-6)
    return NetworkModel(topo.graph, topo.router, topo.host_of)


def test_compute_chain_and_streams():
    g = TaskGraph()
    a = g.add(Task(0, "compute", "compute", "a", 1.0))
    g.add(Task(0, "compute", "compute", "b", 2.0))  # stream order: after a
    g.add(Task(0, "side", "compute", "c", 0.5, deps=(a,)))  # other stream, after a
    frame = run_taskgraph(_model(), g, {0: 0})[0].to_frame().set_index("name")
    assert frame.loc["b", "start_s"] == 1.0 and frame.loc["b", "end_s"] == 3.0
    assert frame.loc["c", "start_s"] == 1.0 and frame.loc["c", "end_s"] == 1.5


def test_collective_waits_for_the_last_member():
    g = TaskGraph()
    spec = CommSpec("all_reduce", (0, 1), 1e9, instance=0)
    w0 = g.add(Task(0, "compute", "compute", "w0", 1.0))
    w1 = g.add(Task(1, "compute", "compute", "w1", 3.0))
    g.add(Task(0, "comm", "comm", "ar", deps=(w0,), comm=spec))
    g.add(Task(1, "comm", "comm", "ar", deps=(w1,), comm=spec))
    frame = run_taskgraph(_model(), g, {0: 0, 1: 1})[0].to_frame()
    ar = frame[frame["name"] == "ar"]
    # Ring all-reduce of 2 ranks: 2(n-1)/n S/B + 2(n-1) l = 1e9/1e11 + 2 x 3.4 us, from t = 3,
    # after NCCL's base latency of ring Simple, 8.4 us (the protocol NCCL's model picks for
    # 1 GB); each step pays Simple's NVLink step latency (hwLat 3.4 us), above the 1 us path
    assert set(ar["start_s"]) == {3.0}
    assert ar["end_s"].tolist() == pytest.approx([3.0 + 8.4e-6 + 0.01 + 6.8e-6] * 2, rel=1e-12)


def test_a_collective_over_a_rank_not_placed_is_an_error():
    # ranks 0 and 1 on devices 0 and 1 (the placement the engine reads groups through
    # without mapping them), rank 2 on none: its collective cannot be routed
    g = TaskGraph()
    spec = CommSpec("all_reduce", (0, 2), 1e9, instance=0)
    g.add(Task(0, "comm", "comm", "ar", comm=spec))
    g.add(Task(2, "comm", "comm", "ar", comm=spec))
    with pytest.raises(KeyError, match="not placed"):
        run_taskgraph(_model(), g, {0: 0, 1: 1})


def test_copies_over_a_rank_not_placed_are_an_error():
    # the same for a collective's symmetric copies held as one array (RankGroups): rank 5 of
    # the copy (4, 5) is on no device
    from simulator.plan.grid import RankGroups

    g = TaskGraph()
    copies = g.add_copies(RankGroups([[2, 3], [4, 5]]))
    spec = CommSpec("all_reduce", (0, 1), 1e9, instance=0, copies=copies)
    g.add(Task(0, "comm", "comm", "ar", comm=spec))
    g.add(Task(1, "comm", "comm", "ar", comm=spec))
    with pytest.raises(KeyError, match=r"not placed on a device: \[4, 5\]"):
        run_taskgraph(_model(), g, {0: 0, 1: 1, 2: 2, 3: 3})


def test_deadlock_is_reported():
    # x waits for y, but y is behind x on the same stream.
    g = TaskGraph()
    x = g.add(Task(0, "s", "compute", "x", 1.0, deps=(1,)))
    g.add(Task(0, "s", "compute", "y", 1.0, deps=(x,)))
    with pytest.raises(DeadlockError):
        run_taskgraph(_model(), g, {0: 0})


@pytest.mark.parametrize("duration", [math.inf, math.nan])
def test_non_finite_duration_is_an_error(duration):
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "forever", duration))
    with pytest.raises(ValueError, match="finite"):
        run_taskgraph(_model(), g, {0: 0})


def test_collective_on_vanishing_bandwidth_is_an_error():
    # A 1e-300 B/s switch: the all-reduce's finish time overflows to inf; the run
    # stops with a ValueError instead of spinning on inf/nan times.
    topo = nvswitch_topology(8, 1e-300, latency=1e-6)
    g = TaskGraph()
    spec = CommSpec("all_reduce", (0, 1), 1e9, instance=0)
    for r in (0, 1):
        g.add(Task(r, "comm", "comm", "ar", comm=spec))
    with pytest.raises(ValueError, match="overflows"):
        run_taskgraph(NetworkModel(topo.graph, topo.router, topo.host_of), g, {0: 0, 1: 1})


def test_trace_rows_are_the_tasks_with_their_times_in_the_order_they_ended():
    # The engine records (task, start, end) and the frame takes the rest from the task; the
    # frame equals whole records built by hand from the tasks, row for row, dtypes included.
    from simulator.trace import Trace, TraceRecord

    g = TaskGraph()
    spec = CommSpec("all_reduce", (0, 1), 1e9, instance=0)
    a = g.add(Task(0, "compute", "compute", "a", 2.0, phase="forward", layer=3, flops=5e12))
    b = g.add(Task(1, "compute", "compute", "b", 1.0, phase="forward", layer=3, microbatch=7))
    g.add(Task(0, "comm", "comm", "ar", deps=(a,), comm=spec, phase="input_grad"))
    g.add(Task(1, "comm", "comm", "ar", deps=(b,), comm=spec, phase="input_grad"))
    trace = run_taskgraph(_model(), g, {0: 0, 1: 1})[0]
    frame = trace.to_frame()
    assert frame["name"].tolist() == ["b", "a", "ar", "ar"]  # as they ended (b at 1 s, a at 2)
    by_hand = Trace()
    for i, start, end in trace.runs:
        t = g.tasks[i]
        size = t.comm.size_bytes if t.comm else 0.0
        fields = (t.rank, t.stream, t.kind, t.phase, t.name, t.layer, t.microbatch)
        by_hand.add(TraceRecord(*fields, start, end, t.flops, size))
    expected = by_hand.to_frame()
    assert frame.equals(expected) and (frame.dtypes == expected.dtypes).all()


def test_a_graph_is_indexed_once_and_afresh_after_a_change():
    g = TaskGraph()
    g.add(Task(0, "compute", "compute", "a", 1.0))
    first = g.compiled()
    assert g.compiled() is first  # kept for the next run
    run_taskgraph(_model(), g, {0: 0})
    assert g.compiled() is first
    g.add(Task(0, "compute", "compute", "b", 1.0))
    assert g.compiled() is not first and g.compiled().queue == [[0, 1]]


def test_a_coded_frame_names_the_same_rows_as_the_frame():
    # Text as codes (equal codes exactly where the text is equal); frame_of turns the coded
    # frame's task indices back into the frame, row for row.
    g = TaskGraph()
    for k, name in enumerate(["a", "b", "a", "c", "b"]):
        g.add(Task(k % 2, "compute", "compute", name, 1.0 + k, phase=f"p{k % 3}"))
    trace = run_taskgraph(_model(), g, {0: 0, 1: 1})[0]
    frame, coded = trace.to_frame(), trace.coded_frame()
    for col in ("stream", "kind", "phase", "name"):
        text, code = frame[col].to_numpy(), coded[col].to_numpy()
        assert coded[col].dtype.kind == "i"
        assert ((text[:, None] == text[None, :]) == (code[:, None] == code[None, :])).all()
    again = trace.frame_of(
        coded["task"].to_numpy(), coded["start_s"].to_numpy(), coded["end_s"].to_numpy()
    )
    assert again.equals(frame)
