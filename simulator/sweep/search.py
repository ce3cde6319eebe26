"""``trainsim plan``: search the parallel plans of a scenario's model, cluster and batch, ranked
by the simulator.

1. **Enumerate** the space (:mod:`simulator.sweep.space`) on each GPU count asked for.
2. **Bound** every candidate: a lower bound on its simulated step from the kernel costs
   (:func:`simulator.stages.bounds.step_lower_bound`: each stage's compute with its
   recompute and TP collectives, the pipeline's fill and drain). Order the candidates by the
   bound plus the analytic estimate's exposed communication (:mod:`simulator.sweep.estimate`).
3. **Screen** in that order, in rounds: a candidate whose bound cannot beat the best plan
   simulated so far is dropped (*bound*); the rest are checked by the loader (*infeasible*)
   and the memory ledger with ``memory_headroom`` to spare (*oom*; a degree combination whose
   most frugal variant does not fit is rejected whole), then simulated cheaply: a step of
   ``2u`` and one of ``3u`` micro-batches (``u`` the stages, 1 without a pipeline) and the
   step time extrapolated linearly to the real count (the steady state adds the same time per
   micro-batch), or the full step where that is not cheaper. After each round the best
   cheap candidates are simulated in full, which tightens the bound for the next.
4. **Rank** by full simulation: the ``top`` best cheap candidates, and every candidate whose
   cheap time is within :data:`EXTRAPOLATION_MARGIN` of the best full step.

The search stops when no candidate is left whose bound could still win, or when ``budget``
candidates were simulated cheaply; the outcome counts the candidates at each fate, so a
budget that cut the search short says so.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from simulator.scenario import Scenario
from simulator.sweep import adapter
from simulator.sweep.candidates import Candidate, Setting, candidates_of, settings_of
from simulator.sweep.objectives import Objective, step_time_objective
from simulator.sweep.plan_memory import combo_of, fits, frugal, over_floor
from simulator.sweep.plan_result import PlanSearch, ranked_frame
from simulator.sweep.plan_runs import (
    Simulator,
    fits_simulated,
    own_plan,
    progress_bar,
    simulate_cheaply,
    simulate_in_full,
    time_of,
)
from simulator.sweep.runner import Backend
from simulator.sweep.space import Choice, Knobs, Rejected, overrides_of, stage_split

log = logging.getLogger("trainsim.plan")

# The cheap simulation's extrapolated step time was within 0.3% of the full step on every
# candidate of the tests' sample (tests/sweep/test_search.py); a candidate is simulated in full
# when its cheap time is within this margin of the best full step, so an extrapolation error
# up to it cannot hide the winner.
EXTRAPOLATION_MARGIN = 0.02
# Candidates simulated cheaply per round (then the best of them in full).
ROUND = 8
DEFAULT_BUDGET = 64
# B: what a plan must leave free beyond the ledger (the caching allocator's fragmentation,
# NCCL's trees and NVLS, the framework's own buffers): a convention of this tool, not a
# measurement; the table shows each plan's peak so a user can judge
DEFAULT_HEADROOM = 2e9
# Degree combinations whose most frugal variant the ledger checks for the candidates a budget
# left (each a few to tens of milliseconds); the rest are reported as not reached.
MAX_COMBOS = 300


@dataclass(frozen=True)
class SearchOptions:
    """What ``trainsim plan`` was asked: GPU counts (None: the scenario's), knobs, the plans to
    rank in full, the cheap-simulation budget, memory headroom (B), the objective."""

    gpus: tuple[int | None, ...] = (None,)
    fixes: tuple[str, ...] = ()
    varies: tuple[str, ...] = ()
    top: int = 5
    budget: int = DEFAULT_BUDGET
    headroom: float = DEFAULT_HEADROOM
    objective: Objective = field(default_factory=step_time_objective)


def search_plans(
    path: Path,
    options: SearchOptions,
    backend: Backend,
    out: Path | None = None,
    progress: bool = True,
) -> PlanSearch:
    """Search the plans of the scenario in ``path`` (see the module doc)."""
    start = time.perf_counter()
    base = adapter.load_scenario(path)
    settings = settings_of(path, base, options.gpus)
    knobs = Knobs.parse(base, options.fixes, options.varies)
    for st in settings:
        st.zeros = tuple(knobs.values("zero", (0, 1, 2, 3)))
    cands: list[Candidate] = []
    rejected: list[Rejected] = []
    for st in settings:
        c, r = candidates_of(st, knobs)
        cands += c
        rejected += r
    walk = _Walk(cands, {st.gpus: st for st in settings}, options, Simulator(backend, out))
    walk.screen_in_rounds(progress)
    walk.settle_what_the_budget_left()
    walk.rank_in_full()
    own = own_plan(settings[0], walk.sim) if len(settings) == 1 else None
    walk.sim.save()
    full_done = walk.judge_full_results()
    ranked = ranked_frame(full_done, options.objective, walk.by_gpus, options.headroom)
    name = base.name or path.stem
    return PlanSearch(
        name,
        [st.gpus for st in settings],
        options.objective.name,
        cands,
        ranked.head(options.top),
        own,
        walk.counts(len(rejected), full_done),
        walk.rounds,
        time.perf_counter() - start,
        {k.key: walk.scenarios[k.key] for k in full_done},
        base,
        path,
        {st.gpus: st.fixed for st in settings},
        min(st.least for st in settings),
        base.cluster.accelerator.hbm_bytes,
    )


BOUND = "its step bound cannot beat the best simulated"


class _Walk:
    """One search's state: the candidates, the best plan simulated in full so far (its
    objective's cost), the scenarios admitted, and two walks over the pending candidates: by
    the estimate (the likely winners first, to set a good plan early) and by the bound (the
    least settled first: when the lowest bound left cannot beat the best, nothing left can)."""

    def __init__(self, cands: list[Candidate], by_gpus: dict[int, Setting], options, sim):
        self.cands, self.by_gpus, self.options, self.sim = cands, by_gpus, options, sim
        self.scenarios: dict[tuple[int, Choice], Scenario] = {}
        self.best = math.inf  # the objective's cost of the best plan simulated in full
        self.rounds: list[dict] = []
        pending = [k for k in cands if k.status == "pending"]
        self.by_estimate = iter(sorted(pending, key=lambda k: self.cost(k, k.order_s)))
        self.by_bound = sorted(pending, key=lambda k: self.cost(k, k.bound_s))
        self.bound_at = 0
        self.settled = False

    def cost(self, k: Candidate, t: float) -> float:
        return self.options.objective.cost(t, self.by_gpus[k.gpus].scenario)

    def admit(self, k: Candidate) -> bool:
        """Screen ``k`` (bound, loader, memory); True if it joins the round."""
        if self.cost(k, k.bound_s) >= self.best:
            k.status, k.reason = "bound", BOUND
            return False
        status, reason, scenario = fits(self.by_gpus[k.gpus], k.choice, self.options.headroom)
        if status != "fits":
            k.status, k.reason = status, reason
            return False
        self.scenarios[k.key] = scenario
        k.status = "queued"
        return True

    def _from_bound(self, batch: list[Candidate], room: int) -> bool:
        """Admit one candidate from the bound's order (True if one joined ``batch``)."""
        while not self.settled and len(batch) < room:
            if self.bound_at >= len(self.by_bound):
                self.settled = True
                break
            k = self.by_bound[self.bound_at]
            if k.status != "pending":
                self.bound_at += 1
                continue
            if self.cost(k, k.bound_s) >= self.best:
                self.settled = True  # every candidate after it is bounded out too
                break
            self.bound_at += 1
            if self.admit(k):
                batch.append(k)
                return True
        return False

    def next_batch(self, room: int) -> list[Candidate]:
        """Up to ``room`` candidates, one from each walk in turn."""
        batch: list[Candidate] = []
        estimate_open = True
        while len(batch) < room and (estimate_open or not self.settled):
            took = False
            for k in self.by_estimate:  # one from the estimate's order
                if k.status == "pending" and self.admit(k):
                    batch.append(k)
                    took = True
                    break
            else:
                estimate_open = False
            took = self._from_bound(batch, room) or took
            if not took and not estimate_open:
                break
        return batch

    def screen_in_rounds(self, progress: bool) -> None:
        """Rounds of cheap simulations within the budget, the best of each round in full
        (it bounds what the rest must beat)."""
        budget, cheap_done = self.options.budget, 0
        bar = progress_bar(progress, budget)
        while cheap_done < budget:
            batch = self.next_batch(min(ROUND, budget - cheap_done))
            if not batch:
                break
            simulate_cheaply(batch, self.scenarios, self.sim)
            cheap_done += len(batch)
            bar.update(len(batch))
            fresh = sorted(
                (k for k in batch if k.cheap_s is not None), key=lambda k: self.cost(k, k.cheap_s)
            )
            full = [k for k in fresh[:1] if k.result is None]
            simulate_in_full(full, self.scenarios, self.sim)
            for k in batch:
                if fits_simulated(k.result, self.options.headroom):
                    self.best = min(self.best, self.cost(k, time_of(k.result)))
            self.rounds.append(
                {"round": len(self.rounds) + 1, "cheap": len(batch), "full": len(full)}
            )
            self.sim.save()  # a search stopped now resumes from here
        bar.close()

    def settle_what_the_budget_left(self) -> None:
        """Candidates not yet decided: bounded out, over memory by the floor or their most
        frugal variant, or could still win (not simulated within the budget)."""
        headroom = self.options.headroom
        for k in self.cands:
            if k.status != "pending":
                continue
            if self.cost(k, k.bound_s) >= self.best:
                k.status, k.reason = "bound", BOUND
                continue
            setting = self.by_gpus[k.gpus]
            status, reason = "oom", over_floor(setting, k.choice, headroom)
            if not reason:
                combo = combo_of(k.choice)
                if combo not in setting.frugal and len(setting.frugal) < MAX_COMBOS:
                    fits(setting, frugal(k.choice, setting.zeros), headroom)
                status, reason = setting.frugal.get(combo, ("", ""))
                reason += " (even with full recompute, micro-batch 1)"
            if status == "oom":
                k.status, k.reason = "oom", reason
            else:
                budget = self.options.budget
                k.status, k.reason = "budget", f"not simulated within the budget of {budget}"

    def rank_in_full(self) -> None:
        """The final round: the top cheap candidates and all within the margin, in full."""
        screened = sorted(
            (k for k in self.cands if k.cheap_s is not None), key=lambda k: self.cost(k, k.cheap_s)
        )
        top, best = self.options.top, self.best
        final = [
            k
            for i, k in enumerate(screened)
            if i < top or self.cost(k, k.cheap_s) <= best * (1 + EXTRAPOLATION_MARGIN)
        ]
        simulate_in_full([k for k in final if k.result is None], self.scenarios, self.sim)
        self.rounds.append({"round": len(self.rounds) + 1, "cheap": 0, "full": len(final)})
        for k in self.cands:
            if k.cheap_s is not None and k.result is None:
                k.status = "screened"
                k.reason = (
                    f"cheap simulation {k.cheap_s:.4g} s: more than "
                    f"{EXTRAPOLATION_MARGIN:.0%} slower than the best in full"
                )

    def judge_full_results(self) -> list[Candidate]:
        """The candidates simulated in full, each with its run's status (over memory when its
        peak leaves less than the headroom)."""
        headroom = self.options.headroom
        full_done = [k for k in self.cands if k.result is not None]
        for k in full_done:
            r = k.result
            k.status = r.get("status", "error")
            capacity = r.get("memory_capacity_bytes", math.inf)
            if k.status == "ok" and r.get("peak_memory_bytes", 0) + headroom > capacity:
                k.status = "oom"
                k.reason = (
                    f"simulated peak {r['peak_memory_bytes'] / 1e9:,.1f} GB + "
                    f"{headroom / 1e9:g} GB headroom over the HBM"
                )
        return full_done

    def counts(self, rejected: int, full_done: list[Candidate]) -> dict[str, int]:
        cands = self.cands
        return {
            "enumerated": len(cands) + rejected,
            "bound": sum(k.status == "bound" for k in cands),
            "infeasible": sum(k.status == "infeasible" for k in cands) + rejected,
            "oom": sum(k.status == "oom" and k.result is None for k in cands),
            "budget": sum(k.status == "budget" for k in cands),
            "cheap": sum(k.cheap_s is not None for k in cands),
            "full": len(full_done),
            "simulations": self.sim.simulated,
        }


__all__ = ["PlanSearch", "SearchOptions", "search_plans", "stage_split", "overrides_of"]
