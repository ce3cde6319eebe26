"""Repeating a pipeline's steady state (engine.steady_state, api.run) gives the trace, memory
timeline and metrics of simulating every micro-batch."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.engine import steady_state
from simulator.engine.simulate import run_engine
from simulator.engine.steady_state import Repeat, expand, expand_memory, find_repeat
from simulator.pipelines import SteadyState
from simulator.schedule.perturb import SlowCompute
from simulator.stages import steady
from simulator.topology import build_topology
from simulator.trace import COLUMNS

# The engine's own rounding makes two periods of a full simulation differ by about 1e-12 s
# (GPT-3 175B: 1.4e-12 s over 27 s); repeated k times that stays far below 1e-9 s, while any
# real difference in contention or order moves tasks by microseconds or more.
TIME_TOL_S = 1e-9
LABELS = [c for c in COLUMNS if c not in ("start_s", "end_s")]
EX = "scenarios/examples/"


def _run(path: str, *overrides: str, repeat: bool = True, **kwargs) -> api.RunResult:
    flag = f"simulation.repeat_steady_state={'true' if repeat else 'false'}"
    return api.run(api.load(path, [*overrides, flag]), **kwargs)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["rank", "stream", "start_s", "end_s", "name", "layer", "microbatch", "phase"]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def assert_same_run(a: api.RunResult, b: api.RunResult) -> None:
    # the GPU's tasks record by record; the host's launches (which run ahead of the GPU, so
    # their repetition is not checked: api._gpu_rows) the same launches, each as long
    ha, hb = (r.trace[r.trace["kind"] == "host"] for r in (a, b))
    assert len(ha) == len(hb)
    busy = [float((h["end_s"] - h["start_s"]).sum()) for h in (ha, hb)]
    assert busy[0] == pytest.approx(busy[1], rel=1e-9)
    fa = _sorted(a.trace[a.trace["kind"] != "host"])
    fb = _sorted(b.trace[b.trace["kind"] != "host"])
    assert len(fa) == len(fb)
    pd.testing.assert_frame_equal(fa[LABELS], fb[LABELS])
    for col in ("start_s", "end_s"):
        assert np.abs(fa[col].to_numpy() - fb[col].to_numpy()).max() <= TIME_TOL_S
    da, db = a.metrics.as_dict(), b.metrics.as_dict()
    assert da.keys() == db.keys()
    for key, va in da.items():
        vb = db[key]
        if key == "network_rerates":  # the engine's own counter of work done (module doc)
            continue
        if isinstance(va, float):
            # a ratio of sums of the times above: relative 1e-9 is the same bound
            assert va == pytest.approx(vb, rel=1e-9, abs=1e-12), key
        elif isinstance(va, dict):
            assert va.keys() == vb.keys(), key
            for k in va:
                if (key, k) == ("utilisation", "host"):  # the launches' places: see above
                    continue
                assert va[k] == pytest.approx(vb[k], rel=1e-9, abs=1e-12), (key, k)
        else:
            assert va == vb, key
    # the memory timeline: the same events (allocations and releases) at the same times
    ma = a.memory.sort_values(["rank", "time_s", "bytes"]).reset_index(drop=True)
    mb = b.memory.sort_values(["rank", "time_s", "bytes"]).reset_index(drop=True)
    assert len(ma) == len(mb)
    assert np.abs(ma["time_s"].to_numpy() - mb["time_s"].to_numpy()).max() <= TIME_TOL_S
    assert ma["bytes"].max() == pytest.approx(mb["bytes"].max(), rel=1e-12)


def _repeats(path: str, *overrides: str) -> bool:
    """Whether ``api.run`` simulates the scenario with fewer micro-batches than it has."""
    s = api.load(path, list(overrides))
    plan = api.build_plan(s)
    step = api.build_step(plan, repeat=True)
    return step.steady is not None and len(step.graph.tasks) < len(api.build_step(plan).graph.tasks)


CASES = {
    "1f1b": (EX + "pipeline-1f1b.yaml", "training.global_batch=32"),
    "interleaved": (EX + "pipeline-interleaved.yaml", "training.global_batch=48"),
    # pp divides the micro-batches: Megatron's rounds, so it repeats
    "flexible-interleaved": (
        EX + "pipeline-interleaved.yaml",
        "training.global_batch=48",
        "parallelism.pipeline.schedule=flexible-interleaved",
    ),
    "full-mode": (
        EX + "pipeline-1f1b.yaml",
        "training.global_batch=32",
        "simulation.mode=full",
    ),
    "per-kernel-tasks": (
        EX + "pipeline-1f1b.yaml",
        "training.global_batch=24",
        "simulation.kernel_tasks=true",
    ),
    "eager-framework": (
        EX + "pipeline-1f1b.yaml",
        "training.global_batch=24",
        "framework.name=pytorch-eager",
    ),
    "no-interference": (
        EX + "pipeline-1f1b.yaml",
        "training.global_batch=24",
        "simulation.comm_interference=0",
    ),
    "zero1-grad-accumulation": (EX + "zero1-llama3-8b.yaml", "training.global_batch=128"),
    # ZeRO-2: a reduce-scatter per micro-batch, repeated with its micro-batch
    "zero2-grad-accumulation": (
        EX + "zero1-llama3-8b.yaml",
        "training.global_batch=128",
        "parallelism.zero=2",
    ),
    "fsdp-zero3": (EX + "llama3-8b-fsdp.yaml",),
    "moe-expert-parallel": (EX + "mixtral-8x22b.yaml",),
}


@pytest.mark.parametrize("case", list(CASES))
def test_repeated_steady_state_is_the_full_simulation(case):
    path, *overrides = CASES[case]
    assert _repeats(path, *overrides)  # else the test would compare a run with itself
    assert_same_run(_run(path, *overrides), _run(path, *overrides, repeat=False))


def test_a_slow_rank_repeats_too():
    path, *overrides = CASES["full-mode"]
    slow = [SlowCompute(rank=5, factor=1.5)]
    a = _run(path, *overrides, perturbations=slow)
    b = _run(path, *overrides, repeat=False, perturbations=slow)
    assert_same_run(a, b)
    assert a.healthy_step_time_s == pytest.approx(b.healthy_step_time_s, rel=1e-12)


def test_a_schedule_that_does_not_repeat_is_simulated_in_full(caplog):
    # ZB-H1 on this 4-stage cut: the stages differ (embedding on the first, loss on the
    # last) and the deferred weight gradients take about 12 micro-batches to settle; with 40
    # the check fails, a warm-up four times as long would not halve them, twice the period
    # with an 8-micro-batch warm-up is tried and fails too: the full run
    path, over = EX + "pipeline-zb-h1.yaml", "training.global_batch=40"
    assert _repeats(path, over)
    with caplog.at_level(logging.DEBUG, logger="simulator.api"):
        a = _run(path, over)
    assert "trying a 8-micro-batch warm-up and a period of 2" in caplog.text
    assert "simulating all" in caplog.text
    b = _run(path, over, repeat=False)
    pd.testing.assert_frame_equal(_sorted(a.trace), _sorted(b.trace))  # the same run, exactly


def test_a_longer_warm_up_is_tried_once(caplog):
    # ZB-H1's deferred weight gradients fill the faster stages' slack over about 12
    # micro-batches on this cut (the full trace repeats exactly from there): the first check
    # (a 4-micro-batch warm-up) fails, a 16-micro-batch one repeats, and equals the full run
    path, over = EX + "pipeline-zb-h1.yaml", "training.global_batch=96"
    with caplog.at_level(logging.DEBUG, logger="simulator.api"):
        a = _run(path, over)
    assert "trying a 16-micro-batch warm-up and a period of 1" in caplog.text
    assert_same_run(a, _run(path, over, repeat=False))


def test_a_state_that_repeats_every_two_micro_batches(caplog):
    # 1F1B on the zero-bubble paper's 14.6B model cut into 24 stages whose end stages hold a
    # layer fewer: each stage settles into a state that repeats every two micro-batches
    # (successive micro-batches 0.1 ms apart in turn), not every one, so the first check
    # (period 1, 24-micro-batch warm-up) fails; four times the warm-up would not halve the
    # 144 micro-batches, twice the period with a 44-micro-batch warm-up repeats (a 24 one
    # would not), and equals the full run
    path = "scenarios/validation/zerobubble-14.6b-24.yaml"
    over = ["training.micro_batch=1", "training.global_batch=144"]
    over.append("parallelism.pipeline.schedule=1f1b")
    plan = api.build_plan(api.load(path, over))
    first = api.build_step(plan, repeat=True).steady
    assert first == SteadyState(24, 1, 24)
    shifted = steady_state.SHIFT_DIFFERS + " (off by up to 0.000669 s)"
    assert steady._steady_state_retries(plan, first, shifted)[:1] == [SteadyState(44, 2, 24)]
    # other reasons (a task outside the micro-batches in the window) are not a longer period
    assert steady._steady_state_retries(plan, first, "a task outside the micro-batches runs") == []
    topo = build_topology(plan.scenario.cluster)
    for tried in (first, SteadyState(24, 2, 24)):
        with pytest.raises(api.NotRepeating):
            api.simulate(api.build_step(plan, None, True, tried), topo)
    api.simulate(api.build_step(plan, None, True, SteadyState(44, 2, 24)), topo)  # repeats
    with caplog.at_level(logging.DEBUG, logger="simulator.api"):
        a = _run(path, *over)
    assert "trying a 44-micro-batch warm-up and a period of 2" in caplog.text
    assert "simulating all" not in caplog.text
    assert_same_run(a, _run(path, *over, repeat=False))


def test_tracked_links_are_simulated_in_full():
    path, *overrides = CASES["1f1b"]
    s = api.load(path, list(overrides))
    with pytest.raises(api.NotRepeating):
        api.simulate(
            api.build_step(api.build_plan(s), repeat=True), build_topology(s.cluster), (), True
        )
    full = _run(path, *overrides, repeat=False)
    tracked = _run(path, *overrides, track_links=True)
    assert len(tracked.trace) == len(full.trace)
    assert tracked.links is not None


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    pp=st.sampled_from([2, 4]),
    schedule=st.sampled_from(["1f1b", "interleaved"]),
    periods=st.integers(1, 3),
    tp=st.sampled_from([1, 2]),
)
def test_property_repeat_equals_full(pp, schedule, periods, tp):
    v = 2 if schedule == "interleaved" else 1
    q = pp if v > 1 else 1
    # head and tail: p (1F1B); interleaved rounds its warm-up up to whole groups of p
    st_min = 2 * pp + 2 * q if v == 1 else 6 * pp
    m = 2 * st_min + periods * q
    over = [
        f"parallelism.pp={pp}",
        f"parallelism.tp={tp}",
        f"parallelism.pipeline.schedule={schedule}",
        f"parallelism.pipeline.virtual_stages={v}",
        f"training.global_batch={m * (8 // (pp * tp))}",
    ]
    path = EX + "pipeline-1f1b.yaml"
    assert _repeats(path, *over)
    assert_same_run(_run(path, *over), _run(path, *over, repeat=False))


# -- the repetition on hand-made traces ----------------------------------------------------


def _trace(periodic: bool) -> pd.DataFrame:
    """Six micro-batches on one rank, each a forward (1 s) and a backward (0.5 s) every 2 s,
    then an optimizer step; with ``periodic`` False micro-batch 3's backward is 0.25 s late."""
    rows = []
    for j in range(6):
        late = 0.25 if not periodic and j == 3 else 0.0
        rows.append((0, "compute", "compute", "forward", "f", 0, j, 2.0 * j, 2.0 * j + 1, 1, 0))
        b = 2.0 * j + 1 + late
        rows.append((0, "compute", "compute", "input_grad", "b", 0, j, b, b + 0.5, 1, 0))
    rows.append((0, "compute", "compute", "optimizer", "opt", -1, -1, 12.0, 13.0, 0.0, 0.0))
    return pd.DataFrame(rows, columns=COLUMNS)


