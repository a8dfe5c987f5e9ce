"""``cuw plan --farm``: the whole grid's wall time and runner-hours, before anything is dispatched.

Every recipe with a cost table (``recipes/<name>/costs.json``, measured compiles, and the measured
seconds a shard and a link cost beside them) is planned at its ``sharding.count`` exactly as
``cuw plan`` plans one N (:func:`cuw.tools.planner.evaluate`: the table's TUs, the recipe's own
rule): each cell of the grid is then N shard jobs of those seconds and a link job after them (a
lane that does not shard: one job of every compile and the link). The jobs are scheduled on C
runners, longest first, a link as soon as its shards end (a list schedule: a real queue is no
better than its longest job, and rarely as good as this). Predictions are compile seconds on the
machine that measured the table; a hosted runner's differ by its cores and load, so the numbers
compare choices (C, N) more than they promise hours. Recipes without a table are named, not guessed.
Shards past the job cap are named as ``cuw plan`` names them (:func:`cuw.partition.job_cap.verdict`):
the chain each needs, or the smallest N that needs none. A chained shard's parts run one after
another, so it is scheduled as one unit whose seconds are its compiles plus, for every part, what a
shard costs beside them (each part configures, restores and packs again); each part counts as a job.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Optional

from cuw.ci.matrix import RUNGS, UNVERIFIED_LANES
from cuw.config.grid import Grid, cells
from cuw.config.policy import JobPolicy
from cuw.config.recipe import Recipe
from cuw.partition import job_cap
from cuw.partition.costs import recipe_costs
from cuw.partition.rules import families_of
from cuw.tools.planner import Inputs, evaluate

PLAN_LIMITS = {"Free": 20, "Pro": 40, "Team": 60, "Enterprise": 500}
"""Concurrent standard hosted jobs per account plan (docs.github.com, Actions limits)."""


@dataclass(frozen=True)
class CellJobs:
    recipe: str
    cell: str
    lane: str
    shards: tuple[float, ...]  # seconds per shard: its one job, or its chain's parts end to end
    link: float  # seconds of the link job after them (0 on a lane that does not shard)
    parts: tuple[int, ...] = ()  # jobs per shard (a chain's parts); empty: one each

    @property
    def job_count(self) -> int:
        return (sum(self.parts) if self.parts else len(self.shards)) + (self.link > 0)


@dataclass
class FarmPlan:
    jobs: list[CellJobs] = field(default_factory=list)
    unpredicted: dict[str, int] = field(default_factory=dict)  # recipe -> cells without a cost table
    held_back: int = 0  # cells of unverified lanes, left out as the matrix leaves them out
    cap: job_cap.JobCap = field(default_factory=lambda: job_cap.job_cap(JobPolicy()))
    past_cap: dict[str, str] = field(default_factory=dict)  # recipe -> what the cap does to its shards

    @property
    def runner_hours(self) -> float:
        return sum(sum(c.shards) + c.link for c in self.jobs) / 3600

    def per_lane_hours(self) -> dict[str, float]:
        out: defaultdict[str, float] = defaultdict(float)
        for c in self.jobs:
            out[c.lane] += (sum(c.shards) + c.link) / 3600
        return dict(sorted(out.items()))

    def over_cap(self) -> list[str]:
        """Per recipe, its shards past the cap (chain or N), and each whole build job past the limit."""
        whole = {
            f"{c.recipe}: lane {c.lane} builds whole, a job of {c.shards[0] / 3600:.1f} h past the "
            f"{self.cap.limit_s / 60:g} min limit (a whole build does not chain)"
            for c in self.jobs
            if c.link == 0 and c.shards[0] > self.cap.limit_s
        }
        return sorted({f"{key}: {words}" for key, words in self.past_cap.items()} | whole)

    def wall_s(self, runners: int) -> float:
        return schedule(self.jobs, runners)


def schedule(jobs: list[CellJobs], runners: int) -> float:
    """The makespan of every job on ``runners``: compile jobs longest first, a cell's link ready when
    its last shard ends (links go before waiting compiles: they finish cells)."""
    if runners < 1:
        raise ValueError("at least one runner")
    ready: list[tuple[int, float, int, int]] = []  # (priority, -seconds, cell index, shard or -1)
    for i, c in enumerate(jobs):
        for j, s in enumerate(c.shards):
            heapq.heappush(ready, (1, -s, i, j))
    left = [len(c.shards) for c in jobs]
    running: list[tuple[float, int, int]] = []  # (end, cell, shard or -1)
    now = 0.0
    while ready or running:
        while ready and len(running) < runners:
            _, neg, i, j = heapq.heappop(ready)
            heapq.heappush(running, (now - neg, i, j))
        now, i, j = heapq.heappop(running)
        if j >= 0:
            left[i] -= 1
            if left[i] == 0 and jobs[i].link > 0:
                heapq.heappush(ready, (0, -jobs[i].link, i, -1))
    return now


def _per_shard_seconds(
    recipe: Recipe, n: int, cap: Optional[job_cap.JobCap]
) -> Optional[tuple[tuple[float, ...], float, tuple[int, ...]]]:
    """(seconds per shard, link seconds, jobs per shard) at ``n`` from the recipe's cost table; None
    without one. A shard past ``cap`` is its chain: every part pays what a shard costs beside its
    compiles; ``cap`` None: one job each (a whole build does not chain)."""
    table = recipe_costs(recipe)
    if table is None:
        return None
    keys = sorted(table.costs)
    inputs = Inputs(keys, f"cost table {table.path}", table, None)
    family = families_of(set(keys), recipe.sharding.source.families)
    row, _ = evaluate(recipe, inputs, n, family)
    loads = job_cap.shard_loads(recipe, table, n, keys)
    # parts 0 (unbuildable) is named in past_cap and scheduled as one job
    parts = [1 if cap is None else max(job_cap.chain(load, cap).parts, 1) for load in loads]
    seconds = tuple(round(load.compile_s + k * load.beside_s, 3) for load, k in zip(loads, parts))
    return seconds, float(row.link_s or 0.0), tuple(parts)


def _past_cap(recipe: Recipe, n: int, cap: job_cap.JobCap) -> Optional[str]:
    """What the cap does to the recipe's shards at ``n``, as ``cuw plan`` says it; None when each is one job."""
    table = recipe_costs(recipe)
    if table is None or n < 2:
        return None
    v = job_cap.verdict(recipe, table, n, cap, RUNGS)
    return None if not v.over else v.detail + (f"; fix: {v.fix}" if v.fix else "")


