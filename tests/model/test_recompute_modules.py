"""Per-module recompute (Megatron-core's ``--recompute-modules``): the policy's form, what each
module stops keeping (the ledger), and the forward it runs again (the step)."""

from __future__ import annotations

import pytest

from simulator import api
from simulator.model.activations import MicroBatch, layer_activation_bytes
from simulator.model.ops import Sharding
from simulator.scenario import ScenarioError, load_scenario
from simulator.scenario.recompute import MODULES, policy_text

DENSE = "scenarios/examples/llama3-8b-fsdp.yaml"
MOE = "scenarios/examples/deepseek-v3-like.yaml"


def test_the_policy_is_written_in_one_canonical_form():
    s = load_scenario(DENSE, ["parallelism.recompute={modules: [mlp, layernorm]}"])
    assert s.parallelism.recompute == "modules:layernorm,mlp"  # in MODULES' order
    again = load_scenario(DENSE, [f"parallelism.recompute={s.parallelism.recompute}"])
    assert again.parallelism.recompute == s.parallelism.recompute  # a dump reads back
    assert policy_text(reversed(MODULES)) == "modules:" + ",".join(MODULES)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{modules: [attn]}", "unknown recompute module(s) attn"),
        ("{modules: []}", "needs at least one module"),
        ("{module: [mlp]}", "give none, selective, full or {modules"),
        ("partial", "give none, selective, full or {modules"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(value, says):
    with pytest.raises(ScenarioError) as err:
        load_scenario(DENSE, [f"parallelism.recompute={value}"])
    assert "parallelism.recompute" in str(err.value) and says in str(err.value)


def _bytes(path, policy, layer=0):
    s = load_scenario(path)
    mb = MicroBatch(1, 4096, 2.0, True)
    return layer_activation_bytes(s.model, layer, mb, Sharding(tp=2, sp=True), policy), s.model


def test_each_module_drops_what_it_keeps_but_its_input():
    none, m = _bytes(DENSE, "none")
    tokens, e = 4096, 2.0
    # the attention core keeps nothing beyond its inputs with flash: as selective
    assert _bytes(DENSE, "modules:core_attn")[0] == _bytes(DENSE, "selective")[0] == none
    # the MLP's hidden tensors (fused SwiGLU: 3 ffn-sized, split by TP 2)
    mlp = 3 * e * tokens * m.ffn / 2
    assert _bytes(DENSE, "modules:mlp")[0] == pytest.approx(none - mlp, rel=1e-12)
    # the two norms' outputs (the QKV and MLP inputs), split by sequence parallelism
    norms = 2 * e * tokens / 2 * m.hidden
    assert _bytes(DENSE, "modules:layernorm")[0] == pytest.approx(none - norms, rel=1e-12)
    both = _bytes(DENSE, "modules:layernorm,mlp")[0]
    assert both == pytest.approx(none - norms - mlp, rel=1e-12)


def test_more_modules_never_keep_more_and_moe_keeps_only_its_input():
    moe_layer = 5  # past DeepSeek-V3's dense first layers
    none, m = _bytes(MOE, "none", moe_layer)
    assert m.is_moe_layer(moe_layer)
    chosen: list[str] = []
    last = none
    for module in MODULES:
        chosen.append(module)
        kept, _ = _bytes(MOE, policy_text(chosen), moe_layer)
        assert kept <= last + 1e-6
        last = kept
    full, _ = _bytes(MOE, "full", moe_layer)
    assert full < last  # the layer's input alone is less still
    # moe: the MoE block's tensors all go; routed experts' act output is one ffn-sized share
    assert _bytes(MOE, "modules:moe", moe_layer)[0] < _bytes(MOE, "modules:moe_act", moe_layer)[0]


def test_the_step_runs_the_modules_forward_again():
    selective = api.run(api.load(DENSE, ["parallelism.recompute=selective"]))
    core = api.run(api.load(DENSE, ["parallelism.recompute={modules: [core_attn]}"]))
    # the attention core again either way: the same step to the bit
    assert core.metrics.step_time_s == selective.metrics.step_time_s
    none = api.run(api.load(DENSE))
    mlp = api.run(api.load(DENSE, ["parallelism.recompute={modules: [mlp]}"]))
    tasks = mlp.trace[mlp.trace["name"] == "modules_recompute"]
    assert len(tasks) > 0 and (tasks["phase"] == "recompute").all()
    # recomputing the MLP costs its forward again: HFU up, MFU down, less memory held
    assert mlp.metrics.hfu > none.metrics.hfu and mlp.metrics.mfu < none.metrics.mfu
    assert mlp.metrics.peak_memory_bytes < none.metrics.peak_memory_bytes


def test_a_recipe_fits_only_with_its_modules_recomputed():
    # DeepSeek-V3-like on its example's layout: without recompute it needs far more than
    # 80 GB; recomputing MLA's up-projections, the dense MLPs and the MoE blocks (a recipe's
    # --recompute-modules mla_up_proj mlp moe) fits, faster than recomputing every layer
    plain = api.run(api.load(MOE, ["parallelism.recompute=none"]))
    modules = api.run(api.load(MOE, ["parallelism.recompute={modules: [mla_up_proj, mlp, moe]}"]))
    full = api.run(api.load(MOE, ["parallelism.recompute=full"]))
    assert plain.metrics.oom and not modules.metrics.oom and not full.metrics.oom
    assert modules.metrics.step_time_s < full.metrics.step_time_s
