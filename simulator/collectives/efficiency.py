"""Protocol efficiency: the payload fraction an algorithm's protocol gets from its links.

Link-level payload efficiency (NVLink packets, InfiniBand headers) is a property of the link
and lives on topology edges. What remains here is the algorithm's own loss, from NCCL's cost
model (src/graph/tuning.cc, NCCL 2.19-2.23):

- ring, Simple protocol: no further loss (1.0);
- tree, Simple protocol: bus bandwidth x 0.92 (tuning.cc: ``busBw *= .92`` for trees);
- NVLS (NVLink SHARP): ``nvlsEfficiency`` 0.85 on Hopper (NCCL gives Blackwell 0.74; the
  simulator applies Hopper's, as collectives do not know the accelerator generation);
- direct and halving-doubling: point-to-point puts, taken as 1.0 (no NCCL figure).

The protocol's share (LL, LL128 against Simple) multiplies these per collective:
:func:`simulator.collectives.nccl_tuning.protocol_factor`.
"""

from __future__ import annotations

ALGORITHM_EFFICIENCY = {
    "ring": 1.0,
    "tree": 0.92,
    "direct": 1.0,
    "halving_doubling": 1.0,
    "hierarchical": 1.0,
    "torus": 1.0,
    "nvls": 0.85,
}
