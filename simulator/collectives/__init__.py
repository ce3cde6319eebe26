"""Collective algorithms: each turns (kind, group, S bytes) into phases of point-to-point flows.

Pure functions of the group's devices and their locality; no network, no simulation. The
engine routes the flows on the topology and decides how long they take.
"""

from simulator.collectives.algorithms import ALGORITHMS, Locality, plan_collective
from simulator.collectives.busbw import BUSBW_FACTORS, bus_bandwidth
from simulator.collectives.nccl_tuning import PROTOCOLS, choose_protocol, nccl_time
from simulator.collectives.plan import CollectivePlan, Phase, Transfer

__all__ = [
    "ALGORITHMS",
    "BUSBW_FACTORS",
    "CollectivePlan",
    "Locality",
    "PROTOCOLS",
    "Phase",
    "Transfer",
    "bus_bandwidth",
    "choose_protocol",
    "nccl_time",
    "plan_collective",
]
