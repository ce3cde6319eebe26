"""Bad and extreme input: each reproducer of the bad-input reports (F01-F20) is a test here.

Every case must end in a ScenarioError naming the field and a position, never a traceback,
a hang or a silently different scenario.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from simulator.scenario import ScenarioError, load_scenario, load_scenario_text, yaml_source

ROOT = Path(__file__).resolve().parents[2]
MIXTRAL = ROOT / "scenarios/examples/mixtral-8x22b.yaml"

BASE = """\
name: t
model: llama3-8b
cluster: {accelerator: H100, gpus: 8}
parallelism: {tp: 2, pp: 2, zero: 1}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
"""


def _error(text: str, overrides=(), source="s.yaml") -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(textwrap.dedent(text), source, overrides)
    return info.value


def _fields(err: ScenarioError) -> list[str]:
    return [p.field for p in err.problems]


# ----------------------------------------------------------------------------- crashes


def test_ep_must_divide_dp_x_cp():
    # F: 48 GPUs, tp 4 x pp 4 -> dp 3; ep 4 passed the old check (dp x cp x tp =
    # 12 is a multiple of ep x expert_tp = 4) and the rank grid died with a KeyError.
    with pytest.raises(ScenarioError) as info:
        load_scenario(
            MIXTRAL,
            [
                "cluster.topology.nodes=6",
                "training.global_batch=96",
                "parallelism.ep=4",
            ],
        )
    [problem] = [p for p in info.value.problems if p.field == "parallelism.ep"]
    assert "dp x cp = 3 x 1 = 3" in problem.message


def test_expert_tp_other_than_tp_folds_or_is_refused_with_the_reason():
    # 128 GPUs, tp 4 x pp 4 -> dp 8: a stage's 32 ranks fold expert TP x EP x expert DP
    load_scenario(MIXTRAL, ["parallelism.expert_tp=1"])  # 1 x 8 x 4
    load_scenario(MIXTRAL, ["parallelism.expert_tp=2"])  # 2 x 8 x 2
    with pytest.raises(ScenarioError) as info:
        load_scenario(MIXTRAL, ["parallelism.expert_tp=8"])  # 8 x 8 = 64 > 32
    [problem] = info.value.problems
    assert problem.field == "parallelism.expert_tp"
    assert "expert_tp x ep = 8 x 8 must divide" in problem.message
    assert "4 x 1 x 8 = 32 ranks" in problem.message
    assert str(problem.position) == "--set parallelism.expert_tp=8"
    with pytest.raises(ScenarioError) as info:
        load_scenario(MIXTRAL, ["parallelism.expert_tp=1", "parallelism.sequence_parallel=false"])
    [problem] = info.value.problems
    assert problem.field == "parallelism.expert_tp"
    assert "needs sequence_parallel: true" in problem.message


def test_accelerator_without_bf16_is_refused_at_load():
    # F02: an override of peak_flops_per_s replaces the whole table, dropping bf16.
    err = _error(
        BASE.replace(
            "accelerator: H100", "accelerator: {name: H100, peak_flops_per_s: {fp32: 60 TFLOP/s}}"
        )
    )
    assert _fields(err) == ["cluster.accelerator.peak_flops_per_s"]
    assert "bf16" in err.problems[0].message
    assert str(err.problems[0].position) == "s.yaml:3:37"


def test_compute_dtype_missing_from_the_accelerator_is_refused():
    # TPU v4 lists bf16 and int8 only: an fp32 run must not silently use the bf16 peak.
    err = _error(BASE.replace("H100", "v4") + "precision: {compute_dtype: fp32}\n")
    assert _fields(err) == ["precision.compute_dtype"]
    assert "TPU-v4" in err.problems[0].message and "bf16, int8" in err.problems[0].message
    # fp8 on an A100 falls back to bf16, as documented in Accelerator.peak
    load_scenario_text(BASE.replace("H100", "A100") + "precision: {compute_dtype: fp8}\n")


@pytest.mark.parametrize("depth", [70, 400, 600, 5000])
def test_deep_nesting_is_refused_with_a_position(depth):
    # F09: 400 levels loaded, then `check` died printing them; 600+ hit Python's recursion.
    text = BASE + "name2: " + "{a: " * depth + "1" + "}" * depth + "\n"
    err = _error(text)
    [problem] = err.problems
    assert "nested more than" in problem.message
    assert problem.position.source == "s.yaml" and problem.position.line == 6


def test_block_nesting_is_refused_too():
    text = BASE + "".join("  " * i + "a:\n" for i in range(100)) + "  " * 100 + "b: 1\n"
    err = _error(text)
    assert "nested more than 64 levels" in str(err)


def test_precision_grads_zero_is_refused():
    # F20: `run` divided the bucket size by the gradient bytes.
    err = _error(BASE + "precision: {params: 2, grads: 0, optimizer: 0}\n")
    assert _fields(err) == ["precision.grads"]
    assert str(err.problems[0].position) == "s.yaml:6:24"


# ----------------------------------------------------------------------------- hangs


@pytest.mark.parametrize("size", ["25", "0", "100 kB"])
def test_tiny_gradient_buckets_are_refused(size):
    # F01: 25 (bytes) made a bucket per ~6 parameters and never finished.
    err = _error(BASE.replace("zero: 1", f"zero: 0, bucket_size: {size}"))
    assert _fields(err) == ["parallelism.bucket_size"]
    assert "1 MB" in err.problems[0].message


def test_one_megabyte_bucket_is_accepted():
    s = load_scenario_text(BASE.replace("zero: 1", "zero: 0, bucket_size: 1 MB"))
    assert s.parallelism.bucket_size == 1e6


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("cluster.topology.node.nvlink_bandwidth", "1e-300 B/s"),
        ("cluster.topology.node.nvlink_latency", "1e300 s"),
        ("cluster.topology.node.nvlink_efficiency", "1e-300"),
    ],
)
def test_absurd_link_figures_are_refused(where, value):
    # F07: 1e-300 B/s overflowed simulated time to inf and the event loop spun forever.
    text = BASE.replace("gpus: 8", "topology: {kind: nvswitch}")
    err = _error(text, [f"{where}={value}"])
    assert _fields(err) == [where]
    assert str(err.problems[0].position) == f"--set {where}={value}"


def test_absurd_peak_is_refused():
    err = _error(
        BASE.replace(
            "accelerator: H100", "accelerator: {name: H100, peak_flops_per_s: {bf16: 1e-300}}"
        )
    )
    assert _fields(err) == ["cluster.accelerator.peak_flops_per_s.bf16"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("cluster.topology={kind: fat_tree, nodes: 1000000}", "cluster.topology"),
        ("cluster.topology={kind: torus, shape: [128, 128, 128]}", "cluster.topology"),
        ("cluster.gpus=1000000", "cluster.gpus"),
    ],
)
def test_clusters_above_the_supported_size_are_refused(override, field):
    # F06: a million nodes built an 8M-GPU graph (10 GB after 2 minutes).
    err = _error(BASE.replace(", gpus: 8", ""), [override])
    assert field in _fields(err)
    assert "131,072" in str(err)


def test_too_many_micro_batches_are_refused_up_front():
    # F08: 65,536 micro-batches through 16 stages (~17M tasks) never finished.
    text = (
        BASE.replace("gpus: 8", "gpus: 16")
        .replace("tp: 2, pp: 2, zero: 1", "tp: 1, pp: 16")
        .replace("global_batch: 16", "global_batch: 65536")
        .replace("2048", "4096")
    )
    err = _error(text)
    [problem] = err.problems
    assert problem.field == "training.global_batch"
    assert "65,536 micro-batches x 32 layers" in problem.message
    assert "262,144" in problem.message


def test_a_huge_file_is_refused_before_parsing(tmp_path):
    # F17: a 50 MB file took 419 s and 3.5 GB before the node cap answered.
    big = tmp_path / "big.yaml"
    big.write_text("name: " + "x" * (yaml_source.MAX_FILE_BYTES + 1) + "\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(big)
    assert "larger than" in str(info.value) and str(big) in str(info.value)


def test_many_keys_are_refused_while_parsing():
    # 2.5M keys: the node count is checked on parse events, before a node tree is composed.
    text = "failures:\n" + "".join(f"  k{i}: {i}\n" for i in range(yaml_source.MAX_NODES + 10))
    err = _error(text)
    [problem] = err.problems
    assert "more than 200000 nodes" in problem.message
    assert problem.position.line > 100_000  # where the cap was crossed


# ----------------------------------------------------------------------------- silent


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("llama3-8b", "{name: llama3-8b, layers: true}", "model.layers"),
        ("gpus: 8", "gpus: true", "cluster.gpus"),
        ("zero: 1", "zero: true", "parallelism.zero"),
        ("tp: 2", "tp: true", "parallelism.tp"),
        ("seq_len: 2048", "seq_len: true", "training.seq_len"),
        ("micro_batch: 1", "micro_batch: 1.5", "training.micro_batch"),
        ("zero: 1", "zero: 1, sequence_parallel: 1", "parallelism.sequence_parallel"),
    ],
)
def test_booleans_are_not_counts(old, new, field):
    # F12: `zero: true` silently became ZeRO-1, `gpus: true` one GPU.
    err = _error(BASE.replace(old, new))
    assert field in _fields(err)


def test_hidden_must_split_into_heads_without_head_dim():
    # F13: head_dim silently became 1000 // 3 = 333.
    model = "{name: odd, layers: 2, hidden: 1000, heads: 3, ffn: 4096, vocab: 32000}"
    text = BASE.replace("llama3-8b", model).replace("tp: 2, pp: 2", "tp: 1, pp: 1")
    err = _error(text)
    assert _fields(err) == ["model.hidden"]
    assert str(err.problems[0].position) == "s.yaml:2:31"  # the hidden key
    assert "hidden 1000 does not split into 3 heads" in err.problems[0].message
    ok = load_scenario_text(text.replace("heads: 3", "heads: 3, head_dim: 320"))
    assert ok.model.d_head == 320


@pytest.mark.parametrize("over", ["[1, 7]", "[1, 1, 1, 1, 1]"])
def test_oversubscription_longer_than_levels_is_refused(over):
    # F15: the 7 was silently ignored on a 2-level tree.
    text = BASE.replace(
        "gpus: 8", f"topology: {{kind: fat_tree, nodes: 4, oversubscription: {over}}}"
    ).replace("gpus: 8", "")
    err = _error(text.replace("global_batch: 16", "global_batch: 32"))
    assert _fields(err) == ["cluster.topology.oversubscription"]
    assert "levels = 2" in err.problems[0].message


def test_yaml_merge_keys_beside_the_merge_win():
    # F11: YAML 1.1 merge: keys written beside `<<:` override the merged ones.
    text = BASE.replace(
        "parallelism: {tp: 2, pp: 2, zero: 1}",
        "parallelism:\n  <<: &p {tp: 2, pp: 2, zero: 1}\n  tp: 4\n  pp: 1",
    )
    s = load_scenario_text(text)
    assert (s.parallelism.tp, s.parallelism.pp, s.parallelism.zero) == (4, 1, 1)
    twice = _error(text.replace("  pp: 1", "  pp: 1\n  tp: 2"))
    assert _fields(twice) == ["parallelism.tp"] and "duplicate key" in str(twice)


def test_merged_value_position_is_the_explicit_key():
    text = BASE.replace(
        "parallelism: {tp: 2, pp: 2, zero: 1}",
        "parallelism:\n  <<: {tp: 2, pp: 2, zero: 1}\n  pp: 3",
    )
    err = _error(text)
    [problem] = [p for p in err.problems if p.field == "parallelism.pp"]
    assert str(problem.position) == "s.yaml:6:3"


def test_error_inside_an_included_file_names_the_include(tmp_path):
    # F18: only "/etc/passwd:1:1: an included file must hold a mapping" was printed.
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    scen = tmp_path / "s.yaml"
    scen.write_text(BASE.replace("gpus: 8", "gpus: 8, topology: {include: list.yaml}"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(scen)
    text = str(info.value)
    assert f"{tmp_path / 'list.yaml'}:1:1" in text
    assert f"included from {scen}:3:50 (cluster.topology.include)" in text


def test_validation_error_inside_an_included_file_names_the_include(tmp_path):
    (tmp_path / "topo.yaml").write_text("kind: fat_tree\nnodes: 2\nnic_bandwidth: 400 Gb\n")
    scen = tmp_path / "s.yaml"
    scen.write_text(BASE.replace("gpus: 8", "topology: {include: topo.yaml}"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(scen)
    [problem] = info.value.problems
    assert problem.field == "cluster.topology.nic_bandwidth"
    assert str(problem.position).startswith(f"{tmp_path / 'topo.yaml'}:3:1")
    assert f"included from {scen}:3:" in str(problem)


def test_nested_include_error_is_a_chain(tmp_path):
    (tmp_path / "inner.yaml").write_text("kind: fat_tree\nnodes: [2\n")
    (tmp_path / "outer.yaml").write_text("include: inner.yaml\n")
    scen = tmp_path / "s.yaml"
    scen.write_text(BASE.replace("gpus: 8", "topology: {include: outer.yaml}"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(scen)
    text = str(info.value)
    assert "inner.yaml:3:1" in text or "inner.yaml:2:" in text
    assert f"included from {tmp_path / 'outer.yaml'}:1:1 (include)" in text
    assert f"included from {scen}:3:" in text


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("nope.x=1", "nope"),
        ("parallelism.tp.x=1", "parallelism.tp"),
        ("a.b.c=1", "a"),
        ("parallelism.order.0=cp", "parallelism.order"),
        (".tp=4", ""),
        ("parallelism..tp=4", ""),
    ],
)
def test_override_of_a_new_path_is_blamed_on_the_override(override, field):
    # F10: these were blamed on the scenario file's lines.
    err = _error(BASE, [override])
    [problem] = err.problems
    assert str(problem.position) == f"--set {override}"
    assert problem.field == field


def test_override_tolerates_spaces_around_segments():
    s = load_scenario_text(
        BASE.replace("gpus: 8", "gpus: 16"), "s.yaml", [" parallelism . tp = 4 "]
    )
    assert s.parallelism.tp == 4


def test_override_of_a_list_element_in_the_file():
    text = BASE.replace("zero: 1}", "zero: 1, order: [tp, cp, pp, dp]}")
    s = load_scenario_text(text, "s.yaml", ["parallelism.order.0=cp", "parallelism.order.1=tp"])
    assert s.parallelism.order == ["cp", "tp", "pp", "dp"]


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("model: llama3-8b\nname: a\x07b\n", "s.yaml:2:8", "U+0007"),  # control character
        ("a: &x [*x]\n", "s.yaml:1:4", "nested more than 64"),  # recursive alias
        ("a: &a {b: *a}\n", "s.yaml:1:4", "nested more than 64"),
    ],
)
def test_reader_and_alias_errors_have_a_line(text, where, words):
    # F18's relatives: these said "position 16" or "YAML nested too deeply" without a line
    err = _error(text)
    [problem] = err.problems
    assert str(problem.position) == where and words in problem.message
