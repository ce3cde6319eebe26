"""Clock: SimPy's event order exactly, SimPy's errors, and SimPy's other features still work."""

import gc
import weakref

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.clock import Clock
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
