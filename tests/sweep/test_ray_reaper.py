"""The watchdog beside a local Ray: a driver killed with SIGKILL leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.sweep import ray_reaper

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

# A stand-in for a sweep with its local Ray: it starts the watchdog, then a child that starts
# a grandchild (as raylet starts Ray's agents), prints their ids and waits to be killed.
DRIVER = """
import subprocess, sys, time
from simulator.sweep import ray_reaper
reaper = ray_reaper.start()
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; "
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print(g.pid, flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
grandchild = int(child.stdout.readline())
print(child.pid, grandchild, reaper.process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    stat = ray_reaper._stat(pid)
    return stat is not None and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def _wait_gone(pids, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_a_driver_killed_leaves_no_descendant():
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    child, grandchild, watchdog = map(int, driver.stdout.readline().split())
    time.sleep(3 * ray_reaper.POLL_S)  # the watchdog has listed them
    assert _alive(child) and _alive(grandchild) and _alive(watchdog)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # without the watchdog both would sleep for ten minutes, reparented to PID 1
    assert _wait_gone([child, grandchild, watchdog], 10 * ray_reaper.POLL_S + 5) == []


def test_a_stopped_watchdog_kills_nothing():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reaper = ray_reaper.start()
        assert reaper is not None
        time.sleep(3 * ray_reaper.POLL_S)
        reaper.stop()  # the driver shut Ray down itself
        assert reaper.process.returncode is not None
        time.sleep(2 * ray_reaper.POLL_S)
        assert _alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
