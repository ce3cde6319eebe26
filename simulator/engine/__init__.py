"""SimPy engine: a flow-level network with max-min fair sharing, collectives as phases of
flows, and an executor for TaskGraphs. Knows nothing of transformers or topology builders:
it takes a graph and a router from the caller.
"""

from simulator.collector import paused_gc
from simulator.engine.simulate import (
    EngineRun,
    NetworkModel,
    run_engine,
    run_taskgraph,
    run_taskgraph_with_memory,
    time_collective,
)

__all__ = [
    "EngineRun",
    "NetworkModel",
    "paused_gc",
    "run_engine",
    "run_taskgraph",
    "run_taskgraph_with_memory",
    "time_collective",
]
