"""The planner: what a shard count N does to a recipe, computed without compiling.

For each N it lists TUs per shard, per family the shards that get none of its
files, the matrix jobs per lane against GitHub's 256 cap and, with a cost
table, the predicted slowest shard next to the physical bound
max(longest TU, total / N). It recommends an N and runs the checklist every
change of N must pass (filter, family ceiling, ``if(TARGET ...)`` guards, cap).
Every number comes from the functions the jobs themselves call
(:func:`cuw.partition.assignment.recipe_assignment`, :func:`cuw.ci.matrix.jobs_for_cell`).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from cuw.partition.assignment import recipe_assignment
from cuw.partition.coverage import REST_FAMILY, covered_keys, rest_keys
from cuw.partition.costs import CostTable, recipe_costs
from cuw.partition import job_cap
from cuw.base.errors import CuwError, InputError
from cuw.base.reading import is_regular, open_file
from cuw.base.settings import Settings
from cuw.config.grid import cells
from cuw.ci.matrix import MAX_JOBS, RUNGS, jobs_for_cell
from cuw.config.limits import check_count
from cuw.partition.rules import OTHER_FAMILY, families_of
from cuw.config.policy import load_policy
from cuw.config.recipe import Recipe
from cuw.partition.disk_need import disk_line, disk_need, on_linux_runner
from cuw.tools.plan_shards import ShardPrediction, predict_shards, render_shards, runner_line

HIT_SECONDS = 0.03
"""One TU replayed from the cache at the link (nvcc through ccache, measured: 0.03 s)."""
NEAR_BEST = 0.05
"""The recommendation takes the smallest N whose predicted wall is within 5 % of the best."""
_PARTITIONING_PATCH = re.compile(r"CUDA_WHEELS_SHARD_(?:INDEX|COUNT)|ctx\.shard\b")


@dataclass(frozen=True)
class Inputs:
    """The TUs the partition covers, where that list came from, and their costs."""

    keys: list[str]
    origin: str
    table: Optional[CostTable]
    tree: Optional[Path]
    """The prepared source tree, when one was materialized."""
    rest: list[str] = field(default_factory=list)
    """Of ``keys``, a source-filter recipe's rest: the sources its globs do not cover, which the
    seat partitions (family ``(rest)``; an empty slice of it stubs nothing away)."""


@dataclass
class Row:
    """One N."""

    n: int
    tus_min: int
    tus_max: int
    shards_without_tus: int
    family_empty: dict[str, int]
    """Family -> how many shards hold zero files of it."""
    family_empty_shards: dict[str, list[int]]
    """Family -> which shards (1-based) hold zero files of it."""
    jobs_per_lane: dict[str, int]
    largest_dispatch: int
    """Jobs of the largest lane x CUDA-line group (the matrix's first chunking)."""
    slowest_s: Optional[float] = None
    mean_s: Optional[float] = None
    bound_s: Optional[float] = None
    link_s: Optional[float] = None

    @property
    def wall_s(self) -> Optional[float]:
        return None if self.slowest_s is None or self.link_s is None else self.slowest_s + self.link_s


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Plan:
    recipe: str
    filter: str
    rule: str
    per_family: bool
    origin: str
    tus: int
    """Every TU the shards share out (with the filter: its files and the seat-partitioned rest)."""
    families: dict[str, int]
    total_s: Optional[float]
    longest_s: Optional[float]
    checked_n: int
    rows: list[Row]
    recommended: int
    reason: str
    checks: list[Check] = field(default_factory=list)
    assignment: dict[str, int] = field(default_factory=dict)
    """Key -> shard at ``checked_n`` (what the shards will do)."""
    rest: int = 0
    """Of ``tus``, the source filter's rest that the seat partitions."""
    link_from: Optional[str] = None
    """Where the link estimate comes from: a measured link report, or None (replays alone)."""
    shard_from: Optional[str] = None
    """What a shard costs beside its compiles, from measured shard reports; None: compiles alone."""
    shards: list[ShardPrediction] = field(default_factory=list)
    """Each shard at ``checked_n``: its predicted wall and CPU seconds, jobs and peak memory."""
    runner: str = ""
    """The runner the shards' jobs are chosen for (:func:`cuw.tools.plan_shards.runner_line`)."""
    disk: str = ""
    """The jobs' measured disk need against that runner's free disk, and whether the free-disk step runs."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> str:
        data = asdict(self)
        for row, obj in zip(data["rows"], self.rows):
            row["wall_s"] = obj.wall_s
        data["ok"] = self.ok
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


# -- inputs ----------------------------------------------------------------------


def prepare_tree(recipe: Recipe, dest: Path, *, settings: Settings) -> Path:
    """The recipe's source as a shard sees it before the filter runs: fetched, then patched (no build).
    ``settings``: the run's (its toolkit, source cache and git mirror)."""
    from cuw.config.cell import Cell, local_cell
    from cuw.config.grid import cell_archs
    from cuw.jobs.patching import PatchContext
    from cuw.jobs.patching import apply as apply_patch
    from cuw.jobs.sources import materialize
    from cuw.toolchain.toolkit import find_toolkit

    policy = load_policy(Path(recipe.folder).parent)
    try:
        cell = local_cell(recipe, find_toolkit(homes=settings.homes))
    except CuwError:  # no toolkit or torch here: the grid's first cell stands in
        first = cells(recipe, policy.grid)[0]
        cell = Cell(recipe.key, first.lane, first.python, first.cuda, first.torch)
    materialize(recipe, dest, settings=settings)
    try:
        archs = cell_archs(recipe, policy.archs, cell)
    except CuwError:
        archs = []
    apply_patch(recipe, PatchContext(dest, cell, archs, recipe.key))
    return dest


def seat_log_keys(path: Path) -> list[str]:
    """The TUs (CUDA and host) a recorded seat log saw, compiled or stubbed."""
    from cuw.seat.seat_log import read_entries

    if not is_regular(path, "--from-log (a job's logs/seat.jsonl, or its build's .ninja_log)"):
        raise InputError(f"--from-log {path}: no such file (a job's logs/seat.jsonl, or its build's .ninja_log)")
    try:
        with open_file(path, "--from-log") as fh:
            ninja = fh.readline(4096).startswith(b"# ninja log")
        if ninja:  # every compile the build ran, stubs included: the TUs of the partition
            from cuw.partition.costs import ninja_log_times

            return sorted(ninja_log_times(path)[0])
        entries = read_entries(path)
    except UnicodeDecodeError:
        raise InputError(f"--from-log {path}: not a text file (a seat log, logs/seat.jsonl, or a .ninja_log)") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise InputError(f"--from-log {path}: not a seat log (JSON lines expected: {exc})") from None
    keys = {e.key for e in entries if e.key is not None and e.action in ("compiled", "stubbed", "deferred")}
    if not keys:
        raise InputError(f"--from-log {path}: the seat log names no compiled or stubbed TU")
    return sorted(keys)


def gather(recipe: Recipe, work: Path, table: Optional[CostTable], from_log: Optional[Path], settings: Settings) -> Inputs:
    """``filter: source``: the globs' files in the prepared tree. ``seat``: a seat log,
    else the cost table's keys, else every .cu of the prepared tree."""
    if recipe.sharding.filter == "seat" and from_log is not None:
        keys = seat_log_keys(from_log)
        untabled = len(set(keys) - set(table.costs)) if table is not None else 0
        if table is not None and untabled == len(keys):
            raise InputError(
                f"--from-log {from_log}: none of its {len(keys)} TUs is in the cost table {table.path} (another "
                f"recipe's or another build's log?): give a seat log of {recipe.key}, or record a table from this one"
            )
        unseen = f" ({untabled} not in the cost table: each costs its mean)" if untabled else ""
        return Inputs(keys, f"seat log {from_log}{unseen}", table, None)
    if recipe.sharding.filter == "seat" and table is not None:
        return Inputs(sorted(table.costs), f"cost table {table.path}", table, None)
    if from_log is not None:
        raise InputError("--from-log lists a seat's TUs; this recipe uses filter: source, whose files come from its globs")
    tree = prepare_tree(recipe, work / "src", settings=settings)
    keys = covered_keys(recipe, tree)
    rest = rest_keys(recipe, tree)
    what = "sharding.source.globs" if recipe.sharding.source.globs else "every source file"
    origin = f"{what} in the prepared source ({len(keys)} files)"
    if rest:
        origin += f" and the rest the seat partitions ({len(rest)} files)"
    return Inputs(sorted(keys + rest), origin, table, tree, rest)


# -- per N -------------------------------------------------------------------------


def evaluate(recipe: Recipe, inputs: Inputs, n: int, family: dict[str, str]) -> tuple[Row, dict[str, int]]:
    rule = recipe_assignment(recipe, n, inputs.tree, table=inputs.table)
    owners = {k: rule.owner(k) for k in inputs.keys}
    per_shard = Counter(owners.values())
    counts = [per_shard.get(i, 0) for i in range(1, n + 1)]
    empty_shards = {}
    for name in sorted(set(family.values())):
        holding = {owners[k] for k in inputs.keys if family[k] == name}
        empty_shards[name] = [i for i in range(1, n + 1) if i not in holding]
    sized = replace(recipe, sharding=replace(recipe.sharding, count=n))
    per_lane: Counter = Counter()
    per_group: Counter = Counter()
    for cell in cells(sized, load_policy(Path(recipe.folder).parent).grid):
        jobs = len(jobs_for_cell(sized, cell))
        per_lane[cell.lane] += jobs
        per_group[(cell.lane, cell.cuda)] += jobs
    row = Row(
        n,
        min(counts),
        max(counts),
        counts.count(0),
        {k: len(v) for k, v in empty_shards.items()},
        empty_shards,
        dict(sorted(per_lane.items())),
        max(per_group.values(), default=0),
    )
    if inputs.table is not None:
        table = inputs.table
        seconds = [0.0] * n
        for key, shard in owners.items():
            seconds[shard - 1] += table.seconds(key)
        total = sum(seconds)
        longest = max((table.seconds(k) for k in inputs.keys), default=0.0)
        # A shard's build is its compiles (one compile slot) plus what it costs beside them
        # (configure, probes, stubs, its link steps), measured when the table has it.
        beside = table.beside_s
        row.slowest_s = round(max(seconds) + beside, 3)
        row.mean_s = round(total / n + beside, 3)
        row.bound_s = round(max(longest, total / n) + beside, 3)
        # A measured link (the table's ``link``: configure, probes, restore, finish beside its
        # replays) when the table has one; else the replays alone at a measured hit's cost.
        link = inputs.table.link
        row.link_s = round(link.estimate(len(inputs.keys)) if link else len(inputs.keys) * HIT_SECONDS, 3)
    return row, owners


# -- the checklist -------------------------------------------------------------------


def _check_filter(recipe: Recipe) -> Check:
    patch = Path(recipe.folder) / "patch.py"
    partitions = patch.is_file() and _PARTITIONING_PATCH.search(patch.read_text()) is not None
    if partitions and recipe.sharding.filter == "seat":
        return Check(
            "filter",
            False,
            f"{patch} partitions the sources itself, but sharding.filter is seat",
            "set sharding.filter: source (with sharding.source.globs), so the seat stays a pass-through",
        )
    if recipe.sharding.filter == "source" and recipe.sharding.source.seat_rest:
        return Check(
            "filter",
            True,
            "source: the forge deletes out-of-slice files its globs cover; the seat partitions "
            "only the rest (disjoint by the globs)",
        )
    if recipe.sharding.filter == "source":
        return Check(
            "filter",
            True,
            "source: the forge deletes out-of-slice files; the seat is a pure cache pass-through "
            "(seat_rest: false: every shard compiles the rest)",
        )
    return Check("filter", True, "seat: every TU still gets an object, so no target can lose its sources")


def family_ceiling(recipe: Recipe, inputs: Inputs, family: dict[str, str], name: str) -> int:
    """The largest N up to which every shard holds a file of the family (0 when even N=1 has none)."""
    members = [k for k in inputs.keys if family[k] == name]
    for n in range(1, len(members) + 1):
        rule = recipe_assignment(recipe, n, inputs.tree, table=inputs.table)
        if len({rule.owner(k) for k in members}) < n:
            return n - 1
    return len(members)


def _check_family(recipe: Recipe, inputs: Inputs, family: dict[str, str], row: Row) -> Check:
    # The seat's rest stubs, so a shard without a file of it builds anyway: not a family to guard.
    sizes = Counter(v for v in family.values() if v != REST_FAMILY)
    if set(sizes) == {OTHER_FAMILY}:
        ceiling = family_ceiling(recipe, inputs, family, OTHER_FAMILY)
        return Check(
            "family",
            row.shards_without_tus == 0,
            f"no families declared (sharding.source.families); every shard holds a TU up to N={ceiling}",
            f"keep N <= {ceiling}",
        )
    named = {k: v for k, v in sizes.items() if k != OTHER_FAMILY}
    smallest = min(named, key=lambda k: (named[k], k))
    ceiling = family_ceiling(recipe, inputs, family, smallest)
    shown = f"smallest family {smallest!r}: {named[smallest]} files, every shard holds one up to N={ceiling}"
    empty = {k: v for k, v in row.family_empty.items() if v and k != REST_FAMILY}
    if not empty or recipe.sharding.filter == "seat":
        return Check(
            "family",
            True,
            shown
            + (
                f"; at N={row.n} no shard lacks a family"
                if not empty
                else f"; the seat stubs, so empty families at N={row.n} build anyway"
            ),
        )
    listing = ", ".join(f"{k}: {v} of {row.n} shards" for k, v in sorted(empty.items()))
    fix = (
        f"keep N <= {ceiling}"
        + ("" if recipe.sharding.per_family else ", or set sharding.per_family: true (rule sorted or cost)")
        + "; and guard every consumer of a per-family target on if(TARGET ...)"
    )
    return Check("family", False, f"{shown}; at N={row.n} shards with no file of a family: {listing}", fix)


def _check_guards(recipe: Recipe, tree: Optional[Path]) -> Check:
    if recipe.sharding.filter == "seat":
        return Check("guards", True, "seat: every source stays in every shard, so every target exists")
    if tree is None:
        return Check("guards", True, "no source tree prepared: nothing to lint")
    try:
        from cuw.tools.cmake_guards import find_unguarded
    except ImportError:
        return Check("guards", True, "not checked: cuw.tools.cmake_guards is not available in this checkout")
    build_root = tree / recipe.build_subdir
    try:
        findings = find_unguarded(build_root)
    except CuwError:  # setup.py may drive CMake (natten) or not build with CMake at all
        return Check("guards", True, "no CMake files in the source: no per-family targets to guard")
    if not findings:
        return Check("guards", True, "every consumer of a source-dependent target is guarded on if(TARGET ...)")
    first = findings[0]
    detail = "; ".join(f"{f.file}:{f.line} uses {f.target}" for f in findings[:5])
    more = f" (and {len(findings) - 5} more)" if len(findings) > 5 else ""
    return Check("guards", False, f"{len(findings)} unguarded consumer(s): {detail}{more}", first.fix)


def _check_costs(inputs: Inputs) -> Optional[Check]:
    """A table recorded before the sources changed predicts the wrong shards: name the drift."""
    if inputs.table is None or inputs.tree is None:
        return None
    keys, costed = set(inputs.keys), set(inputs.table.costs)
    stale, unknown = sorted(costed - keys), sorted(keys - costed)
    detail = f"{inputs.table.path}: {len(keys & costed)} of {len(keys)} TUs costed"
    if unknown:
        detail += f"; {len(unknown)} without a cost fall back to the hash rule (e.g. {unknown[0]})"
    if not stale:
        return Check("cost table", True, detail)
    return Check(
        "cost table",
        False,
        f"{detail}; {len(stale)} no longer in the source (e.g. {stale[0]})",
        "record it again from a cold build: cuw costs <recipe> --from <seat log or .ninja_log>",
    )


def _check_cap(row: Row) -> Check:
    detail = (
        f"N={row.n}: "
        + ", ".join(f"{lane} {jobs}" for lane, jobs in row.jobs_per_lane.items())
        + f" jobs; largest lane x CUDA-line dispatch {row.largest_dispatch} (cap {MAX_JOBS})"
    )
    if row.largest_dispatch <= MAX_JOBS:
        return Check("matrix cap", True, detail)
    cells_per_group = max(1, round(row.largest_dispatch / (row.n + 1)))
    fit = MAX_JOBS // cells_per_group - 1
    return Check(
        "matrix cap",
        False,
        detail,
        f"N <= {fit} keeps one lane x CUDA line in one dispatch; above it, `cuw matrix` splits it by "
        f"Python and torch into more chunks (dispatch them one at a time)",
    )


def _check_job_cap(recipe: Recipe, inputs: Inputs, n: int, cap: job_cap.JobCap) -> Optional[Check]:
    """Each shard's predicted build against the job cap (:func:`cuw.partition.job_cap.verdict`)."""
    if inputs.table is None:
        return None
    v = job_cap.verdict(recipe, inputs.table, n, cap, RUNGS, inputs.keys, inputs.tree)
    return Check("job cap", v.ok, v.detail, v.fix)


def _under_cap(row: Row, cap: job_cap.JobCap) -> bool:
    """A row whose every shard is one job under the cap (no cost table: nothing predicted, so yes)."""
    return row.slowest_s is None or row.slowest_s <= cap.budget_s


# -- the plan ------------------------------------------------------------------------


def _recommend(rows: list[Row], feasible: list[Row]) -> tuple[int, str]:
    pool = feasible or rows
    caveat = "" if feasible else " (no N passes every check: see the fixes)"
    if all(r.wall_s is not None for r in pool):
        best = min(r.wall_s for r in pool if r.wall_s is not None)
        pick = min((r for r in pool if r.wall_s is not None and r.wall_s <= best * (1 + NEAR_BEST)), key=lambda r: r.n)
        return pick.n, (
            f"smallest N within {NEAR_BEST:.0%} of the best predicted wall ({best:.1f} s) among N "
            f"where every shard has work and the checks allow it: "
            f"slowest shard {pick.slowest_s:.1f} s (bound {pick.bound_s:.1f} s) + link {pick.link_s:.1f} s" + caveat
        )
    pick = max(
        pool,
        key=lambda r: (
            r.shards_without_tus == 0 and not any(v for k, v in r.family_empty.items() if k != REST_FAMILY),
            -r.tus_max,
            -r.n,
        ),
    )
    held = "with every shard holding a TU of every family" if feasible else "among the planned N"
    return pick.n, (
        f"fewest TUs on the slowest shard ({pick.tus_max}) {held}; "
        f"no cost table, so TU counts stand in for seconds (record one: cuw costs {{recipe}} --from <log>)" + caveat
    )


def _shards(recipe: Recipe, inputs: Inputs, row: Row, owners: dict[str, int]) -> tuple[list[ShardPrediction], str, str]:
    """The checked N's shards on the runner of the recipe's Linux lane (else its first lane), and what
    the disk need means there (:func:`cuw.partition.disk_need.disk_line`, the rule ``cuw matrix`` applies)."""
    lanes = sorted(row.jobs_per_lane, key=lambda lane: (lane != "linux", lane)) or ["linux"]
    policy = load_policy(Path(recipe.folder).parent)
    runner = policy.runners.get(lanes[0])
    image = policy.images[lanes[0]].ref if lanes[0] in policy.images else ""
    need = disk_need(inputs.table, runner, on_linux_runner(lanes[0]))
    shards = predict_shards(inputs.table, owners, row.n, runner, recipe.max_jobs)
    return shards, runner_line(lanes[0], runner), disk_line(need, lanes[0], image)


def plan(
    recipe: Recipe,
    counts: list[int],
    costs_file: Optional[Path] = None,
    from_log: Optional[Path] = None,
    work: Optional[Path] = None,
    checked_n: Optional[int] = None,
    *,
    settings: Settings,
    cap_minutes: Optional[float] = None,
) -> Plan:
    """Plans ``counts``; the checklist runs at ``checked_n`` (default: the recipe's sharding.count).
    ``settings``: the run's, for the source it prepares.
    ``cap_minutes``: a job's limit instead of the policy's ``jobs.limit_minutes``."""
    table, cap = _cost_table_and_cap(recipe, counts, costs_file, checked_n, cap_minutes)
    with tempfile.TemporaryDirectory(prefix="cuw-plan-") as scratch:
        inputs = gather(recipe, work or Path(scratch), table, from_log, settings)
        if not inputs.keys:
            raise InputError(f"recipe {recipe.key!r}: the partition covers no TU ({inputs.origin})")
        family = {
            **families_of(set(inputs.keys) - set(inputs.rest), recipe.sharding.source.families),
            **{k: REST_FAMILY for k in inputs.rest},
        }
        checked = checked_n or recipe.sharding.count
        if len(counts) > 1:  # a range stops where shards would run out of TUs
            counts = [n for n in counts if n <= len(inputs.keys)] or counts[:1]
        evaluated = {n: evaluate(recipe, inputs, n, family) for n in sorted(set(counts) | {checked})}
        rows = [evaluated[n][0] for n in sorted(set(counts))]
        row, owners = evaluated[checked]
        checks = _checklist(recipe, inputs, family, row, checked, cap)
        shards, runner, disk = _shards(recipe, inputs, row, owners)
    recommended, reason = _recommend(rows, _feasible(recipe, rows, cap))
    table_costs = inputs.table.costs if inputs.table else None
    link_from, shard_from = _measured_from(inputs.table)
    return Plan(
        recipe=recipe.key,
        filter=recipe.sharding.filter,
        rule=recipe.sharding.rule,
        per_family=recipe.sharding.per_family,
        origin=inputs.origin,
        tus=len(inputs.keys),
        families=dict(sorted(Counter(family.values()).items())),
        total_s=round(sum(table_costs.values()), 3) if table_costs else None,
        longest_s=round(max(table_costs.values()), 3) if table_costs else None,
        link_from=link_from,
        shard_from=shard_from,
        checked_n=checked,
        rows=rows,
        recommended=recommended,
        reason=reason.replace("{recipe}", recipe.key),
        checks=checks,
        assignment=dict(sorted(owners.items())),
        rest=len(inputs.rest),
        shards=shards,
        runner=runner,
        disk=disk,
    )


def _cost_table_and_cap(
    recipe: Recipe, counts: list[int], costs_file: Optional[Path], checked_n: Optional[int], cap_minutes: Optional[float]
) -> tuple[Optional[CostTable], job_cap.JobCap]:
    """The counts checked; the cost table the plan reads (``costs_file``, else the recipe's) and the job cap."""
    if not counts:
        raise InputError("no shard count to plan")
    for n in (*counts, *([checked_n] if checked_n is not None else [])):
        check_count(n, "shard count")
    cap = job_cap.job_cap(load_policy(Path(recipe.folder).parent).jobs, cap_minutes)
    from cuw.partition.costs import load

    table = load(costs_file) if costs_file else recipe_costs(recipe)
    if recipe.sharding.rule == "cost" and table is None:
        raise InputError(f"recipe {recipe.key!r}: rule cost needs a cost table: cuw costs {recipe.key} --from <log>")
    return table, cap


def _checklist(
    recipe: Recipe, inputs: Inputs, family: dict[str, str], row: Row, checked: int, cap: job_cap.JobCap
) -> list[Check]:
    checks = [
        _check_filter(recipe),
        _check_family(recipe, inputs, family, row),
        _check_guards(recipe, inputs.tree),
        _check_cap(row),
    ]
    drift = _check_costs(inputs)
    capped = _check_job_cap(recipe, inputs, checked, cap)
    return checks + [c for c in (drift, capped) if c]


def _feasible(recipe: Recipe, rows: list[Row], cap: job_cap.JobCap) -> list[Row]:
    # A seat stubs, so an empty family still builds; with the source filter it sets the ceiling.
    return [
        r
        for r in rows
        if r.largest_dispatch <= MAX_JOBS
        and r.shards_without_tus == 0
        and _under_cap(r, cap)
        and (recipe.sharding.filter == "seat" or not any(v for k, v in r.family_empty.items() if k != REST_FAMILY))
    ]


def _measured_from(table: Optional[CostTable]) -> tuple[Optional[str], Optional[str]]:
    """Where the link's and the shards' own costs come from, when the cost table measured them."""
    link_from = (
        f"measured link ({table.link.fixed_s:.1f} s beside its replays, {table.link.per_replay_s:.3f} s "
        f"per replay; {table.link.source})"
        if table is not None and table.link
        else None
    )
    shard_from = (
        f"measured shards ({table.shard.fixed_s:.1f} s beside their compiles; {table.shard.source})"
        if table is not None and table.shard
        else None
    )
    return link_from, shard_from


def render(p: Plan) -> str:
    """The plan as a table for a terminal."""
    fams = [f for f in p.families if set(p.families) != {OTHER_FAMILY}]
    lines: list[str] = [
        f"plan for {p.recipe}: filter {p.filter}, rule {p.rule}{', per family' if p.per_family else ''}; "
        f"{p.tus} TUs from {p.origin}" + (f" (family {REST_FAMILY})" if p.rest else ""),
        "families: " + (", ".join(f"{k} {v}" for k, v in p.families.items()) if fams else "none declared"),
    ]
    if p.total_s is not None:
        lines.append(
            f"cost table: {p.total_s:.1f} s in all, longest TU {p.longest_s:.1f} s; link: "
            + (
                p.link_from
                or f"replays alone at {HIT_SECONDS} s each (record a link report: cuw costs {p.recipe} --from <link report>)"
            )
        )
        lines.append(
            "shard: "
            + (
                p.shard_from
                or f"its compiles alone, in one compile slot (record shard reports: "
                f"cuw costs {p.recipe} --from <cuw-shard-*.report.json>)"
            )
        )
    per_lane = {r.n: ",".join(f"{lane[:7]}:{jobs}" for lane, jobs in r.jobs_per_lane.items()) for r in p.rows}
    width = max([len("jobs/lane"), *map(len, per_lane.values())])  # the column as wide as its longest entry
    head = f"{'N':>4} {'TUs/shard':>10} {'no TUs':>6} " + " ".join(f"{'no ' + f[:10]:>13}" for f in fams)
    head += f" {'jobs/lane':>{width}} {'dispatch':>8}"
    if p.total_s is not None:
        head += f" {'slowest s':>9} {'bound s':>8} {'link s':>7} {'wall s':>8}"
    lines += ["", head]
    for r in p.rows:
        mark = "*" if r.n == p.recommended else " "
        line = f"{r.n:>3}{mark} {f'{r.tus_min}-{r.tus_max}':>10} {r.shards_without_tus:>6} "
        line += " ".join(f"{r.family_empty[f]:>13}" for f in fams)
        line += f" {per_lane[r.n]:>{width}} {r.largest_dispatch:>8}"
        if r.wall_s is not None:
            line += f" {r.slowest_s:>9.1f} {r.bound_s:>8.1f} {r.link_s:>7.1f} {r.wall_s:>8.1f}"
        lines.append(line)
    lines += ["", *render_shards(p.shards, p.checked_n, p.runner), p.disk]
    lines += ["", f"recommended N={p.recommended}: {p.reason}", "", f"checks at N={p.checked_n}:"]
    for c in p.checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'} {c.name:10} {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)


def parse_counts(shards: Optional[int], span: Optional[str]) -> list[int]:
    """``--shards N`` or ``--range A..B`` (default 2..64)."""
    if shards is not None and span is not None:
        raise InputError("give --shards N or --range A..B, not both")
    if shards is not None:
        return [check_count(shards, "--shards")]
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*\.\.\s*([0-9]{1,9})\s*", span or "2..64")
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise InputError(f"--range {span!r} is not A..B with 1 <= A <= B (for example 2..64)")
    check_count(int(match.group(2)), "--range end")
    return list(range(int(match.group(1)), int(match.group(2)) + 1))
