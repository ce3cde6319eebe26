"""Fuzz the scenario loader: it accepts the input or raises ScenarioError, nothing else.

An accepted scenario must also print (``trainsim check`` dumps it as JSON) and cost its memory
ledger; a refused one must name a line of the input. A few hundred examples run by default;
the slow suite runs 10,000. The seeds include every input that once crashed, hung
or was silently accepted (the reproducers), as literal examples and as mutation seeds.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator import api
from simulator.scenario import Scenario, ScenarioError, load_scenario_text, yaml_source
from tests.properties.mutation import mutate

ROOT = Path(__file__).resolve().parents[2]
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _dump(data) -> str:
    """A drawn document as YAML text; libyaml's emitter where PyYAML has it (the pure-Python
    one took a quarter of the fuzz's time)."""
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False)


SHIPPED = [
    yaml.safe_load(p.read_text())
    for p in sorted((ROOT / "scenarios").rglob("*.yaml"))
    if "published" not in p.parts
]

_BASE = """\
model: llama3-8b
cluster: {accelerator: H100, gpus: 8}
parallelism: {tp: 2, pp: 2, zero: 1}
training: {global_batch: 16, micro_batch: 1, seq_len: 2048}
"""
# Inputs that once crashed, hung or were silently accepted (F01-F20), as scenario texts.
REPRODUCERS = [
    _BASE.replace("zero: 1", "zero: 0, bucket_size: 25"),  # F01
    _BASE.replace("zero: 1", "zero: 0, bucket_size: 0"),  # F01b
    _BASE.replace(  # F02
        "accelerator: H100", "accelerator: {name: H100, peak_flops_per_s: {fp32: 60 TFLOP/s}}"
    ),
    _BASE.replace(  # F07
        "gpus: 8", "topology: {kind: nvswitch, node: {gpus: 8, nvlink_bandwidth: 1e-300 B/s}}"
    ),
    _BASE.replace("tp: 2, pp: 2, zero: 1", "tp: 1, pp: 16")
    .replace(  # F08
        "global_batch: 16", "global_batch: 65536"
    )
    .replace("gpus: 8", "gpus: 16"),
    _BASE + "failures: " + "{a: " * 400 + "1" + "}" * 400 + "\n",  # F09
    _BASE.replace(  # F11
        "parallelism: {tp: 2, pp: 2, zero: 1}",
        "parallelism:\n  <<: &p {tp: 2, pp: 2, zero: 1}\n  tp: 4\n  pp: 1",
    ),
    "model: {name: llama3-8b, layers: true}\ncluster: {accelerator: H100, gpus: true}\n"  # F12
    "parallelism: {tp: true, zero: true}\n"
    "training: {global_batch: true, micro_batch: true, seq_len: true}\n",
    _BASE.replace(  # F13
        "llama3-8b", "{name: odd, layers: 2, hidden: 1000, heads: 3, ffn: 4096, vocab: 32000}"
    ),
    _BASE.replace(  # F06, F15
        "gpus: 8", "topology: {kind: fat_tree, nodes: 1000000, oversubscription: [1, 7]}"
    ),
    _BASE.replace("gpus: 8", "topology: {include: /etc/passwd}"),  # F18
    _BASE + "precision: {params: 2, grads: 0, optimizer: 0}\n",  # F20
    _BASE.replace("llama3-8b", "mixtral-8x7b")
    .replace(  # ep not dividing dp
        "gpus: 8", "gpus: 48"
    )
    .replace("tp: 2, pp: 2", "tp: 4, pp: 4, ep: 4, expert_tp: 1")
    .replace("16,", "96,"),
]
SEEDS = [s for s in SHIPPED if isinstance(s, dict)]
SEEDS += [d for d in (yaml.safe_load(t) for t in REPRODUCERS[:5] + REPRODUCERS[7:]) if d]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "400 Gb/s",
            "80 GiB",
            "1e9",
            "fsdp",
            "1f1b",
            "on",
            "-1",
            "0",
            "1.5 us",
            "llama3-8b",
            "H100",
            "interleaved",
            "swiglu",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutated(draw):
    data = mutate(draw, copy.deepcopy(draw(st.sampled_from(SEEDS))), values)
    return _dump(data)


