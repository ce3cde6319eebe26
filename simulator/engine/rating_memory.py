"""Water-fillings' rates kept across the runs on one link table (:class:`RatingMemory`)."""

from __future__ import annotations

import itertools

from simulator.engine.kept import KeptWithin
from simulator.engine.links import LinkTable

# Classes' patterns and water-fillings' rated classes a RatingMemory keeps (an entry counts
# its classes, and its groups): a few MB at most (a rate is a float; a pattern a small tuple).
RATED_CLASSES = 500_000
# Bytes of the links each key's classes cross (a link-sharing graph's nodes) a RatingMemory
# keeps: the 96 keys of a 16K-GPU Llama 3 step hold about 20 MB.
CROSSED_BYTES = 64 << 20


class RatingMemory:
    """Water-fillings' rates kept for the runs after on one link table (a
    :class:`~simulator.engine.simulate.NetworkModel`'s): the later runs of a layout (a sweep's
    points, failure trials) rate the components they meet again without water-filling them.

    A water-filling's rates are a function of its classes' links, counts, ratings and
    symmetric forms, of the links' capacities, and, in the last bit, of the order of its
    groups (weights are added and used bandwidth taken away class by class). A class's
    pattern names it for good (a routed shape's classes are made once and kept:
    :mod:`simulator.engine.collective`), so ``rates`` maps the groups of a filling *in order*
    (key, which classes in flight) to each one's rates and whether the filling was
    symmetric: what a fresh run filling those groups in that order finds. (A run's own cache
    is keyed by the set: a run meets a set in its first order first, whatever ran before.)
    ``keys`` gives batches of patterns the same key in every run (a run keeps the ones it met in
    hand, so one dropped from here mid-run keeps its key in that run); ``crossed`` maps a key to
    the links its classes cross (ascending), what the link-sharing graph is built from. Entries
    found are made the newest (:meth:`~simulator.engine.kept.KeptWithin.get`), so the budgets
    drop what is not used. A run counts a filling it finds here as done
    (``NetworkStats.rerates``, ``symmetric_fillings``), as a fresh run would: its counters do
    not depend on the runs before."""

    def __init__(
        self, links: LinkTable, budget: int = RATED_CLASSES, crossed_bytes: int = CROSSED_BYTES
    ):
        self.links = links
        self.counter = itertools.count(1)
        self.keys: dict = KeptWithin(budget, lambda patterns, key: len(patterns))
        self.rates: dict = KeptWithin(budget, _rated_classes)
        self.crossed: dict = KeptWithin(crossed_bytes, lambda key, links: links.nbytes)


def _rated_classes(items: tuple, found: tuple) -> int:
    """The size of a :class:`RatingMemory` ``rates`` entry: its groups and their classes."""
    return len(items) + sum(len(rates) for rates in found[0].values())