def test_find_repeat_and_expand_on_a_hand_made_trace():
    steady = SteadyState(head=1, period=1, tail=3)  # micro-batches 1 and 2 the two periods
    rep = find_repeat(_trace(True), steady, full=10)
    assert rep == Repeat(first=2, period=1, delta_s=2.0, window_s=(4.0, 5.0), copies=4)
    out = expand(_trace(True), rep)
    assert len(out) == 2 * 10 + 1
    # ten micro-batches every 2 s, the optimizer after the last: at 20 s = 12 + 4 x 2
    f = out[out["name"] == "f"]
    assert sorted(f["microbatch"]) == list(range(10))
    assert np.allclose(f.sort_values("microbatch")["start_s"], 2.0 * np.arange(10))
    assert out[out["name"] == "opt"]["start_s"].item() == 20.0
    # memory: micro-batch 2's allocation is repeated, the tail's and the optimizer's move
    events = [(0, 4.0, 1.0), (0, 6.0, 1.0), (0, 12.5, -2.0)]
    moved = [tuple(r) for r in expand_memory(np.array(events), np.array([2, 3, -1]), rep).tolist()]
    assert sorted(moved) == sorted(
        [(0, 4.0, 1.0), (0, 6.0, 1.0), (0, 8.0, 1.0), (0, 10.0, 1.0), (0, 12.0, 1.0)]
        + [(0, 14.0, 1.0), (0, 20.5, -2.0)]
    )


