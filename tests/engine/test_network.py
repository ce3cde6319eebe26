"""The flow network: conservation of bytes, re-rating when flows come and go."""

import numpy as np
import pytest
import simpy

from simulator.engine.network import FlowClass, FlowNetwork, LinkTable
from simulator.topology.nvswitch import nvswitch_topology


def _net():
    topo = nvswitch_topology(4, 100.0, latency=0.0)
    links = LinkTable(topo.graph)
    env = simpy.Environment()
    return env, FlowNetwork(env, links, track_links=True), links, topo


def _cls(links, topo, src, dst, size, pattern=None):
    ids = links.ids(topo.path(src, dst))
    return FlowClass(ids, np.ones(ids.size), size, 0.0, pattern)


def test_late_flow_shares_then_leaves():
    env, net, links, topo = _net()
    done = {}
    # Flow A: 0 -> 1, 1000 B alone at 100 B/s. At t = 2, flow B 2 -> 1 shares 1's downlink.
    net.submit([_cls(links, topo, 0, 1, 1000.0)], lambda: done.setdefault("a", env.now))
    env.timeout(2.0).callbacks.append(
        lambda _e: net.submit(
            [_cls(links, topo, 2, 1, 100.0)], lambda: done.setdefault("b", env.now)
        )
    )
    env.run()
    # A: 200 B by t=2; then 50 B/s each; B needs 2 s (ends t=4); A has 700 B left at 100 B/s.
    assert done["b"] == pytest.approx(4.0, rel=1e-12)
    assert done["a"] == pytest.approx(11.0, rel=1e-12)


def test_bytes_are_conserved_on_every_link():
    env, net, links, topo = _net()
    sizes = {(0, 1): 300.0, (1, 2): 500.0, (3, 1): 200.0, (2, 0): 50.0}
    net.submit([_cls(links, topo, s, d, b) for (s, d), b in sizes.items()], lambda: None)
    env.run()
    expected = np.zeros(len(links))
    for (s, d), b in sizes.items():
        expected[links.ids(topo.path(s, d))] += b
    assert np.allclose(net.stats.link_bytes, expected, rtol=1e-12)


def test_rates_are_reused_for_a_repeated_pattern():
    env, net, links, topo = _net()
    for k in range(5):
        env.timeout(10.0 * k).callbacks.append(
            lambda _e: net.submit([_cls(links, topo, 0, 1, 100.0, pattern="p")], lambda: None)
        )
    env.run()
    assert net.stats.rerates == 1 and net.stats.cache_hits == 4
