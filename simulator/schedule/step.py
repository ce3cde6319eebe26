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
from simulator.plan.grid import RankGrid
from simulator.plan.memory import micro_batches_per_step, sharding_of
from simulator.plan.stages import chunk_layers
from simulator.scenario.schema import Scenario
from simulator.schedule.costs import embedding_block, head_block
from simulator.schedule.data_parallel import DataParallelTasks
from simulator.schedule.layer_tasks import LayerTasks
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


@dataclass
class _Stage:
    """One simulated rank's pipeline stage while its tasks are built."""

    rank: int
    r: int  # stage index
    chunks: list[tuple[int, ...]]  # layers of each model chunk
    param_ag: dict[int, int] = field(default_factory=dict)  # layer -> its ZeRO-1/2 gather
    dp_tasks: list[int] = field(default_factory=list)  # what the optimizer waits for


class _Builder(LayerTasks, DataParallelTasks):
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
    # -- a stage -------------------------------------------------------------------------
    def build_rank(self, rank: int, order) -> None:
        """All tasks of ``rank``: its stage's passes in ``order``, then the optimizer."""
        p, v = self.par.pp, self.par.pipeline.virtual_stages
        r = self.grid.coords(rank)["pp"]
        pl = self.par.pipeline
        st = _Stage(
            rank,
            r,
            [
                chunk_layers(self.m.layers, p, v, r, c, pl.first_stage_layers, pl.last_stage_layers)
                for c in range(v)
            ],
        )
        if self.par.zero in (1, 2):
            self.gather_updated_params(st)
        self.w_task: dict[tuple, int] = {}  # (layer | "head" | "emb", micro-batch) -> W task
        passes = {"F": self.forward_pass, "B": self.backward_pass, "W": self.weight_pass}
        for kind, c, j in order:
            passes[kind](st, c, j)
        self.optimizer(rank, r, st.dp_tasks)

    def gather_updated_params(self, st: _Stage) -> None:
        """ZeRO-1/2: parameters updated last step are all-gathered as this step begins
        (bucket by bucket, in forward order); a layer's first forward waits for its bucket."""
        for c in range(len(st.chunks)):
            for bi, (keys, dense, expert) in reversed(list(enumerate(self.bucket_plan[(st.r, c)]))):
                grp, cps = self.group(st.rank, "dp")
                t = self.comm(
                    st.rank,
                    "dp",
                    "dp_all_gather",
                    "all_gather",
                    grp,
                    (dense + expert) * self.pb,
                    ("pag", st.r, c, bi),
                    (),
                    cps,
                    phase="param_gather",
                )
                for key in keys:
                    if isinstance(key, int):
                        st.param_ag[key] = t

    def forward_pass(self, st: _Stage, c: int, j: int) -> None:
        """Chunk ``c``'s forward for micro-batch ``j``, from the received activation (or the
        embedding) to the send onward (or the loss)."""
        p, v = self.par.pp, len(st.chunks)
        rank, r = st.rank, st.r
        first, last_chunk = r == 0 and c == 0, r == p - 1 and c == v - 1
        if first:
            last = [self.embedding_forward(rank, j)]
        else:
            last = [("sendF", r - 1, c, j) if r > 0 else ("sendF", p - 1, c - 1, j)]
        unit_ends: list = []  # per FSDP unit done in this pass, its release task
        for layer in st.chunks[c]:
            unit = self.unit_of[layer]
            extra = []
            if layer == unit[0]:
                extra.append(self.fsdp_gather(rank, unit, j, "F", self.prefetch_gate(unit_ends)))
            if layer in st.param_ag and j == 0:
                extra.append(st.param_ag[layer])
            last = self.layer_forward(rank, layer, j, last + extra, (layer, c, j))
            if self.par.zero == 3 and layer == unit[-1]:
                last = [
                    self.task(
                        rank, "compute", "fsdp_free", 0.0, last, mem_free=self.gathered_bytes(unit)
                    )
                ]
                unit_ends.append(last[0])
        if last_chunk:
            self.loss_forward(rank, j, last)
            return
        if r < p - 1:
            grp, cps = self.group(rank, "pp_next")
        else:  # interleaved: the last stage hands chunk c to stage 0's chunk c + 1
            grp, cps = (rank, self.grid.rank(**{**self.grid.coords(rank), "pp": 0})), -1
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

    def backward_pass(self, st: _Stage, c: int, j: int) -> None:
        """Chunk ``c``'s input-gradient pass (with each layer's weight gradient unless the
        schedule is zero-bubble), then the gradient sent back."""
        p, v = self.par.pp, len(st.chunks)
        rank, r = st.rank, st.r
        zb = self.par.pipeline.schedule in ZB
        if r == p - 1 and c == v - 1:
            last = [self.loss_backward(rank, j, st.dp_tasks)]
        else:
            last = [("sendB", r + 1, c, j) if r < p - 1 else ("sendB", 0, c + 1, j)]
        unit_ends: list = []
        for layer in reversed(st.chunks[c]):
            unit = self.unit_of[layer]
            extra = []
            if layer == unit[-1]:
                extra.append(self.fsdp_gather(rank, unit, j, "B", self.prefetch_gate(unit_ends)))
            last = self.layer_backward(rank, layer, j, last + extra, (layer, c, j))
            if not zb:
                last = [self.after_weight_grad(rank, layer, j, last, st.dp_tasks)]
            if layer == unit[0]:
                unit_ends.append(last[0])
        if r == 0 and c == 0 and not zb:
            last = [self.embedding_grad(rank, j, last, st.dp_tasks)]
        self.send_grad(rank, r, c, j, last)

    def weight_pass(self, st: _Stage, c: int, j: int) -> None:
        """Zero-bubble schedules' separate weight-gradient pass; after the last micro-batch,
        the chunk's gradient buckets are synchronised."""
        if self.par.pipeline.schedule in ZB:
            last: list = []
            for layer in reversed(st.chunks[c]):
                last = [self.after_weight_grad(st.rank, layer, j, last, st.dp_tasks)]
            if st.r == 0 and c == 0:
                self.embedding_grad(st.rank, j, last, st.dp_tasks)
        if j == self.n_mb - 1 and self.par.zero in (0, 1, 2):
            for bi, bucket in enumerate(self.bucket_plan[(st.r, c)]):
                ready = [self.w_task[(k, j)] for k in bucket[0]]
                st.dp_tasks += self.grad_sync(st.rank, bucket, ready, ("g", st.r, c, bi))

    def embedding_forward(self, rank: int, j: int) -> int:
        eb = embedding_block(self.m, self.mb, self.sh, self.cm)
        gather = self.fsdp_gather(rank, "emb", j, "F", ())
        return self.task(
            rank,
            "compute",
            "embedding",
            eb.f,
            [gather],
            phase="forward",
            microbatch=j,
            flops=eb.flops_f,
            mem_alloc=embedding_activation_bytes(self.m, self.mb, self.sh),
            mem_free=self.gathered_bytes("emb"),
        )

    def loss_forward(self, rank: int, j: int, deps: list) -> int:
        """Final norm, output layer and loss; keeps the fp32 logits for the backward."""
        hb = head_block(self.m, self.mb, self.sh, self.cm)
        gather = self.fsdp_gather(rank, "head", j, "F", ())
        return self.task(
            rank,
            "compute",
            "loss",
            hb.f,
            deps + [gather],
            phase="forward",
            microbatch=j,
            flops=hb.flops_f,
            mem_alloc=head_activation_bytes(self.m, self.mb, self.sh),
            mem_free=self.gathered_bytes("head"),
        )

    def loss_backward(self, rank: int, j: int, dp_tasks: list) -> int:
        hb = head_block(self.m, self.mb, self.sh, self.cm)
        gather = self.fsdp_gather(rank, "head", j, "B", ())
        t = self.task(
            rank,
            "compute",
            "loss",
            hb.b + hb.w,
            [gather],
            phase="input_grad",
            microbatch=j,
            flops=hb.flops_b + hb.flops_w,
            mem_free=head_activation_bytes(self.m, self.mb, self.sh),
        )
        self.w_task[("head", j)] = t
        self.fsdp_reduce(rank, "head", j, [t], dp_tasks, self.gathered_bytes("head"))
        return t

    def after_weight_grad(self, rank, layer, j, deps, dp_tasks):
        w = self.layer_weight_grad(rank, layer, j, deps)
        self.w_task[(layer, j)] = w
        unit = self.unit_of[layer]
        if layer == unit[0]:  # the unit's last weight gradient in backward order
            self.fsdp_reduce(rank, unit, j, [w], dp_tasks, self.gathered_bytes(unit))
        return w

    def embedding_grad(self, rank, j, deps, dp_tasks):
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
        self.fsdp_reduce(rank, "emb", j, [t], dp_tasks, self.gathered_bytes("emb"))
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
