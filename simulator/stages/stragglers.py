"""Slow GPUs and links of a scenario as the step's perturbations, and where slow ranks
are simulated (every rank, or a stage's representative past ``FULL_MODE_MAX_GPUS``)."""

from __future__ import annotations

from simulator.infeasible import InfeasibleError
from simulator.plan.plan import build_plan as make_plan
from simulator.scenario import Scenario
from simulator.schedule.perturb import Perturbation, SlowCompute, SlowLink
from simulator.topology import Topology

FULL_MODE_MAX_GPUS = 1024  # past this, a slow rank stands for its pipeline stage (see run)


def scenario_perturbations(scenario: Scenario) -> list[Perturbation]:
    """The scenario's ``failures.stragglers`` (slow GPUs and links) as perturbations, from the
    schema's own conversion (:meth:`Stragglers.in_step`).

    A link that is down (fraction 0) would need rerouting, which the step simulation does not
    model (ValueError).

    >>> from simulator.api import load
    >>> slow = "failures={stragglers: {gpus: [{rank: 1, factor: 1.5}]}}"
    >>> scenario_perturbations(load("scenarios/examples/pipeline-1f1b.yaml", [slow]))
    [SlowCompute(rank=1, factor=1.5)]
    """
    if scenario.failures is None:
        return []
    out: list[Perturbation] = []
    for kind, *args in scenario.failures.stragglers.in_step():
        if kind == "slow_compute":
            out.append(SlowCompute(*args))
            continue
        src, dst, fraction = args
        if fraction == 0:
            raise InfeasibleError(
                f"failures.stragglers.links ({src} -> {dst}): a link that is down needs "
                "rerouting, which the step simulation does not model; give the fraction of "
                "bandwidth left instead"
            )
        out.append(SlowLink(_node(src), _node(dst), fraction))
    return out


def _node(name):
    """Topology node ids: devices are integers, a YAML "12" names device 12 too."""
    return int(name) if isinstance(name, str) and name.isdigit() else name


def _placed(scenario: Scenario, perturbations) -> tuple[Scenario, list]:
    """Where slow ranks are simulated: every rank (full mode) up to ``FULL_MODE_MAX_GPUS``;
    beyond, the slow rank's stage representative. Training is synchronous, so every replica
    waits for the slowest at the gradient synchronisation and a slow rank gates its TP, CP and
    pipeline peers: the step is that of its stage slowed in every replica, bar the network's
    contention details."""
    slow = [p for p in perturbations if isinstance(p, SlowCompute)]
    for p in slow:
        if not 0 <= p.rank < scenario.num_gpus:
            raise InfeasibleError(f"rank {p.rank} is not in the job's {scenario.num_gpus} GPUs")
    if not slow or scenario.simulation.mode == "full":
        return scenario, list(perturbations)
    if scenario.num_gpus <= FULL_MODE_MAX_GPUS:
        full = scenario.simulation.model_copy(update={"mode": "full"})
        return scenario.model_copy(update={"simulation": full}), list(perturbations)
    grid = make_plan(scenario).grid
    slowest: dict[int, float] = {}  # replicas wait for the slowest, they do not add up
    for p in slow:
        rep = grid.rank(tp=0, cp=0, dp=0, pp=grid.coords(p.rank)["pp"])
        slowest[rep] = max(slowest.get(rep, 1.0), p.factor)
    others = [p for p in perturbations if not isinstance(p, SlowCompute)]
    return scenario, [SlowCompute(r, k) for r, k in slowest.items()] + others


def straggler_link_findings(scenario: Scenario, topo: Topology) -> list[tuple[tuple, str]]:
    """Each ``failures.stragglers.links`` entry that names no link of ``topo``, as (field
    path, message) for :func:`simulator.scenario.located.located_error`: the file's line, not
    only the file.

    >>> from simulator.api import build_topology, load
    >>> bad = "failures={stragglers: {links: [{src: nvswitch9, dst: 0, fraction: 0.5}]}}"
    >>> s = load("scenarios/examples/pipeline-1f1b.yaml", [bad])
    >>> [(path, text)] = straggler_link_findings(s, build_topology(s.cluster))
    >>> path, text[:30]
    (('failures', 'stragglers', 'links', 0, 'src'), 'no link nvswitch9 -> 0 in the ')
    """
    if scenario.failures is None:
        return []
    out = []
    for i, link in enumerate(scenario.failures.stragglers.links):
        src, dst = _node(link.src), _node(link.dst)
        if not topo.graph.has_edge(src, dst):
            out.append(
                (
                    ("failures", "stragglers", "links", i, "src"),
                    f"no link {link.src} -> {link.dst} in the topology (`trainsim topology "
                    "FILE --format json` lists its nodes)",
                )
            )
    return out
