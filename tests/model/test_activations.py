"""Activation memory per layer against Korthikanti et al. 2022, formula by formula.

The formulas come from korthikanti_activation_memory_formulas.csv; they assume 16-bit
activations, 1-byte dropout masks, FFN = 4h, GeLU, no flash attention. Our per-tensor count must
reproduce each exactly (relative error below 1e-12: only float rounding differs).
"""

import pytest

from simulator.model.activations import (
    MicroBatch,
    embedding_activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
)
from simulator.model.ops import Sharding
from simulator.scenario.schema import ModelConfig
from tests.conftest import published

FORMULAS = {
    r["configuration"]: r["activation_bytes_per_layer_formula"]
    for r in published("korthikanti_activation_memory_formulas.csv").to_dict("records")
}

# Korthikanti et al.'s Table 3 models: (heads, hidden, layers), sequence 2048.
MODELS = {
    "22B": (64, 6144, 48),
    "175B": (96, 12288, 96),
    "530B": (128, 20480, 105),
    "1T": (160, 25600, 128),
}


def _gpt(a, h, L, v=51200):
    return ModelConfig(
        layers=L,
        hidden=h,
        heads=a,
        ffn=4 * h,
        vocab=v,
        activation="gelu",
        norm="layernorm",
        bias=True,
        tied_embeddings=True,
        position_embedding="learned",
        max_positions=2048,
        dropout=0.1,
    )


def _eval(formula: str, **env) -> float:
    expr = formula.split(" (")[0]  # drop the trailing remark, e.g. "(layer input only; ...)"
    return eval(expr, {"__builtins__": {}}, env)  # noqa: S307 - our own test data


CASES = [
    ("no parallelism", dict(tp=1), "none"),
    ("tensor parallel (baseline)", dict(tp=8), "none"),
    ("tensor + sequence parallel", dict(tp=8, sp=True), "none"),
    ("tensor parallel + selective recompute", dict(tp=8), "selective"),
    ("tensor + sequence parallel + selective recompute", dict(tp=8, sp=True), "selective"),
    ("full activation recompute", dict(tp=1), "full"),
]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize(("config", "shard", "recompute"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("b", [1, 4])
def test_per_layer_formulas(model, config, shard, recompute, b):
    a, h, L = MODELS[model]
    s, t = 2048, shard["tp"]
    m = _gpt(a, h, L)
    ours = layer_activation_bytes(
        m, 0, MicroBatch(b, s, 2.0, flash=False), Sharding(**shard), recompute
    )
    expected = _eval(FORMULAS[config], s=s, b=b, h=h, a=a, t=t)
    assert ours == pytest.approx(expected, rel=1e-12)


def test_full_recompute_with_sequence_parallel_divides_by_t():
    a, h, L = MODELS["22B"]
    m = _gpt(a, h, L)
    ours = layer_activation_bytes(
        m, 0, MicroBatch(1, 2048, flash=False), Sharding(tp=8, sp=True), "full"
    )
    assert ours == pytest.approx(2 * 2048 * h / 8, rel=1e-12)


def test_selective_recompute_savings_quoted_in_section_5():
    # 5as/h = 80 vs 34 for GPT-3 -> selective recompute saves 70% of activation memory.
    a, h, L = MODELS["175B"]
    m = _gpt(a, h, L)
    mb, sh = MicroBatch(1, 2048, flash=False), Sharding(tp=8, sp=True)
    full = layer_activation_bytes(m, 0, mb, sh, "none")
    sel = layer_activation_bytes(m, 0, mb, sh, "selective")
    assert 1 - sel / full == pytest.approx(80 / 114, rel=1e-12)  # printed as "70%"


def test_extra_terms_embedding_and_output():
    # s b h L/t (p/L + delta_{p=1} (4/L)(1 + v/h)) with sequence parallelism (paper sec. 4.3):
    # embedding dropout for p in-flight micro-batches, and with p = 1 the output side too.
    a, h, L = MODELS["22B"]
    v, s, b, t, p = 51200, 2048, 1, 8, 4
    m = _gpt(a, h, L, v)
    mb, sh = MicroBatch(b, s, flash=False), Sharding(tp=t, sp=True)
    first_stage = p * embedding_activation_bytes(m, mb, sh)
    assert first_stage == pytest.approx(s * b * h * L / t * (p / L), rel=1e-12)
    p1 = embedding_activation_bytes(m, mb, sh) + head_activation_bytes(m, mb, sh)
    assert p1 == pytest.approx(s * b * h * L / t * (1 / L + (4 / L) * (1 + v / h)), rel=1e-12)


def test_flash_attention_drops_the_square_term():
    a, h, L = MODELS["22B"]
    m, s, t = _gpt(a, h, L), 2048, 8
    flash = layer_activation_bytes(m, 0, MicroBatch(1, s, flash=True), Sharding(tp=t))
    assert flash == pytest.approx(s * h * (10 + 24 / t), rel=1e-12)


def test_no_dropout_drops_the_masks():
    a, h, L = MODELS["22B"]
    m = _gpt(a, h, L).model_copy(update={"dropout": 0.0})
    s = 2048
    ours = layer_activation_bytes(m, 0, MicroBatch(1, s, flash=False))
    # 34 - 2 (masks) on the linear part; softmax output only (2as^2b) of the 5as^2b.
    assert ours == pytest.approx(s * h * (32 + 2 * a * s / h), rel=1e-12)


def test_gqa_and_swiglu():
    m = ModelConfig(name="llama3-8b")  # h 4096, 32 heads, 8 kv heads, ffn 14336, no dropout
    s, h, f, d = 8192, 4096, 14336, 128
    ours = layer_activation_bytes(m, 0, MicroBatch(1, s))
    # inputs 4 x 2sh; Q 2sh; K, V 2 x 2 s (8 d); attention output 2sh; SwiGLU 3 x 2 s f
    expected = 8 * s * h + 2 * s * h + 4 * s * 8 * d + 2 * s * h + 6 * s * f
    assert ours == pytest.approx(expected, rel=1e-12)


def test_context_parallel_splits_tokens():
    m = ModelConfig(name="llama3-8b")
    whole = layer_activation_bytes(m, 0, MicroBatch(1, 8192))
    assert layer_activation_bytes(m, 0, MicroBatch(1, 8192), Sharding(cp=4)) * 4 == pytest.approx(
        whole, rel=1e-12
    )
