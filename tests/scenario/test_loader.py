"""Scenario loading: valid files, includes, overrides, and errors that name file:line:col."""

import textwrap

import pytest

from simulator.scenario import ScenarioError, load_scenario, load_scenario_text
from tests.conftest import scenario_files

BASE = """\
name: t
model: llama3-8b
cluster:
  accelerator: H100
  gpus: 16
parallelism:
  tp: 2
  pp: 2
training:
  global_batch: 64
  micro_batch: 2
  seq_len: 4096
"""


def _error(text: str, overrides=()) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario_text(textwrap.dedent(text), "s.yaml", overrides)
    return info.value


def test_valid_scenario_derives_dp():
    s = load_scenario_text(BASE)
    assert s.dp == 4  # 16 GPUs / (tp 2 x pp 2)
    assert s.model.layers == 32 and s.model.n_kv_heads == 8
    assert s.cluster.accelerator.hbm_bytes == 80e9


@pytest.mark.parametrize(
    ("text", "where", "field", "words"),
    [
        # unknown key, reported at its own line and column
        (
            BASE.replace("  pp: 2\n", "  pp: 2\n  ppp: 3\n"),
            "s.yaml:9:3",
            "parallelism.ppp",
            "unknown field",
        ),
        # wrong type
        (BASE.replace("gpus: 16", "gpus: sixteen"), "s.yaml:5:3", "cluster.gpus", "valid integer"),
        # bad unit inside an inline accelerator
        (
            BASE.replace("accelerator: H100", "accelerator: {name: H100, hbm_bytes: 80 GQ}"),
            "s.yaml:4:29",
            "cluster.accelerator.hbm_bytes",
            "not a bytes unit",
        ),
        # degrees whose product is not the GPU count
        (
            BASE.replace("  tp: 2\n", "  tp: 2\n  dp: 3\n"),
            "s.yaml:8:3",
            "parallelism.dp",
            "= 12, but the cluster has 16 GPUs",
        ),
        # heads not divisible by tp (32 heads, tp 3 -> also kv_heads)
        (
            BASE.replace("gpus: 16", "gpus: 12").replace("tp: 2", "tp: 3"),
            "s.yaml:2:1",
            "model.heads",
            "do not split over tp = 3",
        ),
        # layers not divisible by pp x virtual stages
        (
            BASE.replace("pp: 2", "pp: 2\n  pipeline: {schedule: interleaved, virtual_stages: 3}"),
            "s.yaml:8:3",
            "parallelism.pp",
            "32 layers do not split",
        ),
        # micro-batch that does not divide the per-replica batch (64 / dp 4 = 16)
        (
            BASE.replace("micro_batch: 2", "micro_batch: 3"),
            "s.yaml:11:3",
            "training.micro_batch",
            "does not divide the per-replica batch 16",
        ),
        # missing required section
        (
            BASE.replace("training:\n  global_batch: 64\n  micro_batch: 2\n  seq_len: 4096\n", ""),
            "s.yaml:1:1",
            "training",
            "required field is missing",
        ),
        # unknown catalog name
        (
            BASE.replace("model: llama3-8b", "model: llama9"),
            "s.yaml:2:1",
            "model",
            "unknown model 'llama9'",
        ),
        # YAML syntax error
        (BASE.replace("  tp: 2", "  tp: [2"), "s.yaml:8:5", "", "YAML syntax"),
        # a scalar YAML cannot construct (a date that does not exist, a tagged non-number):
        # a ValueError from PyYAML's constructor, which was a traceback (review)
        (
            BASE.replace("global_batch: 64", "global_batch: 2001-13-14"),
            "s.yaml:10:17",
            "training.global_batch",
            "cannot read '2001-13-14' as timestamp",
        ),
        (BASE.replace("  tp: 2", "  tp: !!int two"), "s.yaml:7:7", "parallelism.tp", "as int"),
        (BASE.replace("  tp: 2", "  tp: !!int ''"), "s.yaml:7:7", "parallelism.tp", "as int"),
        (BASE.replace("  pp: 2", "  pp: !!bool x"), "s.yaml:8:7", "parallelism.pp", "as bool"),
        # an escape past U+10FFFF: a ValueError from the pure-Python scanner
        (
            BASE.replace("name: t", 'name: "\\U00110000"'),
            "s.yaml:1:8",
            "",
            "the escape \\U00110000 is past the last Unicode character",
        ),
        # duplicate key
        (
            BASE.replace("  pp: 2\n", "  pp: 2\n  pp: 4\n"),
            "s.yaml:9:3",
            "parallelism.pp",
            "duplicate key",
        ),
    ],
)
def test_errors_name_position_and_field(text, where, field, words):
    err = _error(text)
    first = err.problems[0]
    assert str(first.position) == where
    assert first.field == field
    assert words in first.message
    assert str(err).startswith(f"{where}: ")


