"""Data-parallel communication and the optimizer: DDP buckets, ZeRO-1/2 reduce-scatters and
parameter all-gathers, ZeRO-3 unit gathers with prefetch, and the per-rank state they shard.

A mixin of the step builder (:mod:`simulator.schedule.step`).
"""

from __future__ import annotations

from simulator.model.params import (
    embedding_params_per_rank,
    head_params_per_rank,
    layer_params_per_rank,
)
from simulator.schedule.costs import optimizer_seconds


class DataParallelTasks:
    """Gradient synchronisation, parameter gathering and the optimizer step."""

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

    def prefetch_gate(self, unit_ends: list) -> list:
        """ZeRO-3 prefetch: a unit's all-gather waits until the unit ``fsdp_prefetch + 1``
        places back has released its parameters, so at most ``1 + fsdp_prefetch`` units are
        gathered at once."""
        k = self.par.fsdp_prefetch + 1
        return [unit_ends[-k]] if len(unit_ends) >= k else []

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
