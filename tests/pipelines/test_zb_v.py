"""ZB-V (Qi et al. 2024, sec. 6) as PyTorch's ScheduleZBVZeroBubble orders it: the V
placement, the authors' layer padding, the paper's memory and zero-bubble claims."""

import pytest

from simulator import api
from simulator.pipelines import get_schedule, peak_held
from simulator.scenario import load_scenario_text

ZBV = get_schedule("zb-v")


def _replay(orders, f=1.0, b=1.0, w=1.0):
    """Longest stage span when each stage runs its order as early as the V's dependencies
    allow: chunk 0 flows down the stages and turns on the last into chunk 1, which flows back
    up to the loss on stage 0; gradients the other way; W after its own B. Fails on an order
    that deadlocks."""
    p = len(orders)
    cost = {"F": f, "B": b, "W": w}

    def source(kind, c, r, i):
        if kind == "W":
            return ("B", c, r, i)
        if kind == "F":
            if c == 0:
                return ("F", 0, r - 1, i) if r > 0 else None
            return ("F", 1, r + 1, i) if r < p - 1 else ("F", 0, r, i)
        if c == 1:
            return ("B", 1, r - 1, i) if r > 0 else ("F", 1, 0, i)
        return ("B", 0, r + 1, i) if r < p - 1 else ("B", 1, r, i)

    end, at, free, first = {}, [0] * p, [0.0] * p, [None] * p
    while any(at[r] < len(orders[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while at[r] < len(orders[r]):
                kind, c, i = orders[r][at[r]]
                src = source(kind, c, r, i)
                if src is not None and src not in end:
                    break
                start = max(free[r], end[src] if src is not None else 0.0)
                first[r] = start if first[r] is None else first[r]
                end[(kind, c, r, i)] = free[r] = start + cost[kind]
                at[r] += 1
                moved = True
        assert moved, "the orders deadlock"
    return max(free[r] - first[r] for r in range(p))


@pytest.mark.parametrize("p", [2, 4, 8])
def test_v_placement_and_its_turn(p):
    chunks = [ZBV.model_chunk(p, 1, r, c) for r in range(p) for c in (0, 1)]
    assert sorted(chunks) == list(range(2 * p))
    assert ZBV.model_chunk(p, 1, 0, 0) == 0 and ZBV.model_chunk(p, 1, 0, 1) == 2 * p - 1
    # the activation runs down chunk 0, turns on the last stage, comes back up chunk 1
    hop, seen = (0, 0), []
    while hop is not None:
        seen.append(ZBV.model_chunk(p, 1, *hop))
        nxt = ZBV.next_hop(p, 1, *hop)
        if nxt is not None:
            assert ZBV.prev_hop(p, 1, *nxt) == hop
        hop = nxt
    assert seen == list(range(2 * p))
    assert ZBV.next_hop(p, 1, p - 1, 0) == (p - 1, 1)


def test_layers_padded_as_the_authors_do():
    # their get_offset: 2 x pp x k - 2 layers leave the first and last model chunks a layer
    # lighter (both on stage 0 in a V)
    assert ZBV.chunk_sizes(30, 16, 1, None, None) == [0, *[1] * 30, 0]
    assert ZBV.chunk_sizes(46, 12, 1, None, None) == [1, *[2] * 22, 1]
    assert ZBV.chunk_sizes(32, 4, 1, None, None) == [4] * 8
    assert ZBV.chunk_sizes(20, 4, 1, 1, 1) == [1, *[3] * 6, 1]
    with pytest.raises(ValueError, match="do not split"):
        ZBV.chunk_sizes(29, 4, 1, None, None)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 24)])
def test_memory_and_bubble_as_the_paper_claims(p, m):
    orders = ZBV.orders(p, m, 1)
    # Qi et al. sec. 6: ZB-V's peak activation memory is p micro-batches of a stage's
    # layers on every stage (1F1B's first stage), each chunk half a stage
    assert [peak_held(o, lambda c: 0.5) for o in orders] == [float(p)] * p
    # zero bubble with equal passes: each stage's span is its 6 m passes of one unit
    assert _replay(orders) == 6 * m
    # a shorter W leaves (p - 1)(T_F + T_B - 2 T_W), as ZB-H2's formula
    assert _replay(orders, w=0.5) == pytest.approx(5 * m + (p - 1) * 1.0)


def _node(layers):
    return load_scenario_text(f"""
model: {{name: megatron-7.5b, layers: {layers}}}
cluster: {{accelerator: H100-SXM, topology: {{include: topologies/dgx-h100.yaml}}}}
parallelism: {{pp: 4, tp: 2, pipeline: {{schedule: zb-v}}}}
training: {{global_batch: 16, micro_batch: 1, seq_len: 2048}}
""")


def test_a_v_step_on_one_node():
    plan = api.build_plan(_node(30))
    assert [len(st.layers) for st in plan.stages] == [6, 8, 8, 8]  # 30 = 2 x 4 x 4 - 2
    assert plan.stages[0].is_first and plan.stages[0].is_last
    s = _node(32)
    result = api.run(s)
    trace = result.trace
    turns = trace[trace["name"] == "pp_turn"]
    # the turn is local to the last stage's rank: one for each micro-batch's activation and
    # one for its gradient, no pipeline send
    assert set(turns["rank"]) == {max(trace["rank"])} and len(turns) == 2 * 16
    sends = trace[trace["stream"].isin(["pp_fwd", "pp_bwd"])]
    assert len(sends) == 2 * 16 * 2 * 3  # both ways, both chunks, over the 3 stage boundaries
    other = {
        k: api.run(s.model_copy(update={"parallelism": _schedule(s, k)}))
        for k in ("zb-h1", "zb-h2")
    }
    step = {k: r.summary["step_time_s"] for k, r in other.items()}
    assert result.summary["step_time_s"] < min(step.values())
    # ZB-H2 buys its bubble with 2p - 1 micro-batches in flight; ZB-V holds p (its stage 0
    # also carries both the embedding and the output layer, 1F1B's two ends)
    assert result.summary["peak_memory_bytes"] < other["zb-h2"].summary["peak_memory_bytes"]


def _schedule(s, name):
    par = s.parallelism
    return par.model_copy(update={"pipeline": par.pipeline.model_copy(update={"schedule": name})})
