"""Process pools of sweeps, plan searches and validation: how many CPUs a process may
use, and how a worker starts."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total): the size of
    the process pools that sweeps and ``trainsim validate`` simulate on.

    >>> 1 <= usable_cores() <= (__import__("os").cpu_count() or 1)
    True
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def quiet_pool_worker() -> None:
    """Initialise a process-pool worker: no progress bars of its own (on one terminal they
    would mix with the parent's; its log lines still reach stderr), and it dies with its
    parent (a sweep killed with SIGKILL leaves no workers waiting on their queue)."""
    os.environ["TQDM_DISABLE"] = "1"
    die_with_parent()


def die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``); where that is not available, nothing. A parent already gone by
    now (this process adopted by init) ends it at once."""
    parent = os.getppid()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):  # not Linux
        return
    if parent == 1 or os.getppid() != parent:
        os._exit(1)