def farm_plan(
    recipes: list[Recipe], grid: Grid, counts: Optional[dict[str, int]] = None, cap: Optional[job_cap.JobCap] = None
) -> FarmPlan:
    """Every cell of every recipe as jobs with predicted seconds; ``counts``: a recipe's N instead of its own;
    ``cap``: the job cap (default: the default policy's)."""
    out = FarmPlan(cap=cap or job_cap.job_cap(JobPolicy()))
    for recipe in sorted(recipes, key=lambda r: r.key):
        n = (counts or {}).get(recipe.key, recipe.sharding.count)
        sized = replace(recipe, sharding=replace(recipe.sharding, count=n))
        predicted = _per_shard_seconds(sized, n, out.cap)
        unsharded = _per_shard_seconds(sized, 1, None) if predicted else None
        by_cell = defaultdict(list)
        for cell in cells(sized, grid):
            if cell.lane in UNVERIFIED_LANES:
                out.held_back += 1
                continue
            by_cell[cell.lane].append(cell)
            if predicted is None or unsharded is None:
                out.unpredicted[recipe.key] = out.unpredicted.get(recipe.key, 0) + 1
                continue
            if cell.lane in sized.sharding.platforms and n > 1:
                out.jobs.append(CellJobs(recipe.key, cell.id, cell.lane, predicted[0], predicted[1], predicted[2]))
            else:  # one job builds it all: every compile, then its link
                out.jobs.append(CellJobs(recipe.key, cell.id, cell.lane, (unsharded[0][0] + unsharded[1],), 0.0))
        past = _past_cap(sized, n, out.cap) if by_cell.keys() & set(sized.sharding.platforms) else None
        if past:
            out.past_cap[recipe.key] = past
    return out


def render(plan: FarmPlan, limits: list[int]) -> str:
    lines = [
        f"farm plan: {len(plan.jobs)} cells predicted ({sum(c.job_count for c in plan.jobs)} jobs), "
        f"{plan.runner_hours:.1f} runner-hours"
    ]
    lines += [f"  lane {lane:14} {hours:8.1f} runner-hours" for lane, hours in plan.per_lane_hours().items()]
    for c in limits:
        name = next((k for k, v in PLAN_LIMITS.items() if v == c), "")
        lines.append(f"  {c:4} concurrent jobs{f' ({name})' if name else '':13}: wall {plan.wall_s(c) / 3600:7.1f} h")
    lines += [f"  past the job cap: {item}" for item in plan.over_cap()]
    lines += [f"  not predicted (no costs.json): {key}, {n} cell(s)" for key, n in sorted(plan.unpredicted.items())]
    if plan.held_back:
        lines.append(f"  held back: {plan.held_back} cell(s) of unverified lanes (as cuw matrix leaves them out)")
    return "\n".join(lines)
