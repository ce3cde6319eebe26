"""The elastic policy's step times: each data-parallel size the Monte Carlo reaches found by
one cheap pass, simulated once per micro-batch count, in parallel."""

from __future__ import annotations

import math
from dataclasses import replace

from simulator import api
from simulator.failures import adapter
from simulator.failures.montecarlo import simulate_seeds
from simulator.scenario import load_scenario_text
from tests.failures.helpers import job

DAY = 86400.0


def test_the_sizes_reached_do_not_depend_on_the_step_time():
    """Why one pass with a stand-in step time finds every size: failures, repairs and
    recoveries are timed by their own laws."""
    base = dict(cause_nodes_out=[1], repair_law="fixed", repair_mean_s=DAY, policy="elastic")
    seen = {}
    for name, step in (("fast", lambda dp: 1.0), ("slow", lambda dp: 50.0 * 8 / dp)):
        sizes = []

        def record(dp, step=step, sizes=sizes):
            sizes.append(dp)
            return step(dp)

        simulate_seeds(job(**base, step_time_for=record), 20, 6)
        seen[name] = sizes
    assert seen["fast"] == seen["slow"] and len(set(seen["fast"])) >= 2


SMALL = """\
model: {name: llama3-8b, layers: 2}
cluster: {accelerator: H100, gpus: 64}
parallelism: {tp: 8}
training: {global_batch: 64, micro_batch: 1, seq_len: 1024}
failures: {node_rate: 1 / d, policy: elastic}
"""


def test_each_size_is_simulated_once(monkeypatch):
    calls = []
    monkeypatch.setattr(adapter.os, "cpu_count", lambda: 1)  # in this process: countable
    monkeypatch.setattr(adapter, "_step_time", lambda s, topo=None: calls.append(s.dp) or 1.0)
    steps = adapter.ElasticSteps(load_scenario_text(SMALL))
    steps.compute([5, 6, 7])
    steps.compute([6, 5, 7, 4])  # known but 4
    assert steps(4) == 1.0 and sorted(calls) == [4, 5, 6, 7]


def test_sizes_with_the_same_micro_batches_still_differ():
    """Why every size is simulated: 64 sequences over 22 or 31 replicas are 3 micro-batches
    per replica either way, but the gradient all-reduce of 31 replicas spans four nodes, of
    22 three, and the step differs by far more than the ring's (n - 1) / n."""
    s = load_scenario_text(SMALL.replace("gpus: 64", "gpus: 32").replace("tp: 8", "tp: 1"))
    steps = adapter.ElasticSteps(s)
    assert {math.ceil(64 / dp) for dp in range(22, 32)} == {3}  # micro-batch 1
    t22 = api.run(steps.scenario_at(22)).summary["step_time_s"]
    t31 = api.run(steps.scenario_at(31)).summary["step_time_s"]
    assert t31 > 1.2 * t22


def test_prefetch_simulates_what_the_monte_carlo_then_asks_for(monkeypatch):
    monkeypatch.setattr(adapter.os, "cpu_count", lambda: 1)
    monkeypatch.setattr(adapter, "_step_time", lambda s, topo=None: 2.0 * 8 / s.dp)
    s = load_scenario_text(SMALL.replace("policy: elastic", "policy: elastic, spares: 0"))
    m = adapter.job_model(s, adapter.StepInputs(2.0, 1e12))
    adapter.prefetch_elastic(m, 10, 4)
    known = dict(m.step_time_for.known)
    assert known  # without spares every node loss shrinks the job
    asked = []
    real = m.step_time_for

    def spy(dp):
        asked.append(dp)
        return real(dp)

    simulate_seeds(replace(m, step_time_for=spy), 10, 4)
    assert set(asked) <= set(known) and real.known == known  # nothing simulated twice
