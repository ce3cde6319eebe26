"""Megatron-LM's asynchronous tensor-parallel all-reduce (framework.tp_async_allreduce): a
column-parallel linear's input-gradient all-reduce runs beside its weight gradient."""

import pytest

from simulator import api
from simulator.validation import layer_times

SCENARIO = "scenarios/validation/korthikanti-22b-layer.yaml"  # sets tp_async_allreduce
BASE = ["simulation.comm_interference=0", "model.layers=8", "training.global_batch=4"]
BASE += ["training.micro_batch=1"]


def _run(*overrides):
    return api.run(api.load(SCENARIO, [*BASE, *overrides]))


def _layer(frame, layer):
    f = frame[(frame["rank"] == 0) & (frame["layer"] == layer) & (frame["microbatch"] == 0)]
    return f[f["phase"].isin(["input_grad", "weight_grad"])].sort_values("start_s")


def test_each_all_reduce_runs_beside_a_weight_gradient():
    frame = _run("framework.tp_async_allreduce=true").trace
    rows = _layer(frame, 4)
    names = list(rows[rows["stream"] == "compute"]["name"])
    # the MLP's input gradient, its weight gradient, attention's, then attention's weights
    assert names == ["mlp", "weight_grad", "attention_out", "attention", "weight_grad"]
    comm = rows[rows["stream"] == "tp"]
    assert list(comm["name"]) == ["tp_all_reduce", "tp_all_reduce"]
    w = rows[rows["name"] == "weight_grad"]
    for (_, ar), (_, wg) in zip(comm.iterrows(), w.iterrows(), strict=True):
        assert ar["start_s"] == pytest.approx(wg["start_s"], abs=1e-12)  # launched together


def test_layer_backward_time_is_the_closed_form():
    # without interference: the MLP's input gradient, then the longer of the all-reduce and
    # the MLP's weight gradient, attention's input gradient, then the longer of the second
    # all-reduce and attention's weight gradient (the layer below waits for both)
    frame = _run("framework.tp_async_allreduce=true").trace
    rows = _layer(frame, 4)
    d = dict(zip(rows["name"] + rows.groupby("name").cumcount().astype(str),
                 rows["end_s"] - rows["start_s"], strict=True))  # fmt: skip
    want = (
        d["mlp0"] + max(d["tp_all_reduce0"], d["weight_grad0"])
        + d["attention_out0"] + d["attention0"] + max(d["tp_all_reduce1"], d["weight_grad1"])
    )  # fmt: skip
    assert layer_times(frame, 4)[1] == pytest.approx(want, rel=1e-9)
    # and faster than the synchronous all-reduces by at least the shorter overlap
    sync = layer_times(_run("framework.tp_async_allreduce=false").trace, 4)[1]
    assert sync - layer_times(frame, 4)[1] >= min(d["tp_all_reduce0"], d["weight_grad0"]) * 0.99


@pytest.mark.parametrize(
    "other",
    [
        ["parallelism.sequence_parallel=true"],
        ["parallelism.zero=3"],
        ["parallelism.tp=4", "parallelism.pp=2", "parallelism.pipeline.schedule=zb-h1"],
    ],
)
def test_where_the_overlap_is_not_modelled_the_flag_changes_nothing(other):
    on = _run("framework.tp_async_allreduce=true", *other)
    off = _run("framework.tp_async_allreduce=false", *other)
    assert on.metrics.step_time_s == off.metrics.step_time_s
    assert len(on.trace) == len(off.trace)
