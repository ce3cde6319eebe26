"""A sweep's pool workers die with it: killed with SIGKILL, it leaves no process waiting on a
queue (they held about 200 MB each)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp
from simulator.stages.pool import quiet_pool_worker

def pid():
    import os
    return os.getpid()

ctx = mp.get_context("fork")
with ProcessPoolExecutor(2, mp_context=ctx, initializer=quiet_pool_worker) as pool:
    pids = {pool.submit(pid).result() for _ in range(8)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_exit_when_the_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in parent.stdout.readline().split()]
    assert workers and all(_alive(p) for p in workers)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers)
