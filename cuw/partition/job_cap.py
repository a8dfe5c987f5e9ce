"""The job cap against a shard's predicted seconds: its deadline, the chain of parts it needs, and
the TU no chain can build. ``cuw plan``, ``cuw plan --farm`` and ``cuw matrix`` all ask here.

A job stops at its limit (``jobs.limit_minutes`` in ``recipes/defaults.yml``); of it, a shard job
keeps ``jobs.margin_minutes`` for what is not its build (container, setup steps, packing and
uploading its archive), so a shard's build has ``limit - margin`` seconds: its **budget**.

A shard's deadline counts from its job's start (the workflow records the job's first step's time,
not the compile step's: setup is inside the budget) and is the budget less the shard's longest TU:
the seat starts no compile past a deadline but lets the ones in flight finish, so a compile
started just before it still ends within the budget, and the margin stays for packing and
uploading the archive. That holds for a chain of one part as for a longer one. A shard the cost
table predicts within its budget is one job. One predicted past it is a **chain** of parts: part
1 compiles until its deadline and packs its whole cache; part k restores part k-1's archive (every
finished compile a hit) and goes on; each part compiles for at least ``budget - beside - longest``
seconds (``beside``: what its build costs
beside the compiles, configure and probes, measured in the table's ``shard``). Its chain is
ceil(compile seconds / that) parts, never more than its TUs (each part finishes one at least).
A compile does not resume mid-TU: a TU that does not fit in that window is built by no N and
no chain; fewer archs per TU, nvcc threads or a larger runner shorten it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cuw.base.errors import InputError
from cuw.config.limits import MAX_SHARDS
from cuw.config.policy import LIMIT_MOST_MINUTES, JobPolicy
from cuw.config.recipe import Recipe
from cuw.partition.assignment import recipe_assignment
from cuw.partition.costs import CostTable


@dataclass(frozen=True)
class JobCap:
    limit_s: float
    """A job's limit (its ``timeout-minutes``) in seconds."""
    margin_s: float
    """What a shard job spends beside its build."""
    source: str
    """Where the limit comes from, for messages (``jobs.limit_minutes`` or ``--cap``)."""

    @property
    def budget_s(self) -> float:
        """A shard's build: the limit less the margin."""
        return self.limit_s - self.margin_s

    def describe(self) -> str:
        return (
            f"a shard's build budget of {self.budget_s:,.0f} s ({self.source} {self.limit_s / 60:g} min "
            f"less jobs.margin_minutes {self.margin_s / 60:g})"
        )


def job_cap(jobs: JobPolicy, cap_minutes: Optional[float] = None) -> JobCap:
    """The policy's cap, or ``--cap MINUTES`` in place of its limit (the margin stays the policy's)."""
    if cap_minutes is None:
        return JobCap(jobs.limit_minutes * 60.0, jobs.margin_minutes * 60.0, "jobs.limit_minutes")
    least = jobs.margin_minutes + 1  # the margin is kept back; a shard gets at least a minute to build
    if not least <= cap_minutes <= LIMIT_MOST_MINUTES:
        raise InputError(
            f"--cap {cap_minutes:g}: a job's limit in minutes from {least:g} (jobs.margin_minutes {jobs.margin_minutes:g} "
            f"in recipes/defaults.yml, which a shard keeps back, plus one to build) and at most {LIMIT_MOST_MINUTES}"
        )
    return JobCap(cap_minutes * 60.0, jobs.margin_minutes * 60.0, "--cap")


@dataclass(frozen=True)
class ShardLoad:
    """One shard's predicted build: its compiles in one compile slot, and what it costs beside them."""

    index: int
    compile_s: float
    longest_s: float
    longest_key: str
    beside_s: float
    tus: int

    @property
    def total_s(self) -> float:
        return self.compile_s + self.beside_s


def shard_loads(
    recipe: Recipe, table: CostTable, n: int, keys: Optional[list[str]] = None, tree: Optional[Path] = None
) -> list[ShardLoad]:
    """Every shard's load at ``n``: ``keys`` (default: the table's) owned as the jobs own them; a TU
    the table never saw costs the table's mean, as in the planner."""
    rule = recipe_assignment(recipe, n, tree, table=table)
    owned: dict[int, list[tuple[float, str]]] = {i: [] for i in range(1, n + 1)}
    for key in keys if keys is not None else sorted(table.costs):
        owned[rule.owner(key)].append((table.seconds(key), key))
    loads = []
    for i, tus in owned.items():
        longest, key = max(tus, key=lambda t: (t[0], t[1]), default=(0.0, ""))
        loads.append(ShardLoad(i, sum(s for s, _ in tus), longest, key, table.beside_s, len(tus)))
    return loads


@dataclass(frozen=True)
class Chain:
    load: ShardLoad
    parts: int
    """1: one job; k: a chain of k parts; 0: no chain builds it (a TU longer than a part's window)."""
    deadline_s: int
    """Seconds after the shard's job starts at which it starts no more compiles: the budget less its longest TU."""


