"""Orbits of equivalent GPUs' own links: a class's reduced rating, and runs that keep one link
per orbit giving the very same trace as runs that keep them all."""

import numpy as np
import pytest

from simulator import api
from simulator.engine.links import LinkTable
from simulator.engine.orbits import LinkOrbits, link_orbits
from simulator.engine.placement import DeviceLabels
from simulator.stages import simulation, step_run
from tests.fat_trees import fat_tree as fat_tree_topology


def _orbits(labels: dict[int, int], capacity_scale: dict | None = None):
    """Orbits over a 2-node fat-tree of 4 GPUs each, devices labelled by ``labels``."""
    topo = fat_tree_topology(nodes=2, gpus_per_node=4, nodes_per_leaf=1)
    links = LinkTable(topo.graph)
    capacity = links.capacity.copy()
    for edge, scale in (capacity_scale or {}).items():
        capacity[links.index[edge]] *= scale
    return topo, links, link_orbits(labels, topo.router, links.index, capacity)


def test_a_class_over_whole_orbits_keeps_one_link_of_each():
    topo, links, orbits = _orbits({d: 0 for d in range(8)})
    ids = topo.router.device_link_ids(np.arange(8), links.index)
    up = np.sort(ids[:, 2])  # every GPU's link to its NIC: one orbit of 8
    assert orbits.size[orbits.of_link[up]].tolist() == [8] * 8
    spine = links.index[("leaf0.0", "spine0.0")]  # a switch link: in no orbit
    assert orbits.of_link[spine] == -1
    cls = np.sort(np.r_[up, spine])
    kept, kept_counts = orbits.reduce(cls, np.full(cls.size, 2.0))
    assert kept.tolist() == sorted([up[0], spine])  # the orbit's lowest link, and the switch
    assert kept_counts.tolist() == [2.0, 2.0]
    # part of the orbit, or unevenly: no reduced form
    assert orbits.reduce(up[:7], np.ones(7)) is None
    assert orbits.reduce(up, np.r_[np.ones(7), 2.0]) is None
    # links in no orbit pass as they are
    kept, kept_counts = orbits.reduce(np.array([spine]), np.ones(1))
    assert kept.tolist() == [spine] and kept_counts.tolist() == [1.0]


