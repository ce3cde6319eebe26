"""Step-to-step and GPU-to-GPU variability: the scenario's ``variability:`` section.

Read only by ``trainsim run --steps N`` (and :func:`simulator.api.run` with ``samples``): a
single step is simulated without variability. Each value is the standard deviation of the
natural log of a duration factor whose median is 1 (the calibrated kernel time is a median):

- ``gpu_spread`` 0.013: each GPU's persistent speed, drawn once per GPU and seed. Sinha et
  al., "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale,
  Accelerator-Rich Systems" (SC'22, arXiv:2208.11035) measure "8% (max 22%) average
  performance variation" across the GPUs of one SKU in a cluster (over 90% of the GPUs of
  five clusters); read as the range of a few hundred normal draws (about 6 sigma), 0.08 / 6.
  Their outliers (up to 1.5x the median GPU) are stragglers: ``failures.stragglers``.
- ``kernel_jitter`` 0.0065: each compute task's run-to-run spread, drawn per task, GPU and
  step. The package's H200 GEMM microbenchmarks (``simulator/data/calibration/h200``, median
  and fastest of 10 runs): for the 25 GEMMs over 1 ms, the median of ln(median / fastest) is
  0.0100, and the median of 10 normal draws lies 1.54 sigma above their minimum on average.
- ``comm_jitter`` 0: a collective's run-to-run spread. No published coefficient of variation
  of NCCL collectives at training sizes was found; set it to study one.

Within a replica a GPU waits at every tensor-parallel collective for its peers, so its
compute tasks take the slowest of their draws; replicas meet at the gradient reduction
(:mod:`simulator.engine.retime`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from simulator.scenario.fields import Frozen, Real

GPU_SPREAD = 0.013
KERNEL_JITTER = 0.0065
COMM_JITTER = 0.0


class VariabilityConfig(Frozen):
    """Log-normal spreads (sigma of the log) of GPU speed, kernel and collective times."""

    gpu_spread: Annotated[Real, Field(ge=0, le=1)] = GPU_SPREAD
    """Sigma of the log of a GPU's persistent speed factor across the fleet."""
    kernel_jitter: Annotated[Real, Field(ge=0, le=1)] = KERNEL_JITTER
    """Sigma of the log of a compute task's duration, drawn per task, GPU and step."""
    comm_jitter: Annotated[Real, Field(ge=0, le=1)] = COMM_JITTER
    """Sigma of the log of a collective's duration, drawn per collective and step."""

    @property
    def none(self) -> bool:
        return self.gpu_spread == 0 and self.kernel_jitter == 0 and self.comm_jitter == 0
