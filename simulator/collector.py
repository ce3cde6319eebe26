"""Pausing Python's cyclic garbage collector around work that builds many long-lived objects.

Every layer builds such objects (a 16K-GPU topology graph: 1M dicts and tuples; a step's
task graph: millions of tasks), so this sits below them all.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (re-enabled after, if it was on).

    A run allocates hundreds of thousands of long-lived objects (tasks, dependency lists,
    trace records) and nothing cyclic that must be reclaimed before it ends, so the
    collector's repeated passes over them are pure overhead: about 1.7 s of a 6 s GPT-3 175B
    simulation (benchmarks/RESULTS.md); building the Llama 3 cluster's topology, 0.3-0.5 s
    of 0.9-1.2 s. Reference counting still frees everything acyclic.

    On the way out every object the collector tracks (those made in the block, and the
    caller's younger ones with them) is moved to the oldest generation without being
    traversed (``gc.freeze`` then ``gc.unfreeze``): re-enabled as is, the collector's first
    pass would walk all of them at once (1.5 s after a GPT-3 175B step). They are still
    collected, by the next full collection, as any long-lived object is.
    """
    enabled = gc.isenabled()
    frozen_before = gc.get_freeze_count()  # a caller's own frozen objects stay frozen
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if frozen_before == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
