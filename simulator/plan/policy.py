"""The step's policy: what the step builder does beyond the layout, read off the scenario once.

The schedule package builds a step from a :class:`~simulator.plan.plan.Plan` alone and never
imports the scenario package (an import-linter contract): the layout is in the Plan's grid,
stages and shapes, and every other setting the builder obeys (which ZeRO stage, how far FSDP
prefetches, what is recomputed, which optimizer kernel, which framework habits) is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.scenario.schema import OPTIMIZER_MOMENTS, Scenario


@dataclass(frozen=True)
class StepPolicy:
    """Settings the builder obeys, each named as in the scenario.

    ``zero``: ZeRO stage (0-3); ``fsdp_prefetch``: units gathered ahead under ZeRO-3;
    ``fsdp_backward_prefetch``: when the backward's gathers are issued ("pre", "post",
    "none"); ``recompute``: "none", "selective" or "full"; ``optimizer``: the update rule
    ("adam", "sgd", "sgd_momentum") and ``optimizer_moments`` its fp32 moments per
    parameter; ``optimizer_kernel``: the framework's Adam kernel ("fused", "foreach", or
    "plain" for the SGD rules); ``grad_clip``: a gradient-norm pass before the update;
    ``overlap_grad_reduce``, ``tp_async_allreduce``, ``grad_accumulation``: the framework's
    habits (:class:`simulator.scenario.framework.FrameworkConfig`); ``kernel_tasks``: compute
    blocks split into their kernels; ``launch_s``: CPU seconds to issue one collective (or a
    GPU task given no count of its own; 0: no host stream is modelled); ``host``: whether
    each rank's host stream is modelled (any CPU cost per launch or per graph);
    ``launch_queue``: kernels the host may issue ahead of the GPU; ``kernel_forward_s``,
    ``kernel_backward_s``: CPU seconds per kernel in forward and backward (the op's and its
    launch); ``cuda_graphs``: blocks replayed as CUDA graphs."""

    zero: int
    fsdp_prefetch: int
    fsdp_backward_prefetch: str
    recompute: str
    optimizer: str
    optimizer_moments: int
    optimizer_kernel: str
    grad_clip: bool
    overlap_grad_reduce: bool
    tp_async_allreduce: bool
    grad_accumulation: str
    kernel_tasks: bool
    launch_s: float = 0.0
    host: bool = False
    launch_queue: int = 1024
    kernel_forward_s: float = 0.0
    kernel_backward_s: float = 0.0
    cuda_graphs: bool = False
    moe_dispatcher: str = "alltoall"  # "deepep": simulator.collectives.deepep


def policy_of(s: Scenario) -> StepPolicy:
    """The :class:`StepPolicy` of scenario ``s``."""
    par, tr, fw = s.parallelism, s.training, s.framework
    return StepPolicy(
        zero=par.zero,
        fsdp_prefetch=par.fsdp_prefetch,
        fsdp_backward_prefetch=par.fsdp_backward_prefetch,
        recompute=par.recompute,
        optimizer=tr.optimizer,
        optimizer_moments=OPTIMIZER_MOMENTS[tr.optimizer],
        optimizer_kernel=fw.optimizer if tr.optimizer == "adam" else "plain",
        grad_clip=tr.grad_clip,
        overlap_grad_reduce=fw.overlap_grad_reduce,
        tp_async_allreduce=fw.tp_async_allreduce,
        grad_accumulation=fw.grad_accumulation,
        kernel_tasks=s.simulation.kernel_tasks,
        # a graphed step's collectives are replayed in its graphs: no launch of their own
        launch_s=0.0 if fw.cuda_graphs else fw.cpu_launch_s,
        host=(
            fw.cpu_launch_s + fw.cpu_op_forward_s + fw.cpu_op_backward_s > 0
            or (fw.cuda_graphs and fw.graph_launch_s > 0)
        ),
        launch_queue=fw.launch_queue,
        kernel_forward_s=fw.cpu_launch_s + fw.cpu_op_forward_s,
        kernel_backward_s=fw.cpu_launch_s + fw.cpu_op_backward_s,
        cuda_graphs=fw.cuda_graphs,
        moe_dispatcher=par.moe_dispatcher,
    )
