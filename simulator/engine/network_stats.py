"""The flow network's counters (:class:`NetworkStats`), read by benchmarks, tests and the run's
summary."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class NetworkStats:
    """Counters for benchmarks and tests."""

    rerates: int = 0
    cache_hits: int = 0
    symmetric_fillings: int = 0  # water-fillings over one link per orbit (engine/orbits.py)
    link_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # (time s, [(flow class, rate B/s), ...]) from each re-rating on, while links are tracked
    link_samples: list = field(default_factory=list)
