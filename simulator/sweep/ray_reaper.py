"""A watchdog that ends a local Ray's processes when the process that started them dies.

Killed with SIGKILL, a sweep or plan search gets no chance to call ``ray.shutdown()``: its
``gcs_server`` and ``raylet`` end with it, but Ray's agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) stay, reparented to PID 1, holding memory and ports. Linux can
signal a child when its parent dies (``PR_SET_PDEATHSIG``, as the local backend's workers
use), but Ray starts those processes itself. So the driver starts this small process beside
its local Ray (:func:`start`): it notes the driver's descendants every ``POLL_S`` seconds
(process id and start time, so that a reused id is never taken for one of them), and when
the driver is gone it kills the ones still running. A driver that shuts Ray down itself
stops the watchdog first (:meth:`Reaper.stop`).

Run as a script (``python ray_reaper.py DRIVER_PID``): it imports nothing of the simulator,
so it starts in a few tens of milliseconds. Linux only (it reads ``/proc``); elsewhere
:func:`start` does nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5  # how often the driver's descendants are listed and its life checked (s)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent id, start time in clock ticks) of ``pid`` from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold ")"
    return int(fields[1]), int(fields[19])


def _descendants(root: int, skip: int) -> dict[int, int]:
    """Every process below ``root`` (not ``skip``, this watchdog): id -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(entry))
            starts[int(entry)] = stat[1]
    out: dict[int, int] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child != skip and child not in out:
                out[child] = starts[child]
                todo.append(child)
    return out


def watch(driver: int) -> None:
    """Note ``driver``'s descendants until it dies, then kill those still running."""
    me = os.getpid()
    known: dict[int, int] = {}
    while _stat(driver) is not None and os.getppid() == driver:
        found = _descendants(driver, me)
        if os.getppid() != driver:  # it died during the scan: its id may name another now
            break
        known.update(found)
        time.sleep(POLL_S)
    for pid, start in known.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start:  # the same process, not a reused id
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Reaper:
    """The running watchdog of this process's local Ray."""

    def __init__(self, process: subprocess.Popen):
        self.process = process

    def stop(self) -> None:
        """End the watchdog (Ray was shut down in order: nothing to kill)."""
        self.process.terminate()
        self.process.wait()


def start() -> Reaper | None:
    """Start the watchdog of this process (see the module doc); None where /proc is not."""
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        return None
    process = subprocess.Popen(
        [sys.executable, "-S", str(Path(__file__).resolve()), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C for the driver is not one for the watchdog
    )
    return Reaper(process)


if __name__ == "__main__":
    watch(int(sys.argv[1]))
