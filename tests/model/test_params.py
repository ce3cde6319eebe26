"""Parameter counts against published model sizes."""

import pytest

from simulator.model.params import count_params, layer_params_per_rank
from simulator.scenario.schema import ModelConfig
from tests.conftest import published


@pytest.mark.parametrize(
    ("name", "total", "active", "tol"),
    [
        # Released checkpoints' exact counts (Hugging Face safetensors metadata): exact.
        ("llama3-8b", 8_030_261_248, None, 0),
        ("llama3-70b", 70_553_706_496, None, 0),
        ("llama3-405b", 405_853_388_800, None, 0),
        ("mixtral-8x7b", 46_702_792_704, 12_879_925_248, 0),
        # GPT-3's "175B" is a rounded name; Brown et al.'s architecture gives 174.6B.
        ("gpt3-175b", 175e9, None, 0.005),
        # Mixtral 8x22B: "141B total, 39B active" (Mistral's announcement), rounded.
        ("mixtral-8x22b", 141e9, 39e9, 0.005),
        # DeepSeek-V3: 671B total and 37B activated (report sec. 4.2), rounded to 1B; the
        # 14B MTP module is not counted. Active count includes the embeddings (0.93B), which
        # DeepSeek's 37B seems to round away: 2% covers it.
        ("deepseek-v3", 671e9, 37e9, 0.02),
    ],
)
def test_published_sizes(name, total, active, tol):
    c = count_params(ModelConfig(name=name))
    assert abs(c.total - total) <= tol * total
    if active is not None:
        assert abs(c.active - active) <= tol * active


@pytest.mark.parametrize(
    "row",
    published("megatron_sc21_table1_rows1-5.csv").to_dict("records"),
    ids=lambda r: f"{r['params_billion']}B",
)
def test_megatron_table1_sizes(row):
    m = ModelConfig(
        layers=row["num_layers"],
        hidden=row["hidden_size"],
        heads=row["attention_heads"],
        ffn=4 * row["hidden_size"],
        vocab=row["vocab_size"],
        activation="gelu",
        norm="layernorm",
        bias=True,
        tied_embeddings=True,
        position_embedding="learned",
        max_positions=row["seq_len_tokens"],
    )
    p = count_params(m).total
    # The table prints one decimal: our count must round to it (half a unit, 0.05B).
    assert abs(p / 1e9 - row["params_billion"]) <= 0.05
    # And Narayanan et al.'s own formula, which omits only the final LayerNorm's 2h:
    h, L, V, s = m.hidden, m.layers, m.vocab, m.max_positions
    formula = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
    assert p - formula == pytest.approx(2 * h, abs=0.01)  # float rounding of the formula


def test_tensor_parallel_shards_sum_to_the_layer():
    m = ModelConfig(name="llama3-70b")
    full_dense, _ = layer_params_per_rank(m, 0, tp=1)
    dense8, _ = layer_params_per_rank(m, 0, tp=8)
    norms = 2 * m.hidden  # replicated on every TP rank
    assert dense8 * 8 - 7 * norms == pytest.approx(full_dense, rel=0, abs=0)


def test_expert_parallel_spreads_experts():
    m = ModelConfig(name="mixtral-8x7b")
    _, e1 = layer_params_per_rank(m, 0, tp=1, ep=1)
    _, e8 = layer_params_per_rank(m, 0, tp=1, ep=8)
    assert e1 == 8 * e8 == 8 * 3 * 4096 * 14336