def test_kv_heads_not_divisible():
    text = BASE.replace("model: llama3-8b", "model: {name: llama3-8b, kv_heads: 4, heads: 32}")
    err = _error(text.replace("gpus: 16", "gpus: 32").replace("tp: 2", "tp: 8"))
    assert [p.field for p in err.problems] == ["model.kv_heads"]


def test_ep_must_divide_experts():
    text = BASE.replace("model: llama3-8b", "model: mixtral-8x7b").replace(
        "  pp: 2\n", "  pp: 2\n  ep: 3\n"
    )
    err = _error(text)
    assert any(
        p.field == "parallelism.ep" and "does not divide the 8 experts" in p.message
        for p in err.problems
    )


def test_override_is_blamed_on_the_command_line():
    err = _error(BASE, ["parallelism.tp=5"])
    assert str(err.problems[0].position) == "--set parallelism.tp=5"


def test_overrides_apply_and_refine_catalog_names():
    s = load_scenario_text(
        BASE, overrides=["model.layers=4", "training.seq_len=2048", "cluster.accelerator=A100-80GB"]
    )
    assert s.model.layers == 4 and s.model.hidden == 4096  # the rest of llama3-8b stays
    assert s.training.seq_len == 2048
    assert s.cluster.accelerator.name == "A100-SXM4-80GB"


