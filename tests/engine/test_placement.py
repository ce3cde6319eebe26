"""The placements without an entry per rank read as the dicts they stand for, and a run placed
by one is the run placed by the dict."""

import numpy as np
import pytest

from simulator.engine.placement import DeviceLabels, RanksOnDevices


def test_ranks_on_devices_is_the_identity_dict():
    p = RanksOnDevices(5)
    assert p == {r: r for r in range(5)} and dict(p) == {r: r for r in range(5)}
    assert list(p) == list(p.keys()) == list(p.values()) == [0, 1, 2, 3, 4]
    assert p[np.int64(3)] == 3 and 4 in p and 5 not in p and len(p) == 5
    for bad in (-1, 5, 2.0, "1"):
        with pytest.raises(KeyError):
            p[bad]
    assert p == RanksOnDevices(5) and p != RanksOnDevices(4)
    with pytest.raises(ValueError):
        RanksOnDevices(-1)


def test_device_labels_are_the_dict_of_their_arrays():
    labels = DeviceLabels([4, 0, 7], [1, 0, 1])
    assert dict(labels) == {4: 1, 0: 0, 7: 1} and labels == {4: 1, 0: 0, 7: 1}
    assert labels.keys() == [4, 0, 7] and labels.values() == [1, 0, 1] and len(labels) == 3
    with pytest.raises(KeyError):
        labels[1]
    with pytest.raises(ValueError):
        DeviceLabels([1, 2], [0])


def test_a_run_placed_by_ranks_on_devices_is_the_run_placed_by_a_dict():
    # the engine's paths for the identity placement (no mapping, orbit labels as arrays, the
    # scale-up pair found at once) against the dict's: the same trace to the bit
    from simulator import api
    from simulator.engine import run_engine
    from simulator.scenario.loader import PROJECT_ROOT

    s = api.load(
        PROJECT_ROOT / "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        ["model.layers=12", "parallelism.pp=2", "training.global_batch=256"],
    )
    topo = api.build_topology(s.cluster)
    step = api.build_step(api.build_plan(s, topo))
    model = api.network_model(topo)
    n = step.plan.grid.size
    frames = []
    for placement in (RanksOnDevices(n), {r: r for r in range(n)}):
        run = run_engine(
            model,
            step.graph,
            placement,
            interference=s.simulation.comm_interference,
            orbit_labels=api._orbit_labels(step.plan, placement),
        )
        frames.append(run.trace.to_frame())
    assert frames[0].equals(frames[1])
