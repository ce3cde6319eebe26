"""Pipeline schedules as pure orders: every pass once, causality, placement, in-flight
activations against the papers' closed forms (now derived from the orders, so these are the
checks), and the registry's validation."""

from collections import Counter

import pytest

from simulator.pipelines import get_schedule, passes, peak_held, schedule_names

CASES = [(2, 4), (4, 8), (4, 12), (8, 16), (8, 24)]


def _m_ok(name, p, m, v):
    return get_schedule(name).check(p, m, v) is None


@pytest.mark.parametrize("name", schedule_names())
@pytest.mark.parametrize("p,m", CASES)
def test_every_pass_once_and_in_causal_order(name, p, m):
    s = get_schedule(name)
    v = 2 if name == "interleaved" else 1
    if not _m_ok(name, p, m, v):
        pytest.skip(s.check(p, m, v))
    chunks = s.chunks_per_stage(v)
    for order in s.orders(p, m, v):
        flat = list(passes(order))
        assert set(Counter(flat).values()) == {1}
        # every micro-batch through every chunk of the stage, but DualPipe's, whose two
        # chunks take half the micro-batches each
        assert len(flat) == 3 * m * chunks // (2 if name == "dualpipe" else 1)
        pos = {x: i for i, x in enumerate(flat)}
        for (kind, c, j), i in pos.items():
            if kind == "B":
                assert pos[("F", c, j)] < i < pos[("W", c, j)]


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (8, 20)])
def test_dualpipe_feeds_half_the_micro_batches_each_way(p, m):
    s = get_schedule("dualpipe")
    for order in s.orders(p, m, 1):
        for kind in "FBW":
            for c in (0, 1):
                js = sorted(j for k, cc, j in passes(order) if k == kind and cc == c)
                assert js == list(range(c * m // 2, (c + 1) * m // 2))


def _in_flight(name, p, m, v=1):
    s = get_schedule(name)
    return [peak_held(o, lambda c: 1.0 / s.chunks_per_stage(v)) for o in s.orders(p, m, v)]


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16), (4, 3)])
def test_in_flight_closed_forms(p, m):
    # Narayanan et al. 2021: GPipe holds m, 1F1B min(p - r, m); Qi et al. 2024 Table 1:
    # ZB-H1 p (the first stage as 1F1B), ZB-H2 2p - 1.
    assert _in_flight("gpipe", p, m) == [m] * p
    assert _in_flight("1f1b", p, m) == [min(p - r, m) for r in range(p)]
    assert _in_flight("zb-h1", p, m)[0] == min(p, m)
    assert _in_flight("zb-h2", p, m) == [min(2 * p - 1, m)] * p


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 16, 3), (8, 16, 2)])
def test_interleaved_in_flight_is_megatrons_warm_up(p, m, v):
    # Megatron-LM's warm-up 2(p - r - 1) + (v - 1)p forwards, then one more before the first
    # backward; counted in chunks, 1/v of the stage's layers each.
    got = _in_flight("interleaved", p, m, v)
    want = [min(2 * (p - r - 1) + (v - 1) * p + 1, m * v) / v for r in range(p)]
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("p", [4, 8, 16])
def test_dualpipe_holds_p_plus_one_chunks(p):
    # DeepSeek-V3 report Table 2: activations PP + 1 (chunks of one stage's depth each).
    s = get_schedule("dualpipe")
    held = [peak_held(o, lambda c: 1.0) for o in s.orders(p, 2 * p, 1)]
    assert max(held) == p + 1


def test_llama3_uneven_interleaved_placement():
    # Llama 3 405B: 126 layers, 16 stages, one layer fewer on the end stages (7 + 14 x 8 + 7),
    # two chunks per stage, the lighter chunk next to the embedding and the output layer.
    s = get_schedule("interleaved")
    layers = s.chunk_layers(126, 16, 2, first=7, last=7)
    assert [len(layers[(0, c)]) for c in (0, 1)] == [3, 4]
    assert [len(layers[(15, c)]) for c in (0, 1)] == [4, 3]
    assert all(len(layers[(r, c)]) == 4 for r in range(1, 15) for c in (0, 1))
    assert layers[(0, 0)] == (0, 1, 2) and layers[(1, 0)] == (3, 4, 5, 6)
    assert layers[(15, 1)] == (123, 124, 125)
    flat = sorted(x for ls in layers.values() for x in ls)
    assert flat == list(range(126))


def test_llama3_one_layer_chunks_leave_the_embedding_and_the_output_alone():
    # Llama 3 paper sec. 3.3.2: one layer fewer on the end stages "means that the first model
    # chunk on the first stage has only the embedding, and the last model chunk on the last
    # stage has only output projection and loss calculation": 16 stages x 8 chunks of one
    # layer, two of them empty, hold the 126 layers.
    layers = get_schedule("interleaved").chunk_layers(126, 16, 8, first=7, last=7)
    assert layers[(0, 0)] == () and layers[(15, 7)] == ()
    others = [ls for key, ls in layers.items() if key not in ((0, 0), (15, 7))]
    assert all(len(ls) == 1 for ls in others) and len(others) == 126
    assert layers[(1, 0)] == (0,) and layers[(0, 1)] == (15,) and layers[(14, 7)] == (125,)
    assert sorted(x for ls in layers.values() for x in ls) == list(range(126))
    # an end stage may leave only its embedding (or output) chunk empty, a middle one none
    with pytest.raises(ValueError, match="stage 0's 6 layers do not fill its 8 chunks"):
        get_schedule("interleaved").chunk_sizes(126, 16, 8, 6, 8)
    with pytest.raises(ValueError, match="stage 1's 7 layers do not fill its 8 chunks"):
        get_schedule("interleaved").chunk_sizes(14 * 7 + 16, 16, 8, 8, 8)


def test_hops_follow_the_placement():
    il, dp = get_schedule("interleaved"), get_schedule("dualpipe")
    assert il.next_hop(4, 2, 3, 0) == (0, 1)  # the last stage hands chunk 0 to stage 0's chunk 1
    assert il.next_hop(4, 2, 3, 1) is None
    assert il.prev_hop(4, 2, 0, 1) == (3, 0)
    assert dp.next_hop(4, 1, 1, 0) == (2, 0) and dp.next_hop(4, 1, 1, 1) == (0, 1)
    assert dp.next_hop(4, 1, 0, 1) is None and dp.prev_hop(4, 1, 3, 1) is None
    assert dp.model_chunk(4, 1, 0, 1) == 3  # rank 0 holds the last chunk of the reverse way


def test_unknown_and_unsuitable_schedules_say_why():
    with pytest.raises(ValueError, match="known: 1f1b, dualpipe"):
        get_schedule("pipedream")
    assert "even number of pipeline stages" in get_schedule("dualpipe").check(3, 12, 1)
    assert ">= 2 pp" in get_schedule("dualpipe").check(4, 6, 1)
    assert "multiple of pp" in get_schedule("interleaved").check(4, 6, 2)
    with pytest.raises(ValueError, match="do not split evenly"):
        get_schedule("1f1b").chunk_sizes(126, 16, 1, 7, 8)