def test_include_topology_and_errors_inside_included_file(tmp_path):
    (tmp_path / "topo.yaml").write_text("kind: fat_tree\nnodes: 2\nnic_bandwidth: 400 Gb\n")
    scen = tmp_path / "s.yaml"
    scen.write_text(BASE.replace("  gpus: 16\n", "  topology: {include: topo.yaml}\n"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(scen)
    problem = info.value.problems[0]
    assert str(problem.position).startswith(f"{tmp_path / 'topo.yaml'}:3:1, included from")
    assert problem.field == "cluster.topology.nic_bandwidth"
    s = load_scenario(scen, ["cluster.topology.nic_bandwidth=400 Gb/s"])
    assert s.cluster.topology.nic_bandwidth == 50e9
    assert s.num_gpus == 16  # 2 nodes x 8 GPUs, from the topology


def test_include_siblings_override(tmp_path):
    s = load_scenario_text(
        BASE.replace(
            "  gpus: 16\n",
            "  topology:\n    include: topologies/dgx-h100-superpod.yaml\n    nodes: 2\n",
        )
    )
    assert s.cluster.topology.nodes == 2 and s.cluster.topology.rail_optimized
    assert s.cluster.topology.nic_bandwidth == 50e9


def test_yaml_1_1_quirks():
    # 1e9 is a string in YAML 1.1; the units parser reads it. "on" keys stay words.
    s = load_scenario_text(
        BASE + "precision: {recipe: zero-mixed}\n", overrides=["parallelism.bucket_size=1e9"]
    )
    assert s.parallelism.bucket_size == 1e9
    err = _error(BASE + "on: 3\n")
    assert err.problems[0].field == "on"


def test_yaml_is_loaded_safely():
    err = _error(BASE.replace("name: t", "name: !!python/object/apply:os.system ['true']"))
    assert "YAML tag" in str(err) and "not allowed" in str(err)


def test_alias_bomb_is_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 7):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    err = _error(bomb)
    assert "nodes" in str(err)


def test_every_shipped_scenario_loads(root):
    files = scenario_files()
    assert len(files) >= 9
    for f in files:
        load_scenario(f)


def test_user_defined_accelerator():
    text = BASE.replace(
        "  accelerator: H100\n",
        "  accelerator:\n"
        "    name: MyChip\n"
        "    peak_flops_per_s: {bf16: 500 TFLOP/s}\n"
        "    hbm_bytes: 96 GiB\n"
        "    hbm_bandwidth_Bps: 3 TB/s\n"
        "    scale_up_bandwidth_Bps: 400 GB/s\n",
    )
    acc = load_scenario_text(text).cluster.accelerator
    assert acc.name == "MyChip" and acc.hbm_bytes == 96 * 2**30
    assert acc.peak("bf16") == 500e12 and acc.hbm_bandwidth_Bps == 3e12
    err = _error(text.replace("    hbm_bytes: 96 GiB\n", ""))
    assert err.problems[0].field == "cluster.accelerator.hbm_bytes"
    assert "required" in err.problems[0].message


def test_an_override_may_include_a_topology_file(root):
    # QA: --set cluster.topology={include: ...} failed with a pydantic discriminator message;
    # comparing two machine files is a natural study
    path = root / "scenarios/examples/ddp-megatron-1.7b.yaml"
    s = load_scenario(
        path, ["cluster.topology={include: topologies/dgx-h100-superpod.yaml, nodes: 4}"]
    )
    assert s.cluster.topology.name == "DGX H100 SuperPOD"
    assert s.cluster.topology.nodes == 4  # the override's own keys win over the file's
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path, ["cluster.topology={include: nowhere.yaml}"])
    assert str(exc.value) == (
        "--set cluster.topology={include: nowhere.yaml}: cluster.topology.include: "
        "included file 'nowhere.yaml' not found"
    )


def test_a_consistency_error_caused_by_an_override_names_the_override(root):
    # QA: --set model.layers=6 was blamed on the file's parallelism.pp line alone
    path = root / "scenarios/examples/pipeline-1f1b.yaml"
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path, ["model.layers=6"])
    text = str(exc.value)
    assert "parallelism.pp" in text and text.endswith("(with --set model.layers=6)")
    # an error at the override itself is not annotated twice
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path, ["parallelism.tp=two"])
    assert str(exc.value).startswith("--set parallelism.tp=two: parallelism.tp:")
    assert "(with" not in str(exc.value)


def test_an_include_is_found_in_the_folders_above_the_scenario(tmp_path, monkeypatch):
    # a project laid out as this repository is (topologies/ at its root, scenarios two levels
    # down), run from elsewhere and with the package installed anywhere: the include resolves
    # against the scenario's folder and the folders above it
    project = tmp_path / "project"
    (project / "topologies").mkdir(parents=True)
    (project / "topologies" / "my-node.yaml").write_text(
        "kind: nvswitch\nnode: {gpus: 8, nvlink_bandwidth: 450 GB/s}\n"
    )
    scenario = project / "scenarios" / "examples" / "mine.yaml"
    scenario.parent.mkdir(parents=True)
    scenario.write_text(
        "model: llama3-8b\n"
        "cluster: {accelerator: H100, topology: {include: topologies/my-node.yaml}}\n"
        "training: {global_batch: 8, micro_batch: 1, seq_len: 1024}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_scenario(scenario)
    assert s.cluster.topology.node.gpus == 8 and s.num_gpus == 8
