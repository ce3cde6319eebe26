"""How long an op takes on an accelerator: a roofline with calibrated efficiencies.

    t = max(FLOPs / (peak x e_gemm(shape) x sustained), bytes / (HBM B/s x e_mem(op)))
        + launch overhead

``e_gemm`` and ``e_mem`` come from :mod:`simulator.model.calibration` (fitted once to the H200
microbenchmarks); other GPUs keep the same efficiencies against their own peaks, GEMMs scaled
by the device's measured ``matmul_efficiency`` (Blackwell: 0.965). The attention
core runs as a fused kernel (flash attention) whose efficiency is that of a GEMM of its inner
shape (rows ``b x heads x s_q``, columns ``s_k``, depth ``d``), its backward's that times the
kernel's published backward/forward ratio (``Op.b_efficiency``). Elementwise ops are
memory-bound, at an HBM efficiency between a copy's and GeLU's by their FLOPs per byte
(:meth:`MemFit.efficiency`). ``launch_s`` (2 us) is the CPU cost of enqueueing a kernel when
the GPU queue runs ahead: an assumption, not a measurement (isolated-kernel timings include
~37 us of launch-and-event latency that training hides).

Those efficiencies are burst rates: a handful of back-to-back kernels at the boost clock. A
training step keeps the tensor cores busy for seconds, the card at its power limit and its
clock below boost, so compute-bound kernels run at ``sustained`` (the accelerator's
``sustained_compute``: 0.888 for the H100 and H200 of the catalog, measured on H200) times the
burst rate; memory-bound kernels, bound by HBM, are not slowed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simulator.hardware import Accelerator
from simulator.model.calibration import GemmFit, MemFit, device_fits
from simulator.model.ops import Op, log2_interp

if TYPE_CHECKING:
    from simulator.scenario.schema import Scenario

LAUNCH_S = 2e-6

# FlashAttention-2 is written for Ampere (mma.sync) and leaves Hopper's tensor cores
# (wgmma) idle: on H100 its causal forward reaches 180-335 TFLOP/s against FA3's and cuDNN's
# 200-640 (FA3 paper, Shah et al. 2024, arXiv:2407.08608, Fig. 5, FA2 bars, causal, 16K tokens
# per batch), while the GEMM-like efficiency this model gives other fused attention matches
# FA3/cuDNN. PyTorch's scaled_dot_product_attention dispatches to it first on Hopper ("picks
# its backend by a fixed priority that puts FlashAttention first. On Hopper the cuDNN
# attention kernels are consistently 1.7-2.3x faster for training shapes",
# huggingface/transformers#48163; torchtitan#1042: SDPA "dispatches
# SDPBackend.FLASH_ATTENTION" on H100). TFLOP/s by head dim (64, 128, 256) and sequence length
# (512 .. 16K), causal, as the paper counts FLOPs (the causal half, as this model does).
FA2_HOPPER_CAUSAL_TFLOPS = {
    64: ((512, 180), (1024, 229), (2048, 262), (4096, 284), (8192, 295), (16384, 299)),
    128: ((512, 191), (1024, 260), (2048, 298), (4096, 319), (8192, 333), (16384, 335)),
    256: ((512, 208), (1024, 251), (2048, 278), (4096, 293), (8192, 297), (16384, 298)),
}
FA2_HOPPER_PEAK = 989.4e12  # the H100's dense bf16 peak the figures are measured against


def fa2_hopper_efficiency(seq_len: float, head_dim: float) -> float:
    """FlashAttention-2's forward FLOP rate on a Hopper GPU as a fraction of its peak:
    :data:`FA2_HOPPER_CAUSAL_TFLOPS` at ``seq_len`` keys, between the published head dims
    linear in log2 of the head dim, over the H100's peak (a Hopper GPU of another peak - same
    die, other clocks - keeps the fraction)."""
    dims = sorted(FA2_HOPPER_CAUSAL_TFLOPS)
    by_dim = [(d, log2_interp(seq_len, FA2_HOPPER_CAUSAL_TFLOPS[d])) for d in dims]
    return log2_interp(head_dim, by_dim) * 1e12 / FA2_HOPPER_PEAK


def gemm_shape(op: Op, phase: str) -> tuple[float, float, float]:
    """(m, n, k) of the GEMM ``op`` runs in ``phase``: forward ``Y = X W`` is (m, n, k); the
    input gradient ``dX = dY W^T`` is (m, k, n); the weight gradient ``dW = X^T dY`` is
    (k, n, m), reducing over the m tokens. The fused attention kernel keeps its inner shape."""
    m, n, k = op.gemm_mnk
    if op.kind != "gemm" or phase == "f":
        return m, n, k
    return (m, k, n) if phase == "b" else (k, n, m)


def _has_work(op: Op, phase: str) -> bool:
    """Whether ``op`` runs a kernel in ``phase``: FLOPs or bytes there (``op_timing``'s test)."""
    if phase == "f":
        return op.f_flops > 0 or op.f_bytes > 0
    if phase == "b":
        return op.b_flops > 0 or op.b_bytes > 0
    return op.w_flops > 0 or op.w_bytes > 0


@dataclass(frozen=True)
class ComputeModel:
    """Op durations (s) on one accelerator."""

    peak_flops: float
    hbm_Bps: float
    gemm: GemmFit
    mem: MemFit
    launch_s: float = LAUNCH_S
    cpu_launch_s: float = 0.0  # CPU time to issue one kernel (framework.cpu_launch_s)
    cpu_op_forward_s: float = 0.0  # the framework's CPU time per op in forward (s)
    cpu_op_backward_s: float = 0.0  # ... per op in backward (the autograd engine's, s)
    graph_launch_s: float = 0.0  # CPU time to replay one CUDA graph (0: no graphs)
    architecture: str = ""  # the GPU generation (Accelerator.architecture)
    flash_kernel: str = "native"  # framework.flash_kernel: "native" or "fa2"
    sustained: float = 1.0  # compute-bound rate in a long run / in a burst (Accelerator)

    @classmethod
    def for_accelerator(cls, acc: Accelerator, dtype: str = "bf16") -> ComputeModel:
        """The device's own calibration if it names one, else the H200 efficiencies applied
        to this device's peaks, its GEMMs' scaled by its ``matmul_efficiency``."""
        if acc.calibration:
            gemm, mem = device_fits(acc.calibration, acc.peak("bf16"), acc.hbm_bandwidth_Bps)
        else:
            gemm, mem = device_fits("h200")
            gemm = replace(gemm, e_max=gemm.e_max * acc.matmul_efficiency)
        return cls(
            acc.peak(dtype),
            acc.hbm_bandwidth_Bps,
            gemm,
            mem,
            architecture=acc.architecture,
            sustained=acc.sustained_compute,
        )

    @classmethod
    def for_scenario(cls, scenario: Scenario) -> ComputeModel:
        """Kernel durations on the scenario's accelerator (calibrated), with its framework's
        CPU cost per kernel launch and its attention kernel."""
        cm = cls.for_accelerator(scenario.cluster.accelerator, scenario.precision.compute_dtype)
        return cm.with_framework(scenario.framework)

    def with_framework(self, fw) -> ComputeModel:
        """This model with framework ``fw``'s host costs and attention kernel
        (:class:`simulator.scenario.framework.FrameworkConfig`)."""
        graph = fw.graph_launch_s if fw.cuda_graphs else 0.0
        return replace(
            self,
            cpu_launch_s=fw.cpu_launch_s,
            cpu_op_forward_s=fw.cpu_op_forward_s,
            cpu_op_backward_s=fw.cpu_op_backward_s,
            graph_launch_s=graph,
            flash_kernel=fw.flash_kernel,
        )

    def op_seconds(self, op: Op, phase: str) -> float:
        """Seconds of ``op`` in ``phase`` ("f", "b" or "w"); 0 when it has no work there."""
        return self.op_timing(op, phase)[0]

    def op_timing(self, op: Op, phase: str) -> tuple[float, str]:
        """(seconds, bound) of ``op`` in ``phase``: bound "compute" or "memory" (or "" for no
        work), whichever of its FLOPs and its bytes takes longer."""
        flops = {"f": op.f_flops, "b": op.b_flops, "w": op.w_flops}[phase]
        moved = {"f": op.f_bytes, "b": op.b_bytes, "w": op.w_bytes}[phase]
        if not _has_work(op, phase):
            return 0.0, ""
        matmul = op.kind in ("gemm", "attention")
        # a matmul's operands stream as a copy; an elementwise kernel slower as its arithmetic
        # per byte grows
        e_mem = self.mem.e_mem if matmul else self.mem.efficiency(flops / moved if moved else 0.0)
        t_mem = moved / (self.hbm_Bps * e_mem)
        if matmul and op.gemm_mnk is not None:
            m, n, k = gemm_shape(op, phase)
            if op.flash and self.flash_kernel == "fa2" and self.architecture == "hopper":
                e = fa2_hopper_efficiency(n, k)  # n keys, k head dim
            else:
                e = self.gemm.efficiency(m, n, k)
            e *= op.b_efficiency if phase == "b" else 1.0
            t_flops = flops / (self.peak_flops * e * self.sustained)
        else:
            t_flops = 0.0  # elementwise FLOPs hide under their memory traffic
        bound = "compute" if t_flops >= t_mem else "memory"
        return max(t_flops, t_mem) + self.launch_s, bound

    def seconds(self, ops: list[Op], phase: str, scale: float = 1.0) -> float:
        """GPU seconds of ``ops`` run back to back in ``phase``, their work scaled by
        ``scale`` (a share of the attention core, a load imbalance). The CPU's time to issue
        them is :meth:`host_seconds`, a task of its own on the rank's host stream."""
        return scale * sum(self.op_seconds(op, phase) for op in ops)

    def host_seconds(self, ops: list[Op], phase: str) -> float:
        """CPU seconds to issue ``ops``' kernels in ``phase``: for each op with work there (one
        kernel per op) the framework's time per op (``cpu_op_forward_s`` in forward,
        ``cpu_op_backward_s`` in the backward passes) and ``cpu_launch_s``; or one
        ``graph_launch_s`` for them all when the framework replays CUDA graphs (ops and
        launches recorded in the graph)."""
        per_op = self.cpu_launch_s + (
            self.cpu_op_forward_s if phase == "f" else self.cpu_op_backward_s
        )
        if per_op <= 0 and self.graph_launch_s <= 0:
            return 0.0
        kernels = sum(1 for op in ops if _has_work(op, phase))
        if self.graph_launch_s > 0:
            return self.graph_launch_s if kernels else 0.0
        return per_op * kernels
