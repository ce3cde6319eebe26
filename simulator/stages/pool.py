"""Process pools of sweeps, plan searches and validation: how many CPUs a process may
use, and how a worker starts."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total): the size of
    the process pools that sweeps and ``trainsim validate`` simulate on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def quiet_pool_worker() -> None:
    """Initialise a process-pool worker: no progress bars of its own (on one terminal they
    would mix with the parent's); its log lines still reach stderr."""
    os.environ["TQDM_DISABLE"] = "1"
