"""Tasks of one transformer layer for one micro-batch: forward, input-gradient, weight-gradient.

A mixin of the step builder (:mod:`simulator.schedule.step`), which provides ``task``,
``comm``, ``group`` and the scenario. Tensor parallelism wraps the attention and MLP blocks
in all-reduces (sequence parallelism: all-gather before, reduce-scatter after); context
parallelism passes K/V round its ring while the local attention block computes; expert
parallelism puts the routed experts between a dispatch and a combine all-to-all. Backward
mirrors each forward collective.
"""

from __future__ import annotations

from simulator.schedule.costs import Block, layer_cost


class LayerTasks:
    """Per-layer task emission (mixed into the step builder)."""

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