def chain(load: ShardLoad, cap: JobCap) -> Chain:
    """The shard as one job, a chain, or unbuildable (parts 0) under ``cap``."""
    deadline = int(cap.budget_s - load.longest_s)  # a compile started by then ends within the budget
    if load.total_s <= cap.budget_s:
        return Chain(load, 1, deadline)
    window = cap.budget_s - load.beside_s - load.longest_s
    if window <= 0:
        return Chain(load, 0, 0)
    parts = min(math.ceil(load.compile_s / window), load.tus)
    return Chain(load, parts, deadline)


def smallest_n_under(
    recipe: Recipe,
    table: CostTable,
    cap: JobCap,
    above: int,
    keys: Optional[list[str]] = None,
    tree: Optional[Path] = None,
) -> Optional[int]:
    """The smallest N above ``above`` whose every shard is one job under ``cap``; None when no N up to
    the TU count (or the shard cap) does. Starts where the compiles could fit at all."""
    count = len(keys if keys is not None else table.costs)
    room = cap.budget_s - table.beside_s
    if room <= 0:
        return None
    total = table.wall_of(keys) if keys is not None else table.total
    for n in range(max(above + 1, math.ceil(total / room)), min(count, MAX_SHARDS) + 1):
        if all(load.total_s <= cap.budget_s for load in shard_loads(recipe, table, n, keys, tree)):
            return n
    return None


# -- the words: one sentence per verdict, for the plan, the farm plan and the matrix ------------


def _over_words(c: Chain, n: int) -> str:
    return f"shard {c.load.index}/{n} predicted at {c.load.total_s:,.0f} s"


def _unbuildable_words(chains: list[Chain], cap: JobCap) -> str:
    """Why no N and no chain builds these shards' longest TUs."""
    named = ", ".join(f"{c.load.longest_key} predicted at {c.load.longest_s:,.0f} s" for c in chains[:3])
    more = f" and {len(chains) - 3} more" if len(chains) > 3 else ""
    beside = chains[0].load.beside_s
    less = f", less the shard's {beside:,.0f} s beside its compiles" if beside else ""
    return (
        f"{named}{more}: {'each ' if len(chains) > 1 else ''}one compile that does not fit in {cap.describe()}{less}: "
        "no N and no chain builds it (a compile does not resume mid-TU)"
    )


UNBUILDABLE_FIX = (
    "shorten that compile: fewer archs per TU (the recipe's archs), nvcc_threads (the gencode targets of "
    "one TU in parallel), or a larger runner (self-hosted, with a longer jobs.limit_minutes)"
)


def _n_words(n: Optional[int], recipe: Recipe) -> str:
    if n is None:
        return "no N up to one TU per shard brings every shard under it"
    return f"N={n} brings every shard under it (sharding.count in recipes/{recipe.key}/recipe.yml)"


@dataclass(frozen=True)
class Verdict:
    """What the cap does to a recipe at N: ``ok`` when the workflow builds every shard (one job, or
    a chain its rungs hold); ``over`` when some shard is past the budget."""

    ok: bool
    over: bool
    detail: str
    fix: str
    chains: tuple[Chain, ...]
    """Each shard's, in shard order."""


def verdict(
    recipe: Recipe,
    table: CostTable,
    n: int,
    cap: JobCap,
    rungs: int,
    keys: Optional[list[str]] = None,
    tree: Optional[Path] = None,
) -> Verdict:
    """Each shard's predicted build at ``n`` against ``cap``: one job each; a chain of at most
    ``rungs`` parts (flagged, with the smallest N that needs none); a longer chain; a TU no chain builds."""
    chains = tuple(chain(load, cap) for load in shard_loads(recipe, table, n, keys, tree))
    over = [c for c in chains if c.parts != 1]
    if not over:
        slowest = max(c.load.total_s for c in chains)
        return Verdict(True, False, f"N={n}: slowest shard {slowest:,.0f} s predicted, within {cap.describe()}", "", chains)
    unbuildable = [c for c in over if c.parts == 0]
    if unbuildable:
        return Verdict(False, True, f"N={n}: {_unbuildable_words(unbuildable, cap)}", UNBUILDABLE_FIX, chains)
    worst = max(over, key=lambda c: (c.parts, c.load.total_s))
    fit = _n_words(smallest_n_under(recipe, table, cap, n, keys, tree), recipe)
    detail = (
        f"N={n}: {len(over)} shard(s) predicted past {cap.describe()}, the longest chain "
        f"{_over_words(worst, n)}: {worst.parts} parts"
    )
    if worst.parts > rungs:
        return Verdict(False, True, f"{detail}; build.yml has {rungs} rungs", fit, chains)
    return Verdict(True, True, f"{detail} (cuw matrix emits the ladder, up to {rungs} parts); or {fit}", "", chains)