def _load(text: str) -> None:
    try:
        result = load_scenario_text(text, "fuzz.yaml")
    except ScenarioError as exc:
        assert exc.problems
        for problem in exc.problems:
            # every problem names a line: of this text, or of a file it included
            pos = problem.position
            assert pos.line >= 1, problem
            assert pos.source == "fuzz.yaml" or "included from fuzz.yaml:" in pos.via, problem
            assert problem.message
    else:
        assert isinstance(result, Scenario)
        result.model_dump_json(indent=2)  # what `trainsim check` prints (F09)
        for rank in api.memory_report(result).ranks:  # the ledger `memory` prints
            for key, value in rank.as_dict().items():
                if isinstance(value, float):
                    assert math.isfinite(value) and value >= 0, (key, value)


def _with_reproducers(test):
    for text in REPRODUCERS:
        test = example(text)(test)
    return test


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_with_reproducers
@given(mutated())
def test_mutated_scenarios(text):
    _load(text)


# 10,000 examples, as two tests of 5,000 that the two test workers run side by
# side (one test of 10,000 took a minute on one core). Hypothesis's pytest plugin folds each
# test's id into its seed (derandomised too), so the halves draw different documents.
@pytest.mark.slow
@pytest.mark.parametrize("half", ["first", "second"])
@settings(max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
@example(text="failures:\n  preset: []\n  spares: 64\n")  # a list where a name goes
@example(text="framework: {name: []}\n")
def test_mutated_scenarios_10k(half, text):
    _load(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_garbage_text(text):
    _load(text)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SEEDS), st.integers(0, 400), st.text(max_size=5))
def test_spliced_text(seed, cut, junk):
    text = _dump(seed)
    _load(text[:cut] + junk + text[cut:])


# Targeted: shipped scenarios with 1-3 numeric or enum fields set to plausible but odd values
# (the fuzzer that found F20, grads: 0). Accepted ones must print and cost their ledger.
FIELDS = {
    ("parallelism", "tp"): st.sampled_from([1, 2, 3, 4, 8, 16, 64, True]),
    ("parallelism", "pp"): st.sampled_from([1, 2, 3, 4, 8, 16, 32, 128]),
    ("parallelism", "cp"): st.sampled_from([1, 2, 4, 8]),
    ("parallelism", "ep"): st.sampled_from([1, 2, 3, 4, 8, 16, 64, 256]),
    ("parallelism", "dp"): st.sampled_from([None, 1, 2, 3, 8, 64]),
    ("parallelism", "expert_tp"): st.sampled_from([None, 1, 2, 8]),
    ("parallelism", "zero"): st.sampled_from([0, 1, 2, 3, "fsdp", True]),
    ("parallelism", "bucket_size"): st.sampled_from(["25 MB", "1 GB", 25, 0, 1e12, "1e6"]),
    ("parallelism", "fsdp_unit_layers"): st.sampled_from([1, 2, 7, 1000, 10**9]),
    ("parallelism", "fsdp_prefetch"): st.integers(0, 64),
    ("parallelism", "pipeline", "schedule"): st.sampled_from(
        ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-v"]
    ),
    ("parallelism", "pipeline", "virtual_stages"): st.sampled_from([1, 2, 3, 4]),
    ("training", "global_batch"): st.sampled_from([1, 2, 8, 16, 64, 512, 1536, 65536]),
    ("training", "micro_batch"): st.sampled_from([1, 2, 4, 8, 64]),
    ("training", "seq_len"): st.sampled_from([1, 2, 128, 2048, 8192, 131072]),
    ("cluster", "gpus"): st.sampled_from([1, 2, 8, 16, 64, 1024, 16384, 10**6]),
    ("precision",): st.sampled_from(
        ["zero-mixed", "pure-bf16", "fp32", {"params": 2, "grads": 0, "optimizer": 0}]
    ),
    ("model", "dropout"): st.sampled_from([0.0, 0.1, 0.999, "1e-1"]),
    ("model", "heads"): st.sampled_from([1, 3, 7, 64]),
    ("simulation", "mode"): st.sampled_from(["symmetric", "full"]),
}