def test_labels_split_orbits_and_uneven_capacity_drops_one():
    # two labels (the stage of each GPU's rank): GPUs 0-3 and 4-7 are two orbits per kind
    topo, links, orbits = _orbits({d: d // 4 for d in range(8)})
    up = topo.router.device_link_ids(np.arange(8), links.index)[:, 2]
    assert orbits.of_link[up[0]] != orbits.of_link[up[4]]
    assert orbits.size[orbits.of_link[up]].tolist() == [4] * 8
    # a degraded GPU -> NIC link: its orbit has two capacities, so it is in none
    # a class over both orbits, and the GPUs' NIC -> leaf links (two more), each orbit
    # crossed evenly with a count of its own: the lowest link of each orbit kept, with it
    nic = topo.router.device_link_ids(np.arange(8), links.index)[:, 3]
    cls = np.sort(np.r_[up, nic])
    count_of = {**dict.fromkeys(up[:4], 1.0), **dict.fromkeys(up[4:], 2.0)}
    count_of |= {**dict.fromkeys(nic[:4], 3.0), **dict.fromkeys(nic[4:], 4.0)}
    kept, kept_counts = orbits.reduce(cls, np.array([count_of[x] for x in cls.tolist()]))
    lowest = sorted(min(x) for x in (up[:4], up[4:], nic[:4], nic[4:]))
    assert kept.tolist() == lowest
    assert kept_counts.tolist() == [count_of[x] for x in lowest]
    # one link of the second orbit with another count: uneven, no reduced form
    counts = np.array([count_of[x] for x in cls.tolist()])
    counts[cls.tolist().index(max(up[4:]))] = 5.0
    assert orbits.reduce(cls, counts) is None
    edge = links.edges[up[1]]
    topo, links, orbits = _orbits({d: d // 4 for d in range(8)}, {edge: 0.5})
    assert (orbits.of_link[up[:4]] == -1).all() and (orbits.of_link[up[4:]] >= 0).all()


CASES = {
    # ZeRO-2 over 4 nodes with tensor and pipeline parallelism, interleaved, 4 micro-batches
    "zero2-pp-tp": (
        "scenarios/examples/gpt3-175b-dgx-a100.yaml",
        [
            "model.name=megatron-7.5b",
            "model.layers=16",
            "parallelism.tp=4",
            "parallelism.pp=2",
            "parallelism.zero=2",
            "parallelism.pipeline.virtual_stages=2",
            "cluster.gpus=64",
            "cluster.topology.nodes=8",
            "training.global_batch=32",
            "parallelism.bucket_size=400 MB",
        ],
    ),
    # MoE: expert all-to-alls beside the data-parallel and pipeline traffic
    "moe": ("scenarios/examples/mixtral-8x22b.yaml", []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runs_with_orbits_equal_runs_without(case, monkeypatch):
    path, overrides = CASES[case]
    s = api.load(path, overrides)
    topo = api.build_topology(s.cluster)
    stats = []
    simulate = api.simulate

    def spy(*args, **kw):
        sim = simulate(*args, **kw)
        stats.append(sim.stats)
        return sim

    monkeypatch.setattr(step_run, "simulate", spy)  # where the run calls it
    monkeypatch.setattr(simulation, "SYMMETRIC_ORBITS", False)  # where simulate reads it
    plain = api.run(s, topo)
    monkeypatch.setattr(simulation, "SYMMETRIC_ORBITS", True)
    # on a topology of its own: nothing routed or rated by the plain run is reused
    reduced = api.run(s, api.build_topology(s.cluster))
    assert reduced.trace.equals(plain.trace)  # task for task, to the last bit
    assert reduced.summary["step_time_s"] == plain.summary["step_time_s"]
    # not vacuous: some water-fillings ran over one link per orbit, none without orbits
    assert stats[0].symmetric_fillings == 0 and stats[1].symmetric_fillings > 0


def test_orbits_shrink_the_data_parallel_rings(monkeypatch):
    # not vacuous: the symmetric ratings of the ZeRO-2 case's classes are shorter
    from simulator.engine import collective

    sizes = []
    real = collective.FlowClass

    def spy(*args, **kw):
        c = real(*args, **kw)
        if c.symmetric is not None:
            sizes.append((c.rating[0].size, c.symmetric[0].size))
        return c

    monkeypatch.setattr(collective, "FlowClass", spy)
    path, overrides = CASES["zero2-pp-tp"]
    api.run(api.load(path, overrides))
    assert sizes and max(full - kept for full, kept in sizes) >= 8


def _orbits_by_extremes(labels: np.ndarray, ids: np.ndarray, capacity: np.ndarray):
    """Orbits as first written: links two orbits share marked apart, then each orbit's least
    and greatest capacity compared (np.minimum.at / np.maximum.at)."""
    kinds = ids.shape[1]
    orbit = (labels[:, None] * kinds + np.arange(kinds)).ravel()
    ids = ids.ravel()
    known = ids >= 0
    ids, orbit = ids[known], orbit[known]
    of_link = np.full(capacity.size, -1, dtype=np.int64)
    of_link[ids] = orbit
    of_link[ids[of_link[ids] != orbit]] = -2
    of_link[of_link == -2] = -1
    linked = np.flatnonzero(of_link >= 0)
    n_orbits = int(of_link.max()) + 1 if linked.size else 0
    lo, hi = np.full(n_orbits, np.inf), np.full(n_orbits, -np.inf)
    np.minimum.at(lo, of_link[linked], capacity[linked])
    np.maximum.at(hi, of_link[linked], capacity[linked])
    of_link[linked[(lo != hi)[of_link[linked]]]] = -1
    return of_link, np.bincount(of_link[of_link >= 0], minlength=n_orbits)


@pytest.mark.parametrize("seed", range(40))
def test_orbits_as_first_written_on_random_tables(seed):
    """Shared links (ids drawn from few), missing links (-1) and two capacities at random:
    the orbits of LinkOrbits are the ones its first, slower form found."""
    rng = np.random.default_rng(seed)
    devices, kinds, n_links = int(rng.integers(1, 12)), int(rng.integers(1, 4)), 40
    ids = rng.integers(-1, n_links, (devices, kinds))
    labels = rng.integers(0, 3, devices)
    capacity = rng.choice([1.0, 2.0] if seed % 2 else [1.0], n_links)
    got = LinkOrbits(DeviceLabels(np.arange(devices), labels), ids, capacity)
    of_link, size = _orbits_by_extremes(labels, ids, capacity)
    assert got.of_link.tolist() == of_link.tolist()
    assert got.size.tolist() == size.tolist()
