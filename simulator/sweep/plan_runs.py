"""The plan search's simulations: cheap ones (two short steps, extrapolated to the real
micro-batch count) and full ones, each scenario run once on the backend."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from simulator.scenario import Scenario, ScenarioError
from simulator.scenario.errors import Position, Problem
from simulator.sweep.candidates import Candidate, Setting
from simulator.sweep.runner import Backend
from simulator.sweep.space import Choice
from simulator.sweep.store import read_results, write_results
from simulator.sweep.worker import Task, scenario_hash


def reduced_counts(c: Choice, micro_batches: int) -> tuple[int, int] | None:
    """The two micro-batch counts the cheap simulation runs (``2u``, ``3u``; ``u`` the stages,
    1 without a pipeline), or None when simulating them costs more than 70% of the full step
    (then the full step is simulated)."""
    unit = c.pp if c.pp > 1 else 1
    m1, m2 = 2 * unit, 3 * unit
    if m1 + m2 > 0.7 * micro_batches:
        return None
    return m1, m2


def extrapolate(m1: int, t1: float, m2: int, t2: float, m: int) -> float:
    """The step time at ``m`` micro-batches from steps of ``m1`` and ``m2``: each micro-batch
    past the warm-up adds the same time (the steady state's period)."""
    return t2 + (m - m2) * (t2 - t1) / (m2 - m1)


def with_batch(scenario: Scenario, count: int) -> Scenario:
    """``scenario`` with ``count`` micro-batches per pipeline (a smaller global batch)."""
    batch = count * scenario.dp * scenario.training.micro_batch
    training = scenario.training.model_copy(update={"global_batch": batch})
    return scenario.model_copy(update={"training": training})


class Simulator:
    """Runs scenarios on a backend, each once (results kept by scenario hash, and in the
    output folder's ``results.parquet`` so that a search run again resumes)."""

    def __init__(self, backend: Backend, out_dir: Path | None):
        self.backend = backend
        self.out_dir = out_dir
        self.rows: dict[str, dict] = {}
        if out_dir is not None:
            stored, _ = read_results(out_dir)
            if not stored.empty and "scenario_hash" in stored:
                for row in stored.to_dict("records"):
                    if row.get("status") in ("ok", "oom"):
                        self.rows[row["scenario_hash"]] = row
        self.simulated = 0

    def run(self, scenarios: list[Scenario]) -> list[dict]:
        hashes = [scenario_hash(s) for s in scenarios]
        todo = {h: Task(h, s) for h, s in zip(hashes, scenarios, strict=True) if h not in self.rows}
        if todo:
            for row in self.backend(list(todo.values())):
                self.rows[row["scenario_hash"]] = row
            self.simulated += len(todo)
        return [self.rows[h] for h in hashes]

    def save(self) -> None:
        if self.out_dir is None or not self.rows:
            return
        frame = pd.DataFrame(list(self.rows.values()))
        frame = frame.drop(columns=[c for c in ("point", "base") if c in frame])
        frame.insert(0, "point", range(len(frame)))
        frame.insert(1, "base", False)
        write_results(frame, [], self.out_dir)


def fits_simulated(row: dict | None, headroom: float) -> bool:
    """A fully simulated plan that may set the bar: it ran without OOM and its simulated
    peak leaves ``headroom`` bytes of its HBM."""
    if row is None or row.get("status") != "ok":
        return False
    peak, capacity = row.get("peak_memory_bytes"), row.get("memory_capacity_bytes")
    return peak is None or capacity is None or peak + headroom <= capacity


def time_of(row: dict) -> float | None:
    if row.get("status") not in ("ok", "oom"):
        return None
    return float(row["step_time_s"])


def progress_bar(enabled: bool, total: int):
    return tqdm(total=total, desc="plan search", unit="plan", file=sys.stderr, disable=not enabled)


def simulate_cheaply(batch: list[Candidate], scenarios: dict, sim: Simulator) -> None:
    """Simulate each candidate of ``batch`` cheaply (module doc), setting ``cheap_s`` (and
    ``result`` where the full step was simulated)."""
    jobs: list[tuple[Candidate, list[int]]] = []
    runs: list[Scenario] = []
    for k in batch:
        s = scenarios[k.key]
        m = s.micro_batches
        counts = reduced_counts(k.choice, m)
        reduced = []
        if counts is not None:
            try:
                reduced = [_checked(with_batch(s, n)) for n in counts]
            except ScenarioError:
                counts = None
        if counts is None:
            jobs.append((k, [m]))
            runs.append(s)
        else:
            jobs.append((k, list(counts)))
            runs += reduced
    rows = iter(sim.run(runs))
    for k, counts in jobs:
        got = [next(rows) for _ in counts]
        times = [time_of(r) for r in got]
        if any(t is None for t in times):
            k.status, k.reason = got[0].get("status", "error"), got[0].get("reason", "")
            continue
        if len(counts) == 1:
            k.cheap_s, k.cheap_exact, k.result = times[0], True, got[0]
            continue
        s = scenarios[k.key]
        m = s.micro_batches
        k.cheap_s = extrapolate(counts[0], times[0], counts[1], times[1], m)


def _checked(s: Scenario) -> Scenario:
    """``s`` revalidated by the loader's checks (a schedule's condition on the micro-batches)."""
    from simulator.scenario.checks import check_scenario

    findings = check_scenario(s)
    if findings:
        raise ScenarioError(
            [Problem(Position("<reduced>"), ".".join(findings[0][0]), findings[0][1])]
        )
    return s


def simulate_in_full(ks: list[Candidate], scenarios: dict, sim: Simulator) -> None:
    for k, row in zip(ks, sim.run([scenarios[k.key] for k in ks]), strict=True):
        k.result = row


def own_plan(setting: Setting, sim: Simulator) -> dict | None:
    """The scenario's own parallelism, simulated."""
    try:
        scenario = setting.spec.scenario({})
    except ScenarioError as exc:
        return {"status": "infeasible", "reason": str(exc).splitlines()[0]}
    row = sim.run([scenario])[0]
    keep = ["status", "reason", "step_time_s", "mfu", "peak_memory_bytes"]
    return {k: v for k, v in row.items() if k in keep}
