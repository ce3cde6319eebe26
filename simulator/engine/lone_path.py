"""The lone path: a batch alone on its links, off the flow network's heap, on a timer.

Most collectives inside a node (tensor-parallel all-reduces) never meet another group on
their links. Such a batch, when it is its whole batch and its classes all take equally long
(no class ends first, leaving the others more bandwidth), runs *lone*: its rates are the
ones remembered for its key alone, its end a single timer at its finish plus its tail, with
none of the heap, wake and completion work of a shared group. Should a group that shares its
links arrive before that, the network takes it back among the rest (advanced, rated anew, on
the heap: its timer is superseded), or, when its bytes are already through, lets the timer
end it (:meth:`LonePath.drop_through`).

Every result is the one the general path gives, to rounding (the timer adds the same terms
in another order): tests/engine/test_network.py compares the two on random batches, and
tests/properties/test_engine_properties.py the whole engine against its reference mode.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import truediv

from simulator.engine.flow_groups import Batch, FlowGroup
from simulator.engine.links import FlowClass

_EPS = 1e-12


@dataclass(slots=True, eq=False)
class SizedBatch:
    """A batch's description, kept per (classes list, scale) when every class moves bytes:
    its ``classes``, their rate ``key``, bytes per class (``sizes``, shared by the batch's
    groups: none changes it in place), the longest ``tail`` (s), and, once rated alone,
    ``timing``: (s its bytes take alone, whether every class is through together)."""

    classes: list[FlowClass]
    key: int
    sizes: list[float]
    tail: float
    timing: tuple[float, bool] | None = None


class LonePath:
    """The lone groups of one :class:`~simulator.engine.network.FlowNetwork` (module doc).
    Its methods take the network (``net``, the FlowNetwork that owns this path) as an argument
    rather than holding it: a run leaves no reference cycle for the collector
    (tests/engine/test_no_cycles.py), and the modules no import cycle."""

    def __init__(self):
        self.seen = False  # some group ran lone: the network's re-rating looks for them
        # key -> a group that ended lone, untouched, kept for the key's next lone run
        # (submit_later), which gives it its batch's sizes and tails
        self.spare: dict[int, FlowGroup] = {}

    def rate_alone(self, net, g: FlowGroup, now: float, sized: SizedBatch | None) -> None:
        """The network's re-rating of a component that is ``g`` alone, just submitted (every
        class in flight, none advanced): its rates remembered per key, and the time its bytes
        take per batch and scale (``sized``, from ``submit``). Run lone (module doc) when it
        is its whole batch and every class ends together; else on the heap."""
        rate = net.rating.rates_alone(g)
        if g.key <= 0:
            sized = None
        timing = sized.timing if sized is not None else None
        if timing is None:
            if min(rate) > 0:
                times = list(map(truediv, g.rem, rate))
                timing = (min(times), max(times) == min(times))
            else:
                timing = (math.inf, False)
            if sized is not None:
                sized.timing = timing  # the same rates and sizes each time
        left, together = timing
        g.rate = rate
        g.finish = now + left
        if not math.isfinite(g.finish):
            k = min(g.live(), key=lambda k: g.rate[k])
            raise overflow(g.rem[k], g.rate[k], now)
        if together and sized is not None:  # every class through at once: nothing to re-rate
            if not math.isfinite(g.finish + g.tail):
                raise latency_overflow(g.finish + g.tail)
            self.go(net, g, 0.0, left)
            return
        g.version += 1
        heapq.heappush(net._heap, (g.finish, g.seq, g.version, g))
        net._schedule(now)

    def submit_later(
        self,
        net,
        delay: float,
        classes: list[FlowClass],
        on_done: Callable[[], None],
        scale: float,
    ) -> None:
        """The network's ``submit`` ``delay`` s from now (a collective's base latency first).

        A batch that ran lone before (:meth:`rate_alone`: it is its whole batch, its classes
        end together) and whose links nothing else is on or has been since is made lone now,
        starting ``delay`` s ahead, its end on one timer: one event where a plain delayed
        submit takes two. Should a group that shares its links arrive before it starts,
        :meth:`drop_through` withdraws it and submits it at its start after all, as the
        plain delayed submit would have."""
        sized = net._sized.get((id(classes), scale))
        timing = sized.timing if sized is not None and sized.classes is classes else None
        key = sized.key if timing is not None else 0
        if (
            timing is None
            or not timing[1]
            or key <= 0
            or key in net._groups_of
            or key not in net.sharing.bit
            or not net.sharing.alone(key)
            or not net.fast
        ):
            net.call_in(delay, net.submit, classes, on_done, scale)
            return
        start = net.env.now + delay
        left = timing[0]
        net._seq += 1
        g = self.spare.pop(key, None)
        if g is None:
            g = FlowGroup(
                Batch(on_done, len(classes), start),
                classes, sized.sizes, net._seq, key, start, sized.tail,
            )  # fmt: skip
        else:  # the key's last lone group
            g.restart(on_done, classes, sized.sizes, net._seq, start, sized.tail)
        net.sharing.fly(g)
        g.rate = net.rating.alone[key]
        net.stats.cache_hits += 1
        g.finish = start + left
        g.later = (classes, on_done, scale)
        self.go(net, g, delay, left)

    def go(self, net, g: FlowGroup, delay: float, left: float) -> None:
        """Run ``g`` lone: its batch ends on a timer ``delay + left`` s (its start, its bytes)
        plus its tail from now, unless it is taken back first (``version``)."""
        g.version += 1
        g.lone = self.seen = True
        net.call_in(delay + left + g.tail, self.end, net, g, g.version)

    def end(self, net, g: FlowGroup, version: int) -> None:
        """A lone group's bytes and tail are through (unless it was taken back since,
        ``version``): end its batch."""
        if g.version != version:
            return  # rated among others since: it ends through the heap
        if g.active:
            net._retire(g)
        batch = g.batch
        batch.pending = 0
        g.n_alive = 0
        on_done, batch.on_done = batch.on_done, None
        if g.lone and net.sharing.alone(g.key):
            # never taken back (alive, rates as made), on links no other key crosses: for the
            # key's next lone run (submit_later, which reuses no other)
            g.later = None
            self.spare[g.key] = g
        on_done()

    def drop_through(self, net, groups: list[FlowGroup], now: float) -> list[FlowGroup]:
        """``groups`` less the lone ones whose bytes are through at ``now`` (their timers end
        them) or that have not started (:meth:`submit_later`: submitted at their start
        instead); the lone ones still moving bytes are lone no longer."""
        limit = now * (1 + _EPS)
        kept = []
        for g in groups:
            if g.lone:
                g.lone = False
                if g.later is not None and g.t > now:  # not started yet: start it as planned
                    net._retire(g)
                    g.version += 1  # its timer is void
                    classes, on_done, scale = g.later
                    net.call_in(g.t - now, net.submit, classes, on_done, scale)
                    continue
                g.later = None
                if g.finish <= limit:
                    net._retire(g)
                    continue
                g.finish = math.inf  # off the heap: the re-rating must rate it and push it
            kept.append(g)
        return kept


def overflow(rem: float, rate: float, now: float) -> ValueError:
    return ValueError(
        f"simulated time overflows: a flow of {rem:.3g} B at {rate:.3g} B/s does not finish in "
        f"finite time (at t = {now:.6g} s); check the topology's link bandwidths and efficiencies"
    )


def latency_overflow(end: float) -> ValueError:
    return ValueError(
        f"simulated time overflows: a transfer's latency ends at t = {end!r} s; "
        "check the topology's link latencies"
    )
