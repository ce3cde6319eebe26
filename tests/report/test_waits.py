"""Who waits on whom: the waits the Gantt chart draws, read off a simulated step's trace."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator import api
from simulator.report.gantt import default_ranks
from simulator.report.waits import arrows, pacers, step_waits

SLOW = "failures={stragglers: {gpus: [{rank: 1, factor: 1.5}]}}"


@pytest.fixture(scope="module")
def slowed():
    # 1F1B on 4 stages of TP 2: rank 1 (stage 0, TP partner of rank 0) runs 1.5x slower, so
    # every rank is simulated
    return api.run(api.load("scenarios/examples/pipeline-1f1b.yaml", [SLOW]))


def test_the_slow_gpu_paces_its_tensor_parallel_partner(slowed):
    frame, stages = slowed.trace, slowed.summary["stage_of_rank"]
    ranks = sorted(int(r) for r in frame["rank"].unique())
    held = pacers(step_waits(frame, ranks, stages))
    top = held[held["kind"] == "collective"].iloc[0]
    assert (top.src_rank, top.dst_rank) == (1, 0)  # rank 0 waits on rank 1, not the reverse
    # at (nearly) every TP collective the two run (the few where rank 0 is itself behind,
    # after a pipeline wait, are not waits)
    tp = frame[(frame["rank"] == 0) & (frame["stream"] == "tp")]
    assert 0.9 * len(tp) <= top.waits <= len(tp)
    # each wait is the slow GPU's extra compute since the last collective, half of what
    # rank 0 computed in that time: the total is at most half of rank 0's compute, and
    # nearly all of it (a few segments end in a pipeline wait instead); none the other way
    assert not ((held["kind"] == "collective") & (held["src_rank"] == 0)).any()
    busy = frame[(frame["rank"] == 0) & (frame["kind"] == "compute")]
    work = float((busy["end_s"] - busy["start_s"]).sum())
    assert 0.45 * work < top.total_s <= 0.5 * work * (1 + 1e-9)


def test_a_healthy_pipeline_waits_only_to_fill(slowed):
    r = api.run(api.load("scenarios/examples/pipeline-1f1b.yaml"))
    stages = r.summary["stage_of_rank"]
    w = step_waits(r.trace, default_ranks(r.trace, stages), stages, min_wait_s=1e-3)
    # symmetric mode, one rank per stage: no collective has two shown members; the waits
    # over a millisecond are each stage's wait for its first forward, one stage on another
    assert set(w["kind"]) == {"pipeline"}
    assert sorted(zip(w["src_rank"], w["dst_rank"], strict=True)) == [(0, 2), (2, 4), (4, 6)]
    # stage s starts when the first micro-batch has passed the s stages before it
    first = r.trace[(r.trace["kind"] == "compute") & (r.trace["phase"] == "forward")]
    for dst, t in zip(w["dst_rank"], w["dst_s"], strict=True):
        assert t == pytest.approx(first[first["rank"] == dst]["start_s"].min())


def test_the_default_chart_shows_the_slow_gpu_beside_its_stage(slowed):
    stages = slowed.summary["stage_of_rank"]
    assert default_ranks(slowed.trace, stages) == [0, 1, 2, 4, 6]


def test_arrows_take_each_pair_in_turn():
    waits = pd.DataFrame(
        {
            "src_rank": [2, 2, 2, 1],
            "src_stream": ["pp_fwd"] * 3 + ["compute"],
            "src_s": [0.0, 1.0, 2.0, 3.0],
            "dst_rank": [4, 4, 4, 0],
            "dst_stream": ["compute"] * 3 + ["tp"],
            "dst_s": [0.5, 1.5, 2.5, 3.0],
            "wait_s": [0.5, 0.4, 0.3, 0.01],
            "kind": ["pipeline"] * 3 + ["collective"],
        }
    )
    # the collective's short wait is drawn before the pipeline's second-longest
    assert arrows(waits, most=2)["wait_s"].tolist() == [0.5, 0.01]


def test_stages_not_next_to_each_other_wait_on_neither(slowed):
    # shown alone, stages 0 and 3 of 4 are not neighbours (1F1B does not loop round)
    w = step_waits(slowed.trace, [0, 6], slowed.summary["stage_of_rank"])
    assert w[w["kind"] == "pipeline"].empty


def test_an_evenly_paced_step_shows_one_rank_a_stage():
    # every rank simulated, none slow: no collective wait beyond rounding adds a rank
    r = api.run(api.load("scenarios/examples/pipeline-1f1b.yaml", ["simulation.mode=full"]))
    assert len(r.trace["rank"].unique()) == 8
    assert default_ranks(r.trace, r.summary["stage_of_rank"]) == [0, 2, 4, 6]