def test_find_repeat_refuses_a_trace_that_does_not_repeat():
    # micro-batch 3 (the second period with head 2) has its backward late: not the first
    # period shifted
    why = find_repeat(_trace(False), SteadyState(head=2, period=1, tail=2), full=10)
    assert isinstance(why, str) and "not the first shifted" in why


def _reduced_trace(path: str, *overrides: str) -> tuple[pd.DataFrame, SteadyState, int]:
    """The trace of ``path``'s reduced step (before repeating), its steady state and the
    plan's micro-batches."""
    s = api.load(path, list(overrides))
    topo = build_topology(s.cluster)
    step = api.build_step(api.build_plan(s, topo), None, True)
    run = run_engine(
        api.network_model(topo),
        step.graph,
        {r: topo.devices[r] for r in range(step.plan.grid.size)},
        interference=s.simulation.comm_interference,
    )
    frame = run.trace.to_frame()
    return frame[frame["kind"] != "host"], step.steady, step.plan.micro_batches  # api._gpu_rows


@pytest.mark.parametrize("case", ["1f1b", "interleaved", "moe-expert-parallel"])
def test_packed_twin_search_finds_what_the_join_finds(case, monkeypatch):
    # _twins packs each task's key into one integer and sorts; _twins_joined joins on the
    # key columns. Same pairs: the same Repeat to the bit, and the same refusals when a
    # window task loses its twin or differs from it.
    frame, steady, full = _reduced_trace(*CASES[case])
    h, q = steady.head, steady.period
    first = frame.index[frame["microbatch"] == h].min()  # a twin of a window task
    window = frame.index[frame["microbatch"] == h + q]
    cases = {
        "as is": frame,
        "a twin missing": frame.drop(index=first),
        "a twin's FLOPs": frame.assign(flops=frame["flops"].where(frame.index != first, -1.0)),
        "a task's bytes": frame.assign(bytes=frame["bytes"].where(frame.index != window[0], 7.0)),
    }
    packed = {name: find_repeat(f, steady, full) for name, f in cases.items()}
    monkeypatch.setattr(steady_state, "_twins", steady_state._twins_joined)
    joined = {name: find_repeat(f, steady, full) for name, f in cases.items()}
    assert packed == joined
    assert isinstance(packed["as is"], Repeat)
    assert all(isinstance(packed[k], str) for k in cases if k != "as is")


