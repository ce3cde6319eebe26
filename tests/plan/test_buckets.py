"""Gradient buckets against their definition (PyTorch DDP's: a bucket closes when it holds
``cap`` parameters' gradients, in backward order, a layer larger than a bucket spanning
several)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.plan.buckets import gradient_buckets


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(
        st.tuples(st.floats(0, 1e9), st.floats(0, 1e9)).filter(lambda t: sum(t) > 0),
        min_size=1,
        max_size=12,
    ),
    cap=st.floats(1e6, 3e8),  # at most 2e3 buckets per key, so a run stays small
)
def test_buckets_fill_to_the_cap_in_order_and_keep_every_parameter(sizes, cap):
    keys = list(range(len(sizes)))
    buckets = gradient_buckets(keys, cap, lambda k: sizes[k])
    # Every parameter lands in a bucket once: totals to float rounding over at most
    # 24e3 buckets (1e-9 relative).
    for i, total in ((0, sum(d for d, _ in sizes)), (1, sum(e for _, e in sizes))):
        got = sum(b.dense_params if i == 0 else b.expert_params for b in buckets)
        assert abs(got - total) <= 1e-9 * max(total, 1.0)
    # Every bucket but the last is full; none is over the cap.
    for b in buckets[:-1]:
        assert abs(b.dense_params + b.expert_params - cap) <= 1e-9 * cap
    assert buckets[-1].dense_params + buckets[-1].expert_params <= cap * (1 + 1e-9)
    # Keys appear in backward order, a key's buckets consecutive.
    seen = [k for b in buckets for k in b.keys]
    assert seen == sorted(seen)
    assert [k for i, k in enumerate(seen) if i == 0 or seen[i - 1] != k] == keys


def test_a_layer_of_two_and_a_half_buckets():
    buckets = gradient_buckets(["a", "b"], 10.0, {"a": (20.0, 5.0), "b": (5.0, 0.0)}.get)
    assert [b.keys for b in buckets] == [("a",), ("a",), ("a", "b")]
    assert [(b.dense_params, b.expert_params) for b in buckets] == [
        (8.0, 2.0),
        (8.0, 2.0),
        (4.0 + 5.0, 1.0),
    ]
