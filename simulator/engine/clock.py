"""A SimPy environment with a cheaper timeout and event loop, for the step engine's hot path.

The step engine schedules only delayed calls (timeouts with callbacks, or :meth:`Clock.call_in`
entries: about 1.5 per task, 460K in a GPT-3 175B step), so SimPy's generality costs more than
the work: a method call to schedule
each timeout and one to process each event. :class:`Clock` keeps SimPy's queue and its
ordering (time, priority, insertion number) exactly, so a run gives the same trace bit for
bit, and stays a :class:`simpy.Environment`: processes, plain events and ``run(until=...)``
work as in SimPy.

:meth:`Clock.call_in` is cheaper still: a function call at a later time, queued as a plain
entry ``(time, priority, id, function, arguments)`` with no event object, callback list or
closure. It takes an id from the same counter as every event, so it fires where a timeout
made at that moment would. :func:`call_in` gives the same for any SimPy environment.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from operator import attrgetter

import simpy
from simpy.events import NORMAL, Timeout

_new_timeout = Timeout.__new__


class Clock(simpy.Environment):
    """:class:`simpy.Environment` with an inlined ``timeout``, calls without events
    (:meth:`call_in`) and a tight ``run`` loop (when run to the end).

    >>> clock = Clock()
    >>> clock.timeout(2.5).callbacks.append(lambda ev: print(clock.now))
    >>> clock.call_in(1.0, print, "at", 1.0)
    >>> clock.run()
    at 1.0
    2.5
    """

    # SimPy's ``now`` is a Python-level property; read through a C getter (no frame): the
    # engine reads the time several times per task
    now = property(attrgetter("_now"), doc="The current simulation time (s).")

    def timeout(self, delay: float, value=None) -> Timeout:  # type: ignore[override]
        """A :class:`simpy.events.Timeout` ``delay`` s from now (SimPy's, built inline)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = _new_timeout(Timeout)
        event.env = self
        event.callbacks = []
        event._value = value
        event._delay = delay
        event._ok = True
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), event))
        return event

    def call_in(self, delay: float, function: Callable, *args) -> None:
        """Call ``function(*args)`` ``delay`` s from now, in the order a timeout made now
        would fire (no event is made: nothing can wait for it)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), function, args))

    def step(self) -> None:
        """Process the next event or call (SimPy's ``step`` otherwise)."""
        queue = self._queue
        if queue and len(queue[0]) == 5:
            self._now, _, _, function, args = heappop(queue)
            function(*args)
            return
        super().step()

    def run(self, until=None):
        """Process events until none is left (or, with ``until``, as SimPy does)."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        while queue:
            item = heappop(queue)
            self._now = item[0]
            if len(item) == 5:
                item[3](*item[4])
                continue
            event = item[3]
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None


def call_in(env: simpy.Environment, delay: float, function: Callable, *args) -> None:
    """``function(*args)`` ``delay`` s from now in ``env``: :meth:`Clock.call_in` on a
    :class:`Clock`, a timeout's callback on another SimPy environment."""
    if isinstance(env, Clock):
        env.call_in(delay, function, *args)
    else:
        env.timeout(delay).callbacks.append(lambda _ev: function(*args))


def caller(env: simpy.Environment) -> Callable[..., None]:
    """``call_in`` bound to ``env`` (``caller(env)(delay, function, *args)``), looked up
    once: a :class:`Clock`'s own method, or :func:`call_in` for another environment."""
    if isinstance(env, Clock):
        return env.call_in
    return lambda delay, function, *args: call_in(env, delay, function, *args)