def test_both_retries_are_tried_before_simulating_all(monkeypatch, caplog):
    # 1F1B on the zero-bubble paper's 28.3B model, 8 stages, 512 micro-batches: its state
    # repeats every two micro-batches, so the longer warm-up (which fits in half of 512) fails
    # too; the doubled period is tried next, not the whole step (a sixth of its cost)
    path = "scenarios/validation/zerobubble-28.3b.yaml"
    over = ["training.micro_batch=1", "training.global_batch=512"]
    over.append("parallelism.pipeline.schedule=1f1b")
    s = api.load(path, over)
    plan = api.build_plan(s)
    first = api.build_step(plan, repeat=True).steady
    shifted = steady_state.SHIFT_DIFFERS + " (off by up to 0.000803 s)"
    retries = steady._steady_state_retries(plan, first, shifted)
    assert retries == [first.longer_warm_up(), first.doubled_period(512)]
    assert [r.period for r in retries] == [1, 2] and retries[0].head == 4 * first.head
    # the run tries them in that order, then the whole step (steps and simulations stubbed:
    # every repeating state is refused; what is checked is the order of the states built; that
    # a doubled period's expansion is the whole run, to 1e-9, is the test above's)
    from types import SimpleNamespace

    built = []

    def build(plan, compute_model=None, repeat=False, steady=None):
        state = (steady or first) if repeat else None  # the builder's own state first
        built.append(state)
        return SimpleNamespace(steady=state)

    reasons = {}  # the refusal of each state tried (default: the periods differ in time)

    def simulate(step, *args, **kwargs):
        if step.steady is not None:
            raise api.NotRepeating(reasons.get(step.steady, shifted))
        return "simulated"

    from simulator.stages import step_run  # where the run builds and simulates

    monkeypatch.setattr(step_run, "build_plan", lambda *a, **k: plan)
    monkeypatch.setattr(step_run, "build_step", build)
    monkeypatch.setattr(step_run, "simulate", simulate)
    monkeypatch.setattr(step_run, "perturb", lambda step, perturbations: step)
    monkeypatch.setattr(api, "_result", lambda scenario, step, sim, track: sim)
    with caplog.at_level(logging.DEBUG, logger="simulator.api"):
        assert api._run_once(s, None, None, False, ()) == "simulated"
    assert built == [first, *retries, None]
    assert caplog.text.count("does not repeat") == 3 and "simulating all" in caplog.text
    # a longer warm-up refused for another reason (a task outside the micro-batches in the
    # window): a longer period would not help, so the whole step comes next
    built.clear()
    reasons[retries[0]] = "a task outside the micro-batches runs"
    assert api._run_once(s, None, None, False, ()) == "simulated"
    assert built == [first, retries[0], None]
