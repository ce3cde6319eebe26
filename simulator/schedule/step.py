"""Build the TaskGraph of one steady-state training step from a scenario.

Each simulated rank gets its pipeline stage's pass order (:mod:`simulator.schedule.pipeline`)
expanded layer by layer into compute tasks (durations from the compute model) and
communication tasks, on streams ``compute``, ``tp``, ``cp``, ``ep``, ``dp``, ``pp_fwd`` and
``pp_bwd``:

- tensor parallel: an all-reduce after the attention and after the MLP, forward and backward;
  with sequence parallelism an all-gather before and a reduce-scatter after each instead;
- context parallel: the local K/V go round the CP ring (all-gather) while the local attention
  block computes; the remote blocks wait for them; backward reduce-scatters dK/dV;
- expert parallel: dispatch and combine all-to-alls around the routed experts;
- pipeline: each chunk's output activation (its input gradient going back) is a send to the
  neighbour stage; the receiver's pass depends on it. Without zero-bubble splitting, the
  backward pass (B and W of every layer) ends before its gradient is sent;
- data parallel: DDP all-reduces gradient buckets of ``bucket_size`` as the last micro-batch's
  backward produces them; ZeRO-1/2 reduce-scatter them instead and all-gather the updated
  parameters at the start of the step (overlapping the forward, as in steady state); ZeRO-3
  all-gathers each unit before its forward and again before its backward (``fsdp_prefetch``
  units ahead) and reduce-scatters its gradient after every micro-batch (FSDP's default);
- recompute: full recompute re-runs each layer's forward before its backward, selective the
  attention core;
- the optimizer step (memory-bound) after the last gradient communication.

Symmetric mode simulates one rank per pipeline stage (tp = cp = dp = 0); the other groups'
identical collectives ride along as copies so the network sees all of them. Full mode
simulates every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.model.activations import (
    MicroBatch,
    embedding_activation_bytes,
    head_activation_bytes,
)
from simulator.model.compute import ComputeModel
from simulator.model.ops import model_flops_per_sequence
from simulator.model.params import (
    embedding_params_per_rank,
    head_params_per_rank,
    layer_params_per_rank,
)
from simulator.plan.grid import RankGrid
from simulator.plan.memory import micro_batches_per_step, sharding_of
from simulator.plan.stages import chunk_layers
from simulator.scenario.schema import Scenario
from simulator.schedule.costs import (
    Block,
    embedding_block,
    head_block,
    layer_cost,
    optimizer_seconds,
)
from simulator.schedule.pipeline import stage_orders
from simulator.schedule.taskgraph import CommSpec, Task, TaskGraph

ZB = ("zb-h1", "zb-h2")


def grid_of(s: Scenario) -> RankGrid:
    p = s.parallelism
    return RankGrid(dp=s.dp, pp=p.pp, cp=p.cp, tp=p.tp, ep=p.ep, order=tuple(p.order))


def simulated_ranks(s: Scenario, grid: RankGrid) -> list[int]:
    """One rank per stage (symmetric mode) or all of them (full mode)."""
    if s.simulation.mode == "full":
        return list(range(grid.size))
    return [grid.rank(tp=0, cp=0, dp=0, pp=r) for r in range(grid.pp)]


@dataclass
class StepGraph:
    """The TaskGraph and what metrics need to interpret it."""

    graph: TaskGraph
    grid: RankGrid
    ranks: list[int]
    static_memory: dict[int, float]  # rank -> parameters + gradients + optimizer bytes
    model_flops_per_step: float
    stage_of: dict[int, int] = field(default_factory=dict)


class _Builder:
    def __init__(self, s: Scenario, cm: ComputeModel):
        self.s, self.cm = s, cm
        self.m, self.par, self.tr = s.model, s.parallelism, s.training
        self.grid = grid_of(s)
        self.sh = sharding_of(s)
        self.mb = MicroBatch(
            self.tr.micro_batch,
            self.tr.seq_len,
            s.precision.activation_bytes,
            self.tr.flash_attention,
        )
        self.n_mb = micro_batches_per_step(s)
        self.symmetric = s.simulation.mode == "symmetric"
        self.g = TaskGraph()
        self.keys: dict[tuple, int] = {}
        self.pending: list[tuple[int, tuple]] = []  # (task, key of a dep made later)
        self.instances: dict[tuple, int] = {}
        self.copy_index: dict[tuple, int] = {}
        self.pb, self.gb, self.kb = s.precision.bytes_per_param(self.tr.optimizer)
        e = self.mb.act_bytes
        self.tokens = self.mb.b * self.mb.s / self.par.cp
        self.act_msg = e * self.tokens * self.m.hidden  # one activation tensor, full hidden
        self.group_cache: dict[tuple[int, str], tuple[tuple[int, ...], int]] = {}

    # -- tasks ---------------------------------------------------------------------------
    def task(
        self,
        rank: int,
        stream: str,
        name: str,
        seconds: float = 0.0,
        deps=(),
        comm: CommSpec | None = None,
        **kw,
    ) -> int:
        resolved = []
        for d in deps:
            if d is None:
                continue
            if isinstance(d, tuple):
                if d in self.keys:
                    resolved.append(self.keys[d])
                else:
                    self.pending.append((len(self.g.tasks), d))
            else:
                resolved.append(d)
        kind = "comm" if comm is not None else "compute"
        return self.g.add(Task(rank, stream, kind, name, seconds, tuple(resolved), comm, **kw))

    def comm(
        self,
        rank: int,
        stream: str,
        name: str,
        collective: str,
        group: tuple[int, ...],
        size: float,
        tag: tuple,
        deps=(),
        copies: int = -1,
        **kw,
    ) -> int | None:
        if len(group) < 2 or size <= 0:
            return None
        key = (name, group, tag)
        inst = self.instances.setdefault(key, len(self.instances))
        spec = CommSpec(collective, group, size, inst, None, copies if self.symmetric else -1)
        return self.task(rank, stream, name, 0.0, deps, spec, **kw)

    def copies(self, rank: int, kind: str, group: tuple[int, ...]) -> int:
        """Index of the symmetric copies of ``rank``'s ``kind`` group at its stage."""
        if not self.symmetric:
            return -1
        stage = self.grid.coords(rank)["pp"]
        key = (stage, kind)
        if key not in self.copy_index:
            peers = self.grid.group(rank, "tp", "cp", "dp")
            found = {}
            for x in peers:
                gx = self._group(x, kind)
                found.setdefault(gx, None)
            found.pop(group, None)
            self.copy_index[key] = self.g.add_copies(tuple(found))
        return self.copy_index[key]

    def _group(self, rank: int, kind: str) -> tuple[int, ...]:
        g = self.grid
        if kind == "tp":
            return g.group(rank, "tp")
        if kind == "cp":
            return g.group(rank, "cp")
        if kind == "dp":
            return g.group(rank, "dp", "cp")
        if kind == "ep":
            return g.ep_group(rank)
        if kind == "edp":
            return g.expert_dp_group(rank)
        c = g.coords(rank)
        if kind == "pp_next":
            return (rank, g.rank(**{**c, "pp": c["pp"] + 1}))
        if kind == "pp_prev":
            return (rank, g.rank(**{**c, "pp": c["pp"] - 1}))
        raise ValueError(kind)

    def group(self, rank: int, kind: str) -> tuple[tuple[int, ...], int]:
        """``rank``'s group of ``kind`` and the index of its symmetric copies (memoised)."""
        key = (rank, kind)
        hit = self.group_cache.get(key)
        if hit is None:
            grp = self._group(rank, kind)
            hit = self.group_cache[key] = (grp, self.copies(rank, kind, grp))
        return hit

    # -- one layer -----------------------------------------------------------------------
    def tp_comm(self, rank, name, collective, tag, deps, **kw):
        if self.par.tp == 1:
            return None
        grp, cps = self.group(rank, "tp")
        return self.comm(rank, "tp", name, collective, grp, self.act_msg, tag, deps, cps, **kw)

    @staticmethod
    def then(last: list, new) -> list:
        """The dependency list after ``new`` (a task, or None when it was not needed)."""
        return [new] if new is not None else last

    def local_kv_bytes(self) -> float:
        """K and V of this rank's tokens and heads (bytes), what context parallelism passes."""
        m = self.m
        if m.attention == "mha":
            d, heads = m.d_head, m.n_kv_heads
        else:
            d, heads = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.heads
        return self.mb.act_bytes * self.tokens * heads / self.par.tp * 2 * d

    def layer_forward(self, rank, layer, j, deps, tag, phase="forward", alloc=True) -> list:
        """Tasks of ``layer``'s forward (or its recompute); returns the dependency list."""
        cost = layer_cost(self.m, layer, self.mb, self.sh, self.par.recompute, self.cm)
        sp = self.par.sequence_parallel
        close = "reduce_scatter" if sp else "all_reduce"
        kw = {"phase": phase, "layer": layer, "microbatch": j}
        last = list(deps)
        if sp:
            last = self.then(
                last, self.tp_comm(rank, "tp_all_gather", "all_gather", tag + ("ag1",), last, **kw)
            )
        alloc_bytes = cost.act_kept if alloc else cost.act_full - cost.act_kept
        local = self.task(
            rank,
            "compute",
            "attention",
            cost.attn_local.f,
            last,
            flops=cost.attn_local.flops_f,
            mem_alloc=alloc_bytes,
            **kw,
        )
        kv = None
        if self.par.cp > 1:  # K/V go round the ring while the local block computes
            grp, cps = self.group(rank, "cp")
            kv = self.comm(
                rank,
                "cp",
                "cp_kv_all_gather",
                "all_gather",
                grp,
                self.local_kv_bytes() * self.par.cp,
                tag + ("kv",),
                last,
                cps,
                **kw,
            )
        remote = self.task(
            rank,
            "compute",
            "attention_out",
            cost.attn_remote.f,
            [local, kv],
            flops=cost.attn_remote.flops_f,
            **kw,
        )
        last = self.then(
            [remote], self.tp_comm(rank, f"tp_{close}", close, tag + ("a",), [remote], **kw)
        )
        if sp:
            last = self.then(
                last, self.tp_comm(rank, "tp_all_gather", "all_gather", tag + ("ag2",), last, **kw)
            )
        last = [self.task(rank, "compute", "mlp", cost.ffn.f, last, flops=cost.ffn.flops_f, **kw)]
        if cost.experts is not None:
            last = [self.experts(rank, cost.experts, "f", last, tag, kw)]
        return self.then(last, self.tp_comm(rank, f"tp_{close}", close, tag + ("m",), last, **kw))

    def experts(self, rank, block: Block, phase: str, deps, tag, kw):
        """Dispatch all-to-all, the routed experts' ``phase`` pass, combine all-to-all."""
        moe = self.m.moe
        size = (
            self.mb.act_bytes
            * self.tokens
            * moe.top_k
            * (moe.capacity_factor or 1.0)
            * self.m.hidden
        )
        grp, cps = self.group(rank, "ep")
        last = self.then(
            list(deps),
            self.comm(
                rank,
                "ep",
                "ep_dispatch",
                "all_to_all",
                grp,
                size,
                tag + (phase, "d"),
                deps,
                cps,
                **kw,
            ),
        )
        seconds = {"f": block.f, "b": block.b, "w": block.w}[phase]
        flops = {"f": block.flops_f, "b": block.flops_b, "w": block.flops_w}[phase]
        ex = self.task(rank, "compute", "experts", seconds, last, flops=flops, **kw)
        out = self.comm(
            rank, "ep", "ep_combine", "all_to_all", grp, size, tag + (phase, "c"), [ex], cps, **kw
        )
        return out if out is not None else ex

    def layer_backward(self, rank, layer, j, deps, tag) -> list:
        """Input-gradient tasks of ``layer``, recomputing first if asked; each forward
        collective has its mirror (all-reduce for all-reduce, reduce-scatter for all-gather)."""
        cost = layer_cost(self.m, layer, self.mb, self.sh, self.par.recompute, self.cm)
        kw = {"phase": "input_grad", "layer": layer, "microbatch": j}
        last = list(deps)
        rc = self.par.recompute
        transient = cost.act_full - cost.act_kept if rc != "none" else 0.0
        if rc == "full":
            last = self.layer_forward(rank, layer, j, last, tag + ("rc",), "recompute", alloc=False)
        elif rc == "selective":
            last = [
                self.task(
                    rank,
                    "compute",
                    "attention_recompute",
                    cost.core.f,
                    last,
                    flops=cost.core.flops_f,
                    phase="recompute",
                    layer=layer,
                    microbatch=j,
                    mem_alloc=transient,
                )
            ]
        sp = self.par.sequence_parallel
        back = "all_gather" if sp else "all_reduce"  # mirror of the closing RS / AR
        last = self.then(last, self.tp_comm(rank, f"tp_{back}", back, tag + ("bm",), last, **kw))
        if cost.experts is not None:
            last = [self.experts(rank, cost.experts, "b", last, tag, kw)]
        last = [self.task(rank, "compute", "mlp", cost.ffn.b, last, flops=cost.ffn.flops_b, **kw)]
        if sp:
            last = self.then(
                last,
                self.tp_comm(
                    rank, "tp_reduce_scatter", "reduce_scatter", tag + ("bg2",), last, **kw
                ),
            )
        last = self.then(last, self.tp_comm(rank, f"tp_{back}", back, tag + ("ba",), last, **kw))
        remote = self.task(
            rank,
            "compute",
            "attention_out",
            cost.attn_remote.b,
            last,
            flops=cost.attn_remote.flops_b,
            **kw,
        )
        kv = None
        if self.par.cp > 1:  # dK, dV go back round the ring
            grp, cps = self.group(rank, "cp")
            kv = self.comm(
                rank,
                "cp",
                "cp_dkv_reduce_scatter",
                "reduce_scatter",
                grp,
                self.local_kv_bytes() * self.par.cp,
                tag + ("dkv",),
                [remote],
                cps,
                **kw,
            )
        local = self.task(
            rank,
            "compute",
            "attention",
            cost.attn_local.b,
            [remote],
            flops=cost.attn_local.flops_b,
            mem_free=transient,
            **kw,
        )
        last = [local] if kv is None else [local, kv]
        if sp:
            last = self.then(
                last,
                self.tp_comm(
                    rank, "tp_reduce_scatter", "reduce_scatter", tag + ("bg1",), last, **kw
                ),
            )
        return last

    def layer_weight_grad(self, rank, layer, j, deps):
        cost = layer_cost(self.m, layer, self.mb, self.sh, self.par.recompute, self.cm)
        block = cost.attn_local + cost.attn_remote + cost.ffn + (cost.experts or Block())
        return self.task(
            rank,
            "compute",
            "weight_grad",
            block.w,
            deps,
            flops=block.flops_w,
            phase="weight_grad",
            layer=layer,
            microbatch=j,
            mem_free=cost.act_kept,
        )

    # -- data parallel --------------------------------------------------------------------
    def layer_params(self, layer: int) -> tuple[float, float]:
        return layer_params_per_rank(self.m, layer, self.par.tp, self.par.ep, self.par.expert_tp)

    def param_units(self, key) -> tuple[float, float]:
        """(dense, expert) parameters of a layer, or of the "head" / "emb" pseudo-layers."""
        p = self.par
        if key == "head":
            return head_params_per_rank(self.m, p.tp, p.pp), 0.0
        if key == "emb":
            return embedding_params_per_rank(self.m, p.tp), 0.0
        if isinstance(key, tuple):  # an FSDP unit of several layers
            parts = [self.layer_params(layer) for layer in key]
            return sum(d for d, _ in parts), sum(e for _, e in parts)
        return self.layer_params(key)

    def buckets(self, keys_backward: list) -> list[tuple]:
        """Gradient buckets in backward order: (keys, dense params, expert params), a key being
        a layer index or "head"/"emb". Like PyTorch DDP, a bucket closes when it holds
        ``bucket_size`` bytes of gradient, so a layer larger than a bucket spans several."""
        cap = max(self.par.bucket_size / self.gb, 1.0)  # parameters per bucket
        out, keys, dense, expert = [], [], 0.0, 0.0
        for key in keys_backward:
            d, e = self.param_units(key)
            total = d + e
            left = total
            while left > 0:
                take = min(left, cap - dense - expert)
                frac = take / total
                keys.append(key)
                dense, expert = dense + d * frac, expert + e * frac
                left -= take
                if dense + expert >= cap * (1 - 1e-12):
                    out.append((tuple(dict.fromkeys(keys)), dense, expert))
                    keys, dense, expert = [], 0.0, 0.0
        if keys:
            out.append((tuple(dict.fromkeys(keys)), dense, expert))
        return out

    def grad_sync(self, rank, bucket, deps, tag):
        """DDP all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1/2) of one bucket."""
        layers, dense, expert = bucket
        coll = "all_reduce" if self.par.zero == 0 else "reduce_scatter"
        out = []
        grp, cps = self.group(rank, "dp")
        first = next((k for k in layers if isinstance(k, int)), -1)
        out.append(
            self.comm(
                rank,
                "dp",
                f"dp_{coll}",
                coll,
                grp,
                dense * self.gb,
                tag,
                deps,
                cps,
                phase="grad_sync",
                layer=first,
            )
        )
        if expert:
            grp, cps = self.group(rank, "edp")
            out.append(
                self.comm(
                    rank,
                    "dp",
                    f"edp_{coll}",
                    coll,
                    grp,
                    expert * self.gb,
                    tag + ("e",),
                    deps,
                    cps,
                    phase="grad_sync",
                )
            )
        return [t for t in out if t is not None]

    def fsdp_gather(self, rank, key, j, why, deps):
        """ZeRO-3: all-gather unit ``key`` (a layer, "emb" or "head") before it computes."""
        if self.par.zero != 3:
            return None
        d, e = self.param_units(key)
        grp, cps = self.group(rank, "dp")
        return self.comm(
            rank,
            "dp",
            "fsdp_all_gather",
            "all_gather",
            grp,
            (d + e) * self.pb,
            ("ag", key, j, why),
            deps,
            cps,
            phase="fsdp",
            layer=key[0] if isinstance(key, tuple) else -1,
            microbatch=j,
            mem_alloc=(d + e) * self.pb,
        )

    def gathered_bytes(self, key) -> float:
        return sum(self.param_units(key)) * self.pb if self.par.zero == 3 else 0.0

    def fsdp_reduce(self, rank, key, j, deps, dp_tasks, free: float = 0.0):
        """ZeRO-3: reduce-scatter unit ``key``'s gradient after its backward, then release
        ``free`` bytes of parameters gathered for it."""
        if self.par.zero != 3:
            return
        d, e = self.param_units(key)
        grp, cps = self.group(rank, "dp")
        rs = self.comm(
            rank,
            "dp",
            "fsdp_reduce_scatter",
            "reduce_scatter",
            grp,
            (d + e) * self.gb,
            ("rs", key, j),
            deps,
            cps,
            phase="grad_sync",
            layer=key[0] if isinstance(key, tuple) else -1,
            microbatch=j,
            mem_free=free,
        )
        if rs is not None:
            dp_tasks.append(rs)

    # -- a stage -------------------------------------------------------------------------
    def build_rank(self, rank: int, order) -> None:
        p, v = self.par.pp, self.par.pipeline.virtual_stages
        r = self.grid.coords(rank)["pp"]
        pl = self.par.pipeline
        chunks = [
            chunk_layers(self.m.layers, p, v, r, c, pl.first_stage_layers, pl.last_stage_layers)
            for c in range(v)
        ]
        zb = pl.schedule in ZB
        zero = self.par.zero
        head_stage = r == p - 1
        emb_stage = r == 0
        # ZeRO-1/2: parameters updated last step are all-gathered as this step begins.
        param_ag: dict[int, int] = {}
        if zero in (1, 2):
            for c in range(v):
                for bi, bucket in reversed(list(enumerate(self.bucket_plan[(r, c)]))):
                    layers, dense, expert = bucket
                    grp, cps = self.group(rank, "dp")
                    t = self.comm(
                        rank,
                        "dp",
                        "dp_all_gather",
                        "all_gather",
                        grp,
                        (dense + expert) * self.pb,
                        ("pag", r, c, bi),
                        (),
                        cps,
                        phase="param_gather",
                    )
                    for layer in layers:
                        if isinstance(layer, int):
                            param_ag[layer] = t
        dp_tasks: list[int] = []
        self.zero3_tasks = dp_tasks
        self.w_task: dict[tuple, int] = {}  # (layer | "head" | "emb", micro-batch) -> W task
        for kind, c, j in order:
            layers = chunks[c]
            tag = (c, j)
            if kind == "F":
                first_chunk = emb_stage and c == 0
                if first_chunk:
                    deps = []
                elif r > 0:
                    deps = [("sendF", r - 1, c, j)]
                else:
                    deps = [("sendF", p - 1, c - 1, j)]
                last = deps
                if first_chunk:
                    eb = embedding_block(self.m, self.mb, self.sh, self.cm)
                    gather = self.fsdp_gather(rank, "emb", j, "F", ())
                    last = [
                        self.task(
                            rank,
                            "compute",
                            "embedding",
                            eb.f,
                            last + [gather],
                            phase="forward",
                            microbatch=j,
                            flops=eb.flops_f,
                            mem_alloc=embedding_activation_bytes(self.m, self.mb, self.sh),
                            mem_free=self.gathered_bytes("emb"),
                        )
                    ]
                unit_ends: list = []  # per FSDP unit done in this pass, its release task
                for layer in layers:
                    unit = self.unit_of[layer]
                    extra = []
                    if layer == unit[0]:
                        extra.append(
                            self.fsdp_gather(rank, unit, j, "F", self.prefetch_gate(unit_ends))
                        )
                    if layer in param_ag and j == 0:
                        extra.append(param_ag[layer])
                    last = self.layer_forward(rank, layer, j, last + extra, (layer,) + tag)
                    if zero == 3 and layer == unit[-1]:
                        last = [
                            self.task(
                                rank,
                                "compute",
                                "fsdp_free",
                                0.0,
                                last,
                                mem_free=self.gathered_bytes(unit),
                            )
                        ]
                        unit_ends.append(last[0])
                if head_stage and c == v - 1:
                    hb = head_block(self.m, self.mb, self.sh, self.cm)
                    gather = self.fsdp_gather(rank, "head", j, "F", ())
                    last = [
                        self.task(
                            rank,
                            "compute",
                            "loss",
                            hb.f,
                            last + [gather],
                            phase="forward",
                            microbatch=j,
                            flops=hb.flops_f,
                            mem_alloc=head_activation_bytes(self.m, self.mb, self.sh),
                            mem_free=self.gathered_bytes("head"),
                        )
                    ]
                if not (head_stage and c == v - 1):
                    nxt = "pp_next" if r < p - 1 else None
                    if nxt:
                        grp, cps = self.group(rank, nxt)
                    else:  # interleaved: last stage hands chunk c to stage 0's chunk c + 1
                        c0 = self.grid.coords(rank)
                        grp = (rank, self.grid.rank(**{**c0, "pp": 0}))
                        cps = -1
                    self.keys[("sendF", r, c, j)] = self.comm(
                        rank,
                        "pp_fwd",
                        "pp_send_activation",
                        "send_recv",
                        grp,
                        self.p2p_bytes,
                        ("F", c, j),
                        last,
                        cps,
                        phase="forward",
                        microbatch=j,
                    )
            elif kind == "B":
                last_chunk = head_stage and c == v - 1
                if last_chunk:
                    deps = []
                elif r < p - 1:
                    deps = [("sendB", r + 1, c, j)]
                else:
                    deps = [("sendB", 0, c + 1, j)]
                last = deps
                if last_chunk:
                    hb = head_block(self.m, self.mb, self.sh, self.cm)
                    gather = self.fsdp_gather(rank, "head", j, "B", ())
                    last = [
                        self.task(
                            rank,
                            "compute",
                            "loss",
                            hb.b + hb.w,
                            last + [gather],
                            phase="input_grad",
                            microbatch=j,
                            flops=hb.flops_b + hb.flops_w,
                            mem_free=head_activation_bytes(self.m, self.mb, self.sh),
                        )
                    ]
                    self.w_task[("head", j)] = last[0]
                    self.fsdp_reduce(rank, "head", j, last, dp_tasks, self.gathered_bytes("head"))
                unit_ends = []
                for layer in reversed(layers):
                    unit = self.unit_of[layer]
                    extra = []
                    if layer == unit[-1]:
                        extra.append(
                            self.fsdp_gather(rank, unit, j, "B", self.prefetch_gate(unit_ends))
                        )
                    last = self.layer_backward(rank, layer, j, last + extra, (layer,) + tag)
                    if not zb:
                        last = [self.after_weight_grad(rank, layer, j, last, dp_tasks)]
                    if layer == unit[0]:
                        unit_ends.append(last[0])
                if emb_stage and c == 0 and not zb:
                    last = [self.embedding_grad(rank, j, last)]
                self.send_grad(rank, r, c, j, last)
            else:  # "W"
                if zb:
                    last = []
                    for layer in reversed(layers):
                        last = [self.after_weight_grad(rank, layer, j, last, dp_tasks)]
                    if emb_stage and c == 0:
                        last = [self.embedding_grad(rank, j, last)]
                if j == self.n_mb - 1 and zero in (0, 1, 2):
                    for bi, bucket in enumerate(self.bucket_plan[(r, c)]):
                        ready = [self.w_task[(k, j)] for k in bucket[0]]
                        dp_tasks += self.grad_sync(rank, bucket, ready, ("g", r, c, bi))
        self.optimizer(rank, r, dp_tasks)

    def after_weight_grad(self, rank, layer, j, deps, dp_tasks):
        w = self.layer_weight_grad(rank, layer, j, deps)
        self.w_task[(layer, j)] = w
        unit = self.unit_of[layer]
        if layer == unit[0]:  # the unit's last weight gradient in backward order
            self.fsdp_reduce(rank, unit, j, [w], dp_tasks, self.gathered_bytes(unit))
        return w

    def prefetch_gate(self, unit_ends: list) -> list:
        """ZeRO-3 prefetch: a unit's all-gather waits until the unit ``fsdp_prefetch + 1``
        places back has released its parameters, so at most ``1 + fsdp_prefetch`` units are
        gathered at once."""
        k = self.par.fsdp_prefetch + 1
        return [unit_ends[-k]] if len(unit_ends) >= k else []

    def embedding_grad(self, rank, j, deps):
        """The embedding's gradient (a scatter-add). FSDP's pre-backward hook gathers the
        unit's parameters even though the scatter-add does not read them."""
        eb = embedding_block(self.m, self.mb, self.sh, self.cm)
        gather = self.fsdp_gather(rank, "emb", j, "B", ())
        t = self.task(
            rank,
            "compute",
            "embedding",
            eb.w,
            list(deps) + [gather],
            phase="weight_grad",
            microbatch=j,
            flops=eb.flops_w,
            mem_free=embedding_activation_bytes(self.m, self.mb, self.sh),
        )
        self.w_task[("emb", j)] = t
        self.fsdp_reduce(rank, "emb", j, [t], self.zero3_tasks, self.gathered_bytes("emb"))
        return t

    def send_grad(self, rank, r, c, j, last):
        p = self.par.pp
        if r == 0 and c == 0:
            return
        if r > 0:
            grp, cps = self.group(rank, "pp_prev")
        else:  # interleaved: stage 0's chunk c returns to the last stage's chunk c - 1
            c0 = self.grid.coords(rank)
            grp, cps = (rank, self.grid.rank(**{**c0, "pp": p - 1})), -1
        self.keys[("sendB", r, c, j)] = self.comm(
            rank,
            "pp_bwd",
            "pp_send_gradient",
            "send_recv",
            grp,
            self.p2p_bytes,
            ("B", c, j),
            last,
            cps,
            phase="input_grad",
            microbatch=j,
        )

    def optimizer(self, rank, r, dp_tasks):
        dense, expert = self.stage_params[r]
        n_dense = self.s.dp * self.par.cp if self.par.zero >= 1 else 1
        n_exp = (
            max(1, self.s.dp * self.par.cp * self.par.tp // (self.par.ep * self.par.etp))
            if self.par.zero >= 1
            else 1
        )
        shard = dense / n_dense + expert / n_exp
        master_and_states = self.kb
        seconds = optimizer_seconds(shard, self.gb, self.pb, master_and_states, self.cm)
        self.task(rank, "compute", "optimizer", seconds, dp_tasks, phase="optimizer")

    # -- the whole step ------------------------------------------------------------------
    def plan_stages(self) -> None:
        p, v = self.par.pp, self.par.pipeline.virtual_stages
        pl = self.par.pipeline
        self.bucket_plan: dict[tuple[int, int], list[tuple]] = {}
        self.unit_of: dict[int, tuple[int, ...]] = {}  # layer -> its FSDP wrap unit
        self.stage_params: dict[int, tuple[float, float]] = {}
        for r in range(p):
            dense = expert = 0.0
            for c in range(v):
                layers = chunk_layers(
                    self.m.layers, p, v, r, c, pl.first_stage_layers, pl.last_stage_layers
                )
                keys: list = (
                    (["head"] if r == p - 1 and c == v - 1 else [])
                    + list(reversed(layers))
                    + (["emb"] if r == 0 and c == 0 else [])
                )
                self.bucket_plan[(r, c)] = self.buckets(keys)
                size = self.par.fsdp_unit_layers
                for start in range(0, len(layers), size):
                    unit = tuple(layers[start : start + size])
                    for layer in unit:
                        self.unit_of[layer] = unit
                for k in keys:
                    d, e = self.param_units(k)
                    dense, expert = dense + d, expert + e
            self.stage_params[r] = (dense, expert)
        self.p2p_bytes = self.act_msg / (self.par.tp if self.par.sequence_parallel else 1)

    def static_memory(self, r: int) -> float:
        dense, expert = self.stage_params[r]
        z = self.par.zero
        n_d = self.s.dp * self.par.cp
        n_e = max(1, self.s.dp * self.par.cp * self.par.tp // (self.par.ep * self.par.etp))
        out = 0.0
        for params, n in ((dense, n_d), (expert, n_e)):
            out += params * (
                self.pb / (n if z >= 3 else 1)
                + self.gb / (n if z >= 2 else 1)
                + self.kb / (n if z >= 1 else 1)
            )
        return out


def build_step(s: Scenario, cm: ComputeModel) -> StepGraph:
    """The TaskGraph of one training step of ``s`` and what its metrics need."""
    b = _Builder(s, cm)
    b.plan_stages()
    par = s.parallelism
    orders = stage_orders(par.pipeline.schedule, par.pp, b.n_mb, par.pipeline.virtual_stages)
    ranks = simulated_ranks(s, b.grid)
    stage_of = {}
    for rank in ranks:
        stage_of[rank] = b.grid.coords(rank)["pp"]
        b.build_rank(rank, orders[stage_of[rank]])
    for task_index, key in b.pending:
        if key not in b.keys or b.keys[key] is None:
            raise RuntimeError(f"unresolved dependency {key}")
        t = b.g.tasks[task_index]
        b.g.tasks[task_index] = Task(**{**t.__dict__, "deps": t.deps + (b.keys[key],)})
    flops = model_flops_per_sequence(s.model, s.training.seq_len) * s.training.global_batch
    return StepGraph(
        b.g, b.grid, ranks, {rk: b.static_memory(stage_of[rk]) for rk in ranks}, flops, stage_of
    )
