"""The placements without an entry per rank read as the dicts they stand for, and a run placed
by one is the run placed by the dict."""

import numpy as np
import pytest

from simulator.engine.placement import DeviceLabels, RanksOnDevices
from simulator.stages import facts


def test_ranks_on_devices_is_the_identity_dict():
    p = RanksOnDevices(5)
    assert p == {r: r for r in range(5)} and dict(p) == {r: r for r in range(5)}
    assert list(p) == list(p.keys()) == list(p.values()) == [0, 1, 2, 3, 4]
    assert p[np.int64(3)] == 3 and p[2.0] == 2 and 4 in p and 5 not in p and len(p) == 5
    for bad in (-1, 5, 2.5, "1", None):
        with pytest.raises(KeyError):
            p[bad]
    assert p == RanksOnDevices(5) and p != RanksOnDevices(4)
    with pytest.raises(ValueError):
        RanksOnDevices(-1)


def test_device_labels_are_the_dict_of_their_arrays():
    labels = DeviceLabels([4, 0, 7], [1, 0, 1])
    assert dict(labels) == {4: 1, 0: 0, 7: 1} and labels == {4: 1, 0: 0, 7: 1}
    assert list(labels.keys()) == [4, 0, 7] and list(labels.values()) == [1, 0, 1]
    assert len(labels) == 3 and labels.keys() & {0, 1} == {0}
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
            orbit_labels=facts._orbit_labels(step.plan, placement),
        )
        frames.append(run.trace.to_frame())
    assert frames[0].equals(frames[1])


def test_ranks_are_placed_by_the_topologys_device_list():
    from simulator.api import _placement

    assert isinstance(_placement(4, [0, 1, 2, 3, 4, 5]), RanksOnDevices)
    assert _placement(4, [0, 1, 2, 3]) == {0: 0, 1: 1, 2: 2, 3: 3}
    other = _placement(3, [5, 1, 7, 0])  # not device r: a dict, rank by rank
    assert type(other) is dict and other == {0: 5, 1: 1, 2: 7}
    # how many devices from the first are their own position: given, it decides alone
    assert isinstance(_placement(3, [0, 1, 2, 9], numbered=3), RanksOnDevices)
    assert type(_placement(4, [0, 1, 2, 9], numbered=3)) is dict
    assert type(_placement(3, [0, 1, 2], numbered=2)) is dict


def test_numbered_devices_are_counted_once_per_device_list():
    from tests.fat_trees import fat_tree as fat_tree_topology

    assert [facts._numbered(d) for d in ([0, 1, 2, 5], [0, 1, 2], [], [1], [0, 1.0], ["a"])] == [
        3, 3, 0, 0, 2, 0,
    ]  # fmt: skip
    topo = fat_tree_topology(nodes=2, gpus_per_node=2, nodes_per_leaf=2)
    assert facts._numbered_devices(topo) == 4
    topo.devices = [0, 1, 3, 2]  # a new list: counted anew, not the kept count
    assert facts._numbered_devices(topo) == 2


def _scale_up_pair(devices, host_of):
    """The pair the scale-up hop is timed on, as written before the early exit: the first host
    in device order with two devices, its lowest two."""
    from collections import Counter

    hosts = [host_of.get(d, d) for d in devices]
    count = Counter(hosts)
    host = next((h for h in dict.fromkeys(hosts) if count[h] > 1), None)
    if host is None:
        return None
    i = hosts.index(host)
    return devices[i], devices[hosts.index(host, i + 1)]


@pytest.mark.parametrize(
    "hosts",
    [
        [0, 0, 1, 1],  # the usual: devices 0 and 1 share host 0
        [0, 1, 1, 0],  # host 0 first in device order, host 1 repeats first
        [0, 1, 2, 2],  # device 0 alone on its host
        [0, 1, 2, 3],  # no host has two
        [3, 3, 3, 0, 0],
        [],
    ],
)
@pytest.mark.parametrize("identity", [True, False])
def test_the_scale_up_pair_is_the_first_host_with_two(hosts, identity, monkeypatch):
    # Executor._scale_up_Bps's early exit (the first device's host repeating first) against
    # the full count, with rank r on device r and with a dict that places them elsewhere
    from types import SimpleNamespace

    from simulator.engine import executor

    n = len(hosts)
    if identity:
        placement, devices = RanksOnDevices(n), list(range(n))
        host_of = dict(enumerate(hosts))
    else:  # rank r on device 10 + r, listed out of order: sorted by device first
        placement = {r: 10 + (n - 1 - r) for r in range(n)}
        devices = sorted(placement.values())
        host_of = {10 + i: h for i, h in enumerate(hosts)}
    monkeypatch.setattr(executor, "hop_bandwidth", lambda links, router, pair: pair)
    fake = SimpleNamespace(
        device_of=placement,
        _ranks_are_devices=identity,
        runner=SimpleNamespace(host_of=host_of, links=None, router=None),
    )
    got = executor.Executor._scale_up_Bps(fake)
    want = _scale_up_pair(devices, host_of)
    assert got == (want if want is not None else float("inf"))
