"""What the pictures choose to show: links per level by utilisation with the
bottleneck named, thin bars kept visible, comparison bars with values, topology legends."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib import pyplot as plt

from simulator.report import plots
from simulator.report.gantt import MIN_BAR_FRACTION, draw_rows
from simulator.report.plots import link_level, mean_utilisation, most_utilised_per_level
from simulator.trace import COLUMNS


def _links(rows):
    return pd.DataFrame(rows, columns=["link", "start_s", "end_s", "utilisation"])


# Eight NVLink links carrying many bytes at low utilisation, and two NIC uplinks that are
# busier: the picture must show the NIC (the old one ranked by bytes and showed NVLink only).
LINKS = _links(
    [(f"{i}->nvswitch0", 0.0, 1.0, 0.2) for i in range(8)]
    + [("nic0->leaf0.0", 0.0, 0.5, 0.9), ("nic1->leaf0.1", 0.0, 1.0, 0.6)]
    + [("leaf0.0->nic0", 0.0, 1.0, 0.1)]
)


def test_link_levels_from_names():
    assert link_level("nic3->leaf0.3") == "nic-leaf up"
    assert link_level("leaf0.3->nic3") == "nic-leaf down"
    assert link_level("3->nvswitch0") == "gpu-nvswitch up"
    assert link_level("leaf1.0->spine0.2") == "leaf-spine up"
    assert link_level("4->5") == "gpu-gpu"


def test_mean_utilisation_is_time_weighted_over_the_step():
    u = mean_utilisation(LINKS)
    assert u["nic0->leaf0.0"] == pytest.approx(0.45)  # 0.9 for half of a 1 s step
    assert u["0->nvswitch0"] == pytest.approx(0.2)


def test_most_utilised_links_of_each_level():
    chosen = most_utilised_per_level(mean_utilisation(LINKS), per_level=1)
    # one per level, bottom up (down before up), the busiest of each: 0.6 beats 0.45 among
    # the nic-leaf uplinks
    assert chosen == ["0->nvswitch0", "leaf0.0->nic0", "nic1->leaf0.1"]


def test_links_picture_names_the_bottleneck(tmp_path, monkeypatch):
    titles = []
    real = plt.Axes.set_title

    def spy(self, label, *args, **kwargs):
        titles.append(label)
        return real(self, label, *args, **kwargs)

    monkeypatch.setattr(plt.Axes, "set_title", spy)
    path = plots.draw_links(LINKS, tmp_path / "links.png", "t")
    assert path.stat().st_size > 10_000
    assert "busiest link: nic1->leaf0.1 (nic-leaf up), 60% busy" in titles[0]


def test_thin_bars_get_a_minimum_width():
    # a 1 us pipeline send in a 1 s step is 1e-6 of the axis: thinner than a pixel
    frame = pd.DataFrame(
        [
            (0, "compute", "compute", "forward", "f", 0, 0, 0.0, 1.0, 1.0, 0.0),
            (0, "pp_fwd", "send", "forward", "s", 0, 0, 0.5, 0.5 + 1e-6, 0.0, 1.0),
        ],
        columns=COLUMNS,
    )
    fig, ax = plt.subplots()
    draw_rows(ax, frame, [0], 1.0)
    send = ax.collections[-1].get_paths()[0].get_extents().width
    plt.close(fig)
    assert send == pytest.approx(1e3 * MIN_BAR_FRACTION)  # ms: 1/1000 of the 1,000 ms shown


def test_window_limits_the_axis():
    frame = pd.DataFrame(
        [(0, "compute", "compute", "forward", "f", 0, 0, 0.0, 1.0, 1.0, 0.0)],
        columns=COLUMNS,
    )
    fig, ax = plt.subplots()
    draw_rows(ax, frame, [0], 1.0, window=(0.25, 0.5))
    assert ax.get_xlim() == (250.0, 500.0)
    plt.close(fig)
