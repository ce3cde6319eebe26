"""Where points run: in this process, on a local process pool, or on a Ray cluster.

Every backend takes a list of :class:`~simulator.sweep.worker.Task` and yields result rows
as they finish (in any order); the caller keys them by scenario hash.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path

from simulator.sweep import adapter, ray_reaper
from simulator.sweep.worker import Task, simulate_task

log = logging.getLogger("trainsim.sweep")


def cpu_count() -> int:
    """Cores this process may use (the affinity mask, not the machine's total)."""
    return adapter.usable_cores()


def local_workers(requested: int | None, tasks: int) -> int:
    """Pool size: the request capped at the core count (more CPU-bound workers than cores only
    adds switching; tqdm's process_map defaults to more) and at the number of tasks."""
    cores = cpu_count()
    n = cores if requested is None else min(requested, cores)
    return max(1, min(n, tasks))


def run_local(tasks: list[Task], workers: int | None = None) -> Iterator[dict]:
    """Simulate ``tasks`` on a process pool of :func:`local_workers` processes; with one worker,
    in this process (no pickling, and monkeypatching works in tests)."""
    n = local_workers(workers, len(tasks))
    if n == 1:
        for task in tasks:
            yield simulate_task(task)
        return
    # fork: workers inherit the imported simulator instead of importing it again per process
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    quiet = adapter.quiet_pool_worker
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=quiet) as pool:
        # as_completed waits on every future once (wait() in a loop re-registers each
        # pending one per result: quadratic in the points, and the parent shares the cores)
        for future in as_completed([pool.submit(simulate_task, t) for t in tasks]):
            yield future.result()


def _ray_init(address: str | None, workers: int | None):
    """Start (or join) Ray as the backend wants it; the ray module. ``address`` None starts a
    local Ray with ``workers`` CPUs (default: the core count); ``"auto"`` or ``host:port``
    joins a running cluster. The simulator package is shipped to the workers (runtime_env
    py_modules), so they run this code, not whatever version the cluster has installed."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "the Ray backend needs ray: pip install 'trainsim[ray]' (or pip install ray)"
        ) from None
    import simulator

    if address not in (None, "auto"):
        _reachable(address)
    package = str(Path(simulator.__file__).resolve().parent)
    kwargs: dict = {
        "runtime_env": {"py_modules": [package]},
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if address is None:
        kwargs["num_cpus"] = workers or cpu_count()
        log.info(
            "starting a local Ray with %d CPUs for --backend ray (its start-up takes 10-60 s; "
            "--address joins a running cluster, --backend local needs no start-up)",
            kwargs["num_cpus"],
        )
    else:
        log.info("joining the Ray cluster at %s for --backend ray", address)
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError) as exc:  # no cluster there, or no address at all
        raise BackendError(f"--address {address}: {str(exc).splitlines()[0]}") from None
    if address is None:  # ours: its processes end with this one, however it ends
        global _reaper
        try:
            _reaper = ray_reaper.start()
        except OSError as exc:  # no watchdog: Ray still ends with ray.shutdown()
            log.warning("could not start the watchdog of the local Ray (%s)", exc)
    return ray


_reaper: ray_reaper.Reaper | None = None  # the watchdog of the local Ray started here


def _shutdown(ray) -> None:
    """Shut down the Ray started here, then its watchdog (nothing left for it to kill)."""
    global _reaper
    ray.shutdown()
    if _reaper is not None:
        _reaper.stop()
        _reaper = None


class BackendError(RuntimeError):
    """A backend that cannot start: a Ray address that names nothing to join."""


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """BackendError unless something accepts a TCP connection at ``host:port`` within
    ``timeout_s`` (Ray would wait for minutes)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BackendError(f"--address {address}: not host:port (or 'auto')")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BackendError(f"--address {address}: nothing answers there ({exc})") from None


@contextmanager
def ray_session(address: str | None = None, workers: int | None = None) -> Iterator[None]:
    """Keep one Ray up for several backend calls (a plan search's rounds): started here and
    shut down at the end, unless Ray was already running."""
    try:
        import ray
    except ImportError:
        ray = None
    if ray is not None and ray.is_initialized():
        yield
        return
    ray = _ray_init(address, workers)
    try:
        yield
    finally:
        _shutdown(ray)


def run_ray(
    tasks: list[Task], address: str | None = None, workers: int | None = None
) -> Iterator[dict]:
    """Simulate ``tasks`` as Ray tasks (one CPU each), on the running Ray or one started
    for them (:func:`_ray_init`) and shut down after."""
    try:
        import ray
    except ImportError:
        ray = None
    started = False
    if ray is None or not ray.is_initialized():
        ray = _ray_init(address, workers)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(simulate_task)
        pending = [remote.remote(t) for t in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        if started:
            _shutdown(ray)
