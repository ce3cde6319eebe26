"""A SimPy environment with a cheaper timeout and event loop, for the step engine's hot path.

The step engine schedules only timeouts with callbacks (about 1.5 events per task: 460K in a
GPT-3 175B step), so SimPy's generality costs more than the work: a method call to schedule
each timeout and one to process each event. :class:`Clock`
keeps SimPy's queue and its ordering (time, priority, insertion number) exactly, so a run
gives the same trace bit for bit, and stays a :class:`simpy.Environment`: processes, plain
events and ``run(until=...)`` work as in SimPy.
"""

from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.events import NORMAL, Timeout

_new_timeout = Timeout.__new__


class Clock(simpy.Environment):
    """:class:`simpy.Environment` with an inlined ``timeout`` and a tight ``run`` loop (when
    run to the end).

    >>> clock = Clock()
    >>> clock.timeout(2.5).callbacks.append(lambda ev: print(clock.now))
    >>> clock.run()
    2.5
    """

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

    def run(self, until=None):
        """Process events until none is left (or, with ``until``, as SimPy does)."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        while queue:
            self._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None
