"""The ``failures.fleet:`` section: failures node by node, sick nodes, and where replacements
come from.

Without it the job model draws interruptions for the job as a whole. With it, every node of
the job has its own lifetime (Weibull, renewed when a repair fixes it), a share of the nodes
are lemons that fail more often, repairs run in two stages and do not always fix, the wrong
node may be blamed, replacements come first from warm standbys and then from a spare pool,
and nodes may turn slow (fail-slow) and be found and replaced, or not. The node-removing
causes of ``failures.causes`` (and ``node_rate``) give the mean rate per node; causes that
remove no node (software, links) still interrupt the job as a whole.

Defaults and their sources (the values AIReSim takes as illustrative in its Table 1 are
marked "AIReSim": Lin, Pattabiraman and Patel, "AIReSim: A Discrete Event Simulator for
Large-scale AI Cluster Reliability Modeling", arXiv:2603.07041, 2026, whose code gives them
in ``airesim/params.py``; they are not measurements):

- ``lemons``: 15% of nodes fail 5x as often as the rest (AIReSim's "systematic" servers);
  retired after ``retire_after`` 3 failures within the job (a choice: Kokolis et al., Meta,
  arXiv:2410.21680, retire lemon nodes by their repeated failures, which cut large jobs'
  failures from 14% to 4%, and give no count).
- ``shape`` 1: exponential lifetimes per node (AIReSim's default; below 1, a node fresh from
  repair is more likely to fail soon).
- ``standbys`` 16 warm standby nodes in the job's allocation, swapped in at the cost of a
  restart (AIReSim: 16 for a 4,096-server job); the spare pool is ``failures.spares``.
- ``pool_wait`` 20 min to take a node from the spare pool (AIReSim's preemption wait).
- ``repair``: automatic 2 h, then manual 2 d for 80% of nodes; a repair that reports
  success has not fixed the node with probability 0.4 (automatic) or 0.2 (manual), and the
  node keeps failing at the lemon rate (AIReSim).
- ``misdiagnosis`` 0: the probability the wrong node is blamed and drained (AIReSim's
  default; give yours).
- ``slow``: nodes turn slow at ``rate`` per node (0.5% of nodes a week: MegaScale's
  "approximately 0.5% of machines" about 10% slower, read as appearing over a week, a
  choice), each slowing its GPUs ``factor`` 1.1x (MegaScale; FALCON, arXiv:2410.12588,
  reports fail-slow episodes from tens of seconds to nearly ten hours). ``evict``: whether
  the job's monitor finds them - a step slower than ``threshold`` (1.05x the healthy step,
  a choice) for ``delay`` (10 min, a choice) - and drains them like a failed node.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from simulator.scenario.fields import Frozen
from simulator.scenario.rates import Rate, parse_rate
from simulator.units import Seconds


class Lemons(Frozen):
    """Nodes that fail ``rate_multiplier`` times as often; retired after ``retire_after``."""

    fraction: Annotated[float, Field(ge=0, le=1)] = 0.15
    """Share of the nodes that are lemons."""
    rate_multiplier: Annotated[float, Field(ge=1, le=1000)] = 5.0
    retire_after: Annotated[int, Field(ge=1, le=1000)] | None = 3


class TwoStageRepair(Frozen):
    """Automatic repair, then manual for a share of nodes; a repair may not fix the node."""

    automatic: Seconds = 2 * 3600.0
    """Duration of the automatic repair (s)."""
    manual: Seconds = 2 * 86400.0
    """Duration of the manual repair, for the nodes escalated to it (s)."""
    escalate: Annotated[float, Field(ge=0, le=1)] = 0.8
    """Share of repaired nodes that go on to manual repair."""
    unfixed_after_automatic: Annotated[float, Field(ge=0, le=1)] = 0.4
    """Probability that an automatic repair reports success without fixing the node."""
    unfixed_after_manual: Annotated[float, Field(ge=0, le=1)] = 0.2
    """Probability that a manual repair reports success without fixing the node."""


class SlowNodes(Frozen):
    """Nodes turning slow (fail-slow) and the monitor that may find them."""

    rate: Rate = parse_rate("0.005 / 7 d")
    """Rate at which each node turns slow (per node per second; units accepted)."""
    factor: Annotated[float, Field(ge=1, le=100)] = 1.1
    """How much slower a slow node's GPUs compute."""
    evict: bool = True
    """Whether the job's monitor finds slow nodes and drains them."""
    threshold: Annotated[float, Field(ge=1, le=100)] = 1.05
    """Step time over the healthy step at which the monitor flags a node."""
    delay: Seconds = 600.0
    """How long the monitor watches before it drains a flagged node (s)."""


class FleetConfig(Frozen):
    """Node-level failures (the module doc)."""

    lemons: Lemons = Lemons()
    """Nodes that fail more often, and when they are retired."""
    shape: Annotated[float, Field(ge=0.2, le=100)] = 1.0
    """Weibull shape of each node's lifetime (1: exponential)."""
    standbys: Annotated[int, Field(ge=0, le=1_000_000)] = 16
    """Warm standby nodes in the job's allocation, swapped in at the cost of a restart."""
    pool_wait: Seconds = 1200.0
    """Time to take a node from the spare pool (s)."""
    repair: TwoStageRepair = TwoStageRepair()
    """Two-stage repair of a failed node."""
    misdiagnosis: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Probability that a healthy node is blamed and drained instead of the failed one."""
    slow: SlowNodes = SlowNodes()
    """Nodes turning slow (fail-slow) and the monitor that may find them."""
