"""Clock: SimPy's event order exactly, SimPy's errors, and SimPy's other features still work."""

import gc
import weakref

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.clock import Clock, caller
from simulator.engine.simulate import paused_gc


def _replay(env, delays: list[list[float]]) -> list[tuple[float, int]]:
    """Timeouts that schedule more timeouts (ties included); the (time, id) order they fire in."""
    fired = []

    def fire(ident: int, children: list[float]):
        def callback(_ev):
            fired.append((env.now, ident))
            for j, d in enumerate(children):
                env.timeout(d).callbacks.append(fire(ident * 10 + j + 1, []))

        return callback

    for i, row in enumerate(delays):
        env.timeout(row[0]).callbacks.append(fire(i, row[1:]))
    env.run()
    return fired


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0]), min_size=1, max_size=4),
        min_size=1,
        max_size=12,
    )
)
def test_same_order_as_simpy(delays):
    # Same times and, at equal times, the same insertion order: Clock keeps SimPy's queue
    # entries (time, priority, id), so the traces of a run match bit for bit.
    assert _replay(Clock(), delays) == _replay(simpy.Environment(), delays)


def test_negative_delay_is_refused_as_simpy_does():
    with pytest.raises(ValueError, match="Negative delay"):
        Clock().timeout(-1.0)


def test_processes_and_run_until_still_work():
    clock = Clock()
    seen = []

    def proc(env):
        yield env.timeout(1.0)
        seen.append(env.now)
        yield env.timeout(2.0)
        seen.append(env.now)

    clock.process(proc(clock))
    clock.run(until=2.0)
    assert seen == [1.0] and clock.now == 2.0
    clock.run()
    assert seen == [1.0, 3.0] and clock.now == 3.0


def test_paused_gc_still_collects_cycles_later():
    # Objects made while the collector is paused are promoted without a pass, not leaked: a
    # full collection afterwards still frees a reference cycle made inside the block.
    class Node:
        pass

    with paused_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a
        probe = [a]
    ref = weakref.ref(a)
    del a, b, probe
    assert ref() is not None  # only a cycle keeps it: reference counting cannot free it
    gc.collect()
    assert ref() is None
    assert gc.isenabled()


def _replay_calls(env, delays: list[list[float]], use_calls: list[bool]) -> list[tuple[float, int]]:
    """As :func:`_replay`, each row's events scheduled by ``call_in`` where ``use_calls`` says
    so (a Clock), else by a timeout."""
    fired = []

    def fire(ident: int, children: list[float], calls: bool):
        fired.append((env.now, ident))
        for j, d in enumerate(children):
            schedule(d, ident * 10 + j + 1, [], calls)

    def schedule(delay, ident, children, calls):
        if calls:
            env.call_in(delay, fire, ident, children, calls)
        else:
            env.timeout(delay).callbacks.append(lambda _ev: fire(ident, children, calls))

    for i, (row, calls) in enumerate(zip(delays, use_calls, strict=False)):
        schedule(row[0], i, row[1:], calls)
    env.run()
    return fired


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5]), min_size=1, max_size=4), st.booleans()
        ),
        min_size=1,
        max_size=12,
    )
)
def test_calls_fire_where_timeouts_made_then_would(rows):
    # call_in takes its id from the events' counter: mixed with timeouts, every call fires in
    # the (time, insertion) order SimPy gives timeouts made at the same moments.
    delays = [r for r, _ in rows]
    calls = [c for _, c in rows]
    assert _replay_calls(Clock(), delays, calls) == _replay(simpy.Environment(), delays)


def test_calls_refuse_negative_delays_and_run_under_until():
    clock = Clock()
    with pytest.raises(ValueError, match="Negative delay"):
        clock.call_in(-1.0, print)
    seen = []
    clock.call_in(1.0, seen.append, "a")
    clock.call_in(3.0, seen.append, "b")
    clock.run(until=2.0)  # SimPy's loop, through Clock.step
    assert seen == ["a"] and clock.now == 2.0
    clock.run()
    assert seen == ["a", "b"] and clock.now == 3.0


@pytest.mark.parametrize("make", [Clock, simpy.Environment])
def test_caller_works_on_any_simpy_environment(make):
    env = make()
    seen = []
    caller(env)(1.5, lambda x: seen.append((env.now, x)), 7)
    env.run()
    assert seen == [(1.5, 7)]
