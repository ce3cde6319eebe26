"""Job-level failures over days: interruptions, checkpoints, restarts, spares, goodput.

The step layer gives the step time and the state bytes (:mod:`simulator.failures.adapter`);
:func:`resolve_job` turns a scenario's ``failures:`` section into a :class:`JobModel` of SI
numbers; :func:`simulate_seeds` runs a SimPy process per seed over the job's wall clock and
returns pandas DataFrames; :mod:`simulator.failures.optimum` holds the closed forms (Young,
Daly, Kokolis et al.) the simulation is checked against.

The names are imported on first use (PEP 562), so that the command line can register
``trainsim goodput`` without loading numpy, SimPy and the step layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.lazy import lazy_exports

_EXPORTS = {
    "JobModel": "model",
    "resolve_job": "model",
    "GoodputResult": "montecarlo",
    "simulate_seeds": "montecarlo",
    "summarise": "montecarlo",
    "sweep_intervals": "montecarlo",
    "daly_interval": "optimum",
    "kokolis_ettr": "optimum",
    "young_interval": "optimum",
}

__all__ = [
    "GoodputResult",
    "JobModel",
    "daly_interval",
    "kokolis_ettr",
    "resolve_job",
    "simulate_seeds",
    "summarise",
    "sweep_intervals",
    "young_interval",
]

if TYPE_CHECKING:  # what static tools (and import-linter) see
    from simulator.failures.model import JobModel, resolve_job
    from simulator.failures.montecarlo import (
        GoodputResult,
        simulate_seeds,
        summarise,
        sweep_intervals,
    )
    from simulator.failures.optimum import daly_interval, kokolis_ettr, young_interval


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
