"""Power and clocks: a GPU that reaches its power limit runs its tensor cores slower.

A GPU's draw is a static part (leakage, HBM refresh, the clocks held up with a context
loaded) and a dynamic part that grows with activity and with the clock: CMOS dynamic power is
``C V^2 f``, and along a DVFS curve the voltage rises with the frequency, so the dynamic part
goes as ``c^3`` for a clock ``c`` relative to the boost clock (the form of AccelWattch, MICRO
2021, and of Guerreiro et al., HPCA 2018). Activity is the tensor cores' share: ``u`` = the
FLOP rate over the device's best GEMM rate at the boost clock (``peak x e_max``), 1 for a large
GEMM, 0 for a memory-bound kernel, whose dynamic draw is the memory-bound one's::

    P(u, c) = P_static + c^3 (P_memory - P_static + u (P_compute - P_memory))

The power controller holds the average draw at the limit over a time constant of seconds (the
clock "settles below boost within seconds": Bekman's ml-engineering, MSMF), about a training
step, so the clock of a step is the one at which its compute's mean activity ``u`` draws the
limit: ``c = min(1, ((limit - P_static) / (P_memory - P_static + u (P_compute - P_memory)))
^ (1/3))``.
Memory-bound kernels take as long at any SM clock (HBM has its own); compute-bound ones take
``1 / c`` as long.

``P_compute``, a large GEMM's draw at the boost clock with no limit, is not published; it
follows from the one measured long GEMM run at the limit (:data:`SUSTAINED_GEMM`): the clock
that run held is ``((limit - static) / (P_compute - static))^(1/3)``. So a long large-GEMM run
gives back that measurement by construction, and the model predicts the rest: a step with
memory-bound kernels throttles less, a power cap of 500 W more.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.hardware import DVFS_EXPONENT as EXPONENT
from simulator.hardware import Accelerator


@dataclass(frozen=True)
class PowerModel:
    """One device's power (W): ``limit_w`` the power limit, ``static_w`` its draw with clocks up
    and nothing running, ``memory_w`` a memory-bound kernel's and ``compute_w`` a large GEMM's
    at the boost clock (without a limit)."""

    limit_w: float
    static_w: float
    memory_w: float
    compute_w: float

    def dynamic_w(self, activity: float) -> float:
        """Dynamic draw (W) at the boost clock of kernels with tensor activity ``activity``."""
        u = min(max(activity, 0.0), 1.0)
        return self.memory_w - self.static_w + u * (self.compute_w - self.memory_w)

    def power_w(self, activity: float, clock: float) -> float:
        """Draw (W) of kernels with tensor activity ``activity`` at relative clock ``clock``."""
        return self.static_w + clock**EXPONENT * self.dynamic_w(activity)

    def clock(self, activity: float) -> float:
        """The relative clock (<= 1) at which kernels of mean activity ``activity`` draw at most
        the limit."""
        dynamic = self.dynamic_w(activity)
        headroom = self.limit_w - self.static_w
        if dynamic <= headroom:
            return 1.0
        if headroom <= 0:
            raise ValueError(
                f"a power limit of {self.limit_w:g} W is not above the device's static draw "
                f"({self.static_w:g} W): nothing can run"
            )
        return (headroom / dynamic) ** (1.0 / EXPONENT)

    def with_limit(self, limit_w: float) -> PowerModel:
        return PowerModel(limit_w, self.static_w, self.memory_w, self.compute_w)


def power_model_of(acc: Accelerator) -> PowerModel | None:
    """``acc``'s power model; None where its figures are unknown (TPUs, a user's device)."""
    figures = (acc.limit, acc.static_power, acc.memory_power, acc.compute_power)
    if any(f is None for f in figures):
        return None
    return PowerModel(*figures)


def step_clock(acc: Accelerator, activity: float) -> float:
    """The relative clock of compute-bound kernels in a step whose compute has mean tensor
    activity ``activity``: the power model's where ``acc`` has one, else the measured
    ``sustained_compute`` of a long GEMM run."""
    model = power_model_of(acc)
    return acc.sustained_compute if model is None else model.clock(activity)
