"""What the training framework adds to the ideal kernels: the scenario's ``framework:`` section.

A name picks a preset; any field given beside it overrides the preset's value::

    framework: fsdp-eager
    framework: {name: fsdp-eager, cpu_launch_s: 12 us}

Presets and the sources of their values (collected in the project's research notes; every
number below is the source's, none is fitted to a validation row):

Every preset issues its kernels from a host stream per rank (the CPU's launches in program
order; a kernel starts no sooner than it is issued, and the CPU runs at most ``launch_queue``
launches ahead):

- ``cpu_launch_s`` 5 us per kernel or collective in eager PyTorch (Megatron-LM runs eager
  PyTorch too, with fewer, fused kernels): the low end of "usually, the launch time on the CPU
  side is between 5-20 microseconds" (Meta's HolisticTraceAnalysis documentation,
  cuda_kernel_launch_stats), and the 4-5 us per launch measured back to back on one stream
  (NVIDIA developer forums, "CUDA stream are blocked when launching lots of kernels (>1000)").
  5 us is a lower bound of the launch, one counted per op modelled.
- ``cpu_op_forward_s`` 7 us and ``cpu_op_backward_s`` 1 us: PyTorch's own work per op before
  the launch. A forward op is called from Python with autograd recording: about 7 us per op
  with ``requires_grad=True`` (measured in pytorch/pytorch#41383, where a maintainer gives
  about 2 us without autograd, half of it Python); a backward op is called by the autograd
  engine from C++, "about a microsecond" (the same thread). A module's own Python (Megatron's
  or torchtitan's layer code between the ops) is not counted.
  NVIDIA's "CUDA Graph Best Practice for PyTorch" (docs.nvidia.com/dl-cuda-graph) puts a
  whole framework op at 20-200 us typically: 5 us is the floor of that range's parts.
- ``graph_launch_s`` 10 us per CUDA graph replayed (the same NVIDIA guide: a graph launch
  takes "~10 us (depending on graph size)"; the ``fused`` preset, one graph per block).
- ``launch_queue`` 1024: the same forum thread measures a stream's launches blocking after
  about 1,000 pending kernels (the depth is not documented; it matters only when the GPU runs
  far behind).

``megatron`` (the default) - Megatron-LM with its fused kernels:
    fused SwiGLU saves the fc1 output (2 ffn) and fc2 its input (1 ffn): 3 ffn-sized tensors
    (megatron/core/fusions/fused_bias_swiglu.py, ``SwiGLUFunction``); fused norms save their
    input and rstd; the vocabulary-parallel cross-entropy upcasts the logits to fp32 once and
    works in place: 4 B saved + a 2 B gradient cast = 6 B per logit at the loss
    (megatron/core/tensor_parallel/cross_entropy.py); ``gradient_accumulation_fusion`` adds
    each weight gradient into the fp32 main grad inside the wgrad GEMM (no add kernel;
    tensor_parallel/layers.py); bf16 weights, no autocast casts; contiguous gradient buffers,
    so no allocator reserve is assumed (no public figure for Megatron pretraining).
``fsdp-eager`` - PyTorch FSDP/FSDP2 in eager mode (torchtitan without compile, LLM Foundry): eager
    SwiGLU ``w2(silu(w1 x) * w3 x)`` saves 4 ffn-sized tensors (silu's input, its output, w3's
    output, w2's input; meta-llama/llama and torchtitan ``FeedForward`` with PyTorch's
    derivatives.yaml); the loss ``cross_entropy(logits.float())`` peaks at about 12 B per logit
    in backward (fp32 log-probs saved, the nll and log-softmax gradients in fp32; torchtitan
    components/loss.py, derived); eager ``.grad`` accumulation does ``grad += new`` for every
    micro-batch after the first (3 gradient reads/writes per parameter;
    torch/csrc/autograd/functions/accumulate_grad.h) on the shards FSDP keeps; the
    mixed-precision policy casts shards before the all-gather, not weights per micro-batch;
    attention through ``scaled_dot_product_attention``, whose first choice is FlashAttention-2
    (on Hopper half the speed of cuDNN's or FA3's kernels: huggingface/transformers#48163,
    torchtitan#1042); rotary embedding (``apply_rotary_emb``: a cast to fp32, a complex
    multiply, a cast back, for queries and keys), SwiGLU (silu, then the product) and the loss
    (a cast of the logits to fp32, log-softmax, NLL) run as the separate kernels of that code,
    forward and through autograd (:mod:`simulator.model.ops`), each a launch of its own (where
    eager code launches more - views, tiny reductions - so its host work is a lower bound).
    Norms are taken as fused (torchtitan's ``nn.RMSNorm`` and LLM Foundry's
    low-precision LayerNorm keep no fp32 copy that we could confirm), and no allocator reserve
    is assumed: the one public figure (GMLake, below) is from fine-tuning, and with it the
    published torchtitan and MPT runs would not fit in 80 GB.
``pytorch-eager`` - a plain eager PyTorch script or DDP under ``torch.autocast`` (the
    meta-llama/llama reference model): as ``fsdp-eager``, and eager RMSNorm (meta-llama/llama
    ``RMSNorm``: ``x.float()``, ``pow``, ``mean``, ``rsqrt``, products and casts, 8 kernels
    forward and 12 backward over the hidden state) keeps an fp32 copy of its input, 4 B per
    value more than a fused norm; autocast casts every fp32 weight to bf16 once per micro-batch
    forward (read 4 B + write 2 B) and the bf16 weight gradient back to fp32 (2 + 4 B)
    (aten/src/ATen/autocast_mode.cpp ``cached_cast``; the cache clears when the autocast region
    exits); ``.grad`` accumulates over the full gradient; ``torch.optim.AdamW`` runs its default
    multi-tensor ("foreach") implementation on CUDA, a pass over the state per op
    (torch/optim/adamw.py; torchtitan and Megatron choose the fused kernel); the caching
    allocator's fragmentation (1 - allocated / reserved) is taken as 15%, so reserved =
    allocated / 0.85: GMLake (ASPLOS 2024) removes 15% of fragmentation on average (up to 33%)
    across eight LLMs on A100-80GB against PyTorch's allocator, in fine-tuning with recompute,
    offload and LoRA - the only public figure, and a lower bound of what was there.
``fused`` - a compiled or fully fused stack (torch.compile with CUDA graphs, TE everywhere):
    Megatron's saved tensors and loss, each block replayed as a CUDA graph (one
    ``graph_launch_s`` of CPU whatever its kernels, collectives captured with it).

``runtime_bytes`` (every preset): the CUDA context (about 300 MB with lazy module loading
since CUDA 11.7; ptrblck on pytorch/pytorch#107667) and PyTorch's cuBLAS workspace (32 MiB on
Hopper, ``CublasHandlePool.cpp``): 334 MB. NCCL's own buffers are counted beside it, per
rank, from the communicators its step uses (:mod:`simulator.plan.nccl_memory`; about 12 MiB
per channel of a ring inside a host, 18 MiB across hosts, and up to 384 MiB per send/receive
peer inside a host): ``nccl_buffers`` (on in every preset) and ``nccl_channels`` (24).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from simulator.scenario.fields import Frozen, Real
from simulator.units import Seconds, Unit

CPU_LAUNCH_S = 5e-6  # CPU time to issue one eager kernel (module docstring)
CPU_OP_FORWARD_S = 7e-6  # PyTorch's CPU time per op called from Python, autograd on
CPU_OP_BACKWARD_S = 1e-6  # ... per op the autograd engine calls from C++ (module docstring)
GRAPH_LAUNCH_S = 10e-6  # CPU time of one cudaGraphLaunch (module docstring)
LAUNCH_QUEUE = 1024  # kernels pending on a device before a launch blocks (module docstring)
RUNTIME_BYTES = 300e6 + 32 * 2**20  # CUDA context + cuBLAS workspace (module docstring)
_MEGATRON = {
    "cpu_launch_s": CPU_LAUNCH_S,
    "swiglu_saved": 3,
    "eager_kernels": False,
    "eager_norms": False,
    "loss_bytes_per_logit": 6.0,
    "grad_accumulation": "fused",
    "flash_kernel": "native",
    "tp_async_allreduce": False,
    "overlap_grad_reduce": True,
    "optimizer": "fused",
    "weight_casts": False,
    "allocator_reserve": 0.0,
}
_FSDP_EAGER = {
    **_MEGATRON,
    "swiglu_saved": 4,
    "eager_kernels": True,
    "flash_kernel": "fa2",
    "loss_bytes_per_logit": 12.0,
    "grad_accumulation": "add",
}
FRAMEWORKS: dict[str, dict[str, Any]] = {
    "megatron": _MEGATRON,
    "fsdp-eager": _FSDP_EAGER,
    "pytorch-eager": {
        **_FSDP_EAGER,
        "eager_norms": True,
        "optimizer": "foreach",
        "weight_casts": True,
        "allocator_reserve": 0.15,
    },
    # What sets a compiled stack apart from Megatron's fused kernels in the kernels - fewer,
    # fused elementwise ones - is not modelled; its blocks replay as CUDA graphs.
    "fused": {**_MEGATRON, "cuda_graphs": True},
}


def _resolve_framework(data: Any) -> Any:
    if isinstance(data, str):
        data = {"name": data}
    if isinstance(data, dict):
        name = data.get("name", "megatron")
        if not isinstance(name, str) or name not in FRAMEWORKS:
            raise ValueError(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
        data = {**FRAMEWORKS[name], "runtime_bytes": RUNTIME_BYTES, **data, "name": name}
    return data


class FrameworkConfig(Frozen):
    """The training framework's costs beyond the kernels (see the module docstring).

    - ``cpu_op_forward_s``, ``cpu_op_backward_s``: the framework's CPU time per op before
      its launch, in forward and in the backward passes (s);
    - ``cpu_launch_s``: CPU time of the CUDA launch of one kernel or collective (s): each
      rank's host stream issues the step's
      kernels in program order, and a kernel starts no sooner than it is issued, so a GPU
      that outruns its CPU waits (gaps on the compute stream);
    - ``cuda_graphs``: the step's blocks are replayed as CUDA graphs, ``graph_launch_s`` of
      CPU each whatever their kernels (the collectives captured with them);
    - ``launch_queue``: kernels the CPU may issue ahead of the GPU before a launch blocks
      (CUDA's pending-launch queue);
    - ``swiglu_saved``: ffn-sized tensors a SwiGLU MLP keeps for backward (3 fused, 4 eager);
    - ``eager_kernels``: rotary embedding, SwiGLU and the loss run as eager PyTorch's
      separate kernels (3 per rotated tensor, 2 for SwiGLU, a cast and a log-softmax for the
      loss), each reading and writing HBM, instead of one fused kernel each;
    - ``eager_norms``: RMSNorm runs as eager PyTorch's kernels (8 forward, 12 backward, several
      in fp32) and keeps an fp32 copy of its input (4 B per value) for backward;
    - ``loss_bytes_per_logit``: bytes per logit (token x vocabulary / tp) at the loss's peak,
      the 4 B fp32 probabilities saved for backward included;
    - ``grad_accumulation``: "fused" into the wgrad GEMM, or an "add" kernel per micro-batch
      after the first;
    - ``flash_kernel``: the flash-attention implementation: "native" to the GPU (FA3 or cuDNN
      on Hopper, FlashAttention-2 on Ampere; the GEMM-like efficiency of the compute model),
      or "fa2", FlashAttention-2 everywhere, which on Hopper runs at its published speed there
      (about half of FA3's);
    - ``tp_async_allreduce``: Megatron-LM's ``async_tensor_model_parallel_allreduce``: a
      column-parallel linear all-reduces its input gradient while it computes its weight
      gradient (without sequence parallelism; with it the overlap of the reduce-scatter is
      not modelled);
    - ``overlap_grad_reduce``: data-parallel gradient buckets are reduced while the backward
      pass runs, each as soon as its gradients are complete (PyTorch DDP, DeepSpeed ZeRO-1/2, and
      Megatron-LM with ``--overlap-grad-reduce``, which NVIDIA's recipes and the large runs
      modelled here turn on); false: every bucket waits for the rank's last backward pass, as
      in Megatron-LM's "local" DDP, its default until 2023 (``--DDP-impl local``:
      ``train_step`` calls ``allreduce_gradients()`` after ``forward_backward_func``
      returns; megatron/training.py of 2021-2023) and in Megatron-core without
      ``--overlap-grad-reduce``. For DDP and ZeRO-1; ZeRO-2 reduce-scatters every
      micro-batch's gradients (it keeps only its shard), overlapped as they complete, or
      without overlap once that micro-batch's backward of the chunk has ended, on the
      data-parallel stream beside the next micro-batches' compute; FSDP and ZeRO-3
      reduce-scatter each unit's gradients as its backward ends either way. The buckets are still
      ``parallelism.bucket_size`` (the local DDP reduced one contiguous buffer per model
      chunk; give a bucket as large as the chunk's gradients to model that);
    - ``optimizer``: the Adam step as one "fused" pass over the state, or PyTorch's
      "foreach" multi-tensor kernels, a pass per op (about 80 B per parameter in fp32);
    - ``weight_casts``: autocast casts fp32 weights per micro-batch (only with fp32 weights);
    - ``allocator_reserve``: the caching allocator's fragmentation, 1 - allocated / reserved
      (so reserved = allocated / (1 - reserve));
    - ``runtime_bytes``: per-GPU memory outside the allocator's tensors (B);
    - ``nccl_buffers``: count NCCL's buffers (outside the allocator too), ``nccl_channels``
      per ring (:mod:`simulator.plan.nccl_memory`).
    """

    name: Literal["megatron", "fsdp-eager", "pytorch-eager", "fused"] = "megatron"
    """A preset of the settings below (megatron, fsdp-eager, pytorch-eager, ...); a field given
    overrides it."""
    cpu_launch_s: Annotated[Seconds, Field(ge=0, le=1e-3)] = 0.0
    cpu_op_forward_s: Annotated[Seconds, Field(ge=0, le=1e-3)] = CPU_OP_FORWARD_S
    cpu_op_backward_s: Annotated[Seconds, Field(ge=0, le=1e-3)] = CPU_OP_BACKWARD_S
    cuda_graphs: bool = False
    graph_launch_s: Annotated[Seconds, Field(ge=0, le=1e-2)] = GRAPH_LAUNCH_S
    launch_queue: Annotated[int, Field(ge=1, le=1_000_000)] = LAUNCH_QUEUE
    swiglu_saved: Annotated[int, Field(ge=2, le=4)] = 3
    eager_kernels: bool = False
    eager_norms: bool = False
    loss_bytes_per_logit: Annotated[Real, Field(ge=4, le=64), Unit("B")] = 6.0
    grad_accumulation: Literal["fused", "add"] = "fused"
    tp_async_allreduce: bool = False
    overlap_grad_reduce: bool = True
    flash_kernel: Literal["native", "fa2"] = "native"
    optimizer: Literal["fused", "foreach"] = "fused"
    weight_casts: bool = False
    allocator_reserve: Annotated[Real, Field(ge=0, lt=0.9)] = 0.0
    runtime_bytes: Annotated[Real, Field(ge=0, le=1e12), Unit("B")] = RUNTIME_BYTES
    nccl_buffers: bool = True
    nccl_channels: Annotated[int, Field(ge=1, le=64)] = 24

    @model_validator(mode="before")
    @classmethod
    def resolve_preset(cls, data: Any) -> Any:
        return _resolve_framework(data)