@st.composite
def tweaked(draw):
    data = copy.deepcopy(draw(st.sampled_from([s for s in SHIPPED if isinstance(s, dict)])))
    for path in draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3)):
        node = data
        for seg in path[:-1]:
            if not isinstance(node.get(seg), dict):
                node[seg] = {} if not isinstance(node.get(seg), str) else {"name": node[seg]}
            node = node[seg]
        value = draw(FIELDS[path])
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
    return _dump(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tweaked())
def test_tweaked_scenarios(text):
    _load(text)


# The loader parses with libyaml where PyYAML has it and the document holds only characters
# on which the two parsers agree (yaml_source._UNSURE), and again with the pure-Python parser
# when libyaml refuses it (yaml_source._FAST_LOADER). The user must not be able to tell: the
# same data, positions and messages as the pure-Python parser alone, for accepted and refused
# documents alike. The examples are documents on which the parsers themselves differ (tabs,
# tags, block scalar headers, '?' in flow, byte-order marks inside a document).
_CHARS = st.one_of(
    st.sampled_from(list(" \n:-[]{},#&*'\".0a1~=<;$^()+_/\\xuU09eNLP\t!|>?%@`\r\x85\u2028\ufeff")),
    st.characters(min_codepoint=0xA0),
    st.sampled_from(["---", "...", ": ", "- "]),
)
_YAMLISH = st.builds(
    lambda text, end: text + end,
    st.lists(_CHARS, max_size=40).map("".join),
    st.sampled_from(["", "\n"]),
)
_PARSERS_DIFFER = [
    "0\t",
    "a: 1\t\n",
    "! ",
    '[\\"?]',
    "|#,-#~~~%-:",
    "\n\ufeff.",
    "---",
    "a: \ud800\n",
]


def _outcome(parse, text: str):
    try:
        data, positions = parse(text)
    except ScenarioError as exc:
        return "refused", str(exc)
    return "parsed", repr(data), repr(positions)  # repr: NaN equals NaN here


def _pure_python(text: str):
    try:
        return yaml_source._parse(text, "fuzz.yaml", yaml_source.SafeLoader12)
    except yaml.YAMLError as exc:
        raise yaml_source._scenario_error(exc, text, "fuzz.yaml") from None


@pytest.mark.skipif(yaml_source._FAST_LOADER is None, reason="PyYAML without libyaml")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@_with_reproducers
@given(
    st.one_of(
        mutated(),
        _YAMLISH,
        st.text(max_size=200),
        st.builds(
            lambda seed, cut, junk: (t := _dump(seed))[:cut] + junk + t[cut:],
            st.sampled_from(SEEDS),
            st.integers(0, 400),
            st.text(max_size=5),
        ),
    )
)
def test_libyaml_parses_as_the_pure_python_parser(text):
    fast = _outcome(lambda t: yaml_source.parse_yaml(t, "fuzz.yaml"), text)
    assert fast == _outcome(_pure_python, text)


for _text in _PARSERS_DIFFER:
    test_libyaml_parses_as_the_pure_python_parser = example(_text)(
        test_libyaml_parses_as_the_pure_python_parser
    )


@pytest.mark.skipif(yaml_source._FAST_LOADER is None, reason="PyYAML without libyaml")
def test_the_parsers_differ_on_these_documents():
    """The examples above are documents libyaml reads otherwise (so the test above would fail
    on them if the loader let libyaml parse them); the lone surrogate is the API's case."""
    differ = 0
    for text in _PARSERS_DIFFER[:-1]:
        try:
            fast = _outcome(lambda t: yaml_source._parse(t, "fuzz.yaml", yaml.CSafeLoader), text)
        except yaml.YAMLError as exc:
            fast = "refused", str(yaml_source._scenario_error(exc, text, "fuzz.yaml"))
        pure = _outcome(_pure_python, text)
        differ += fast[0] != pure[0] or (fast[0] == "parsed" and fast != pure)
    assert differ == len(_PARSERS_DIFFER) - 1
