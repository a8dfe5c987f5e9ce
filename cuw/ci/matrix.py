"""The GitHub Actions matrix: every job of the selected cells, in dispatchable chunks.

A sharded cell is N ``shard`` jobs plus one ``link`` job; a cell on a lane that
does not shard is one ``build`` job. Every shard job carries its deadline under the job cap
(:mod:`cuw.partition.job_cap`); a shard its cost table predicts past the cap is a chain of parts,
part k in the workflow's rung k (``compile``, ``compile_2``, ...), and the link takes each
shard's last part. GitHub caps a matrix at 256 jobs and a
job output at 1 MB, so jobs are grouped into chunks (by package, lane and CUDA
line, split further by Python and torch when needed), never truncated; a
workflow runs one chunk by its id. A filter that matches no cell is an error
that says why.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence

from cuw.jobs.archive import archive_name
from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.config.grid import Grid, cells, collapse, collapses_python, torch_pin
from cuw.config.policy import JobPolicy, Runner
from cuw.config.recipe import Recipe
from cuw.partition import job_cap
from cuw.partition.costs import CostTable, recipe_costs
from cuw.partition.disk_need import container_mounts, disk_line, disk_need, on_linux_runner

MAX_JOBS = 256
MAX_BYTES = 1_000_000
RUNGS = 3
"""The parts a shard's chain may have: build.yml's rungs, jobs ``compile`` (part 1), ``compile_2`` and
``compile_3`` (tests/test_workflows.py holds the workflow to it)."""


@dataclass(frozen=True)
class Filters:
    platform: tuple[str, ...] = ()
    cuda: tuple[str, ...] = ()
    pytorch: tuple[str, ...] = ()
    python: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    kind: str  # shard | link | build
    recipe: str
    lane: str
    python: str
    cuda: str
    torch: str  # "" for torch-free
    cell: str
    shard: str  # "3/23", "" for link/build
    artifact: str  # the archive a shard uploads, or the pattern a link downloads
    image: str = ""  # the lane's build image (the job's `container:`); "" runs on the runner itself
    torch_pin: str = ""  # the exact torch release the job installs (grid.torch.<line>.patch); "": the line's newest
    deadline_s: int = 0  # a shard: seconds after its start at which it starts no compile; 0: none
    part: int = 1  # a shard: which part of its chain this job is (rung ``compile`` is 1, ``compile_<k>`` is k)
    parts: int = 1  # a shard: the parts of its chain (1: one job)
    resume: str = ""  # a part after the first: the artifact of the part before it, which it resumes
    free_disk: bool = False  # the workflow frees the runner's preinstalled folders first (cuw.partition.disk_need)
    free_disk_mounts: str = ""  # free_disk in a build image: the container options that mount those folders
    build_number: str = ""  # a link or build job: the wheel's build number (`--build-number`; "": a first build)


@dataclass(frozen=True)
class Rung:
    """One shard's plan under the job cap: its chain's parts and its deadline."""

    parts: int
    deadline_s: int


def part_artifact(cell: Cell, index: int, count: int, part: int) -> str:
    """A part before a chain's last: named apart from ``cuw-shard-<cell>-*``, the link's pattern, so the
    link downloads the last part of each shard and no other (the archive inside has the shard's name)."""
    return f"cuw-part{part}-{cell.id}-{index}of{count}"


def _shard_jobs(cell: Cell, i: int, n: int, rung: Rung, template: Job) -> list[Job]:
    """Shard ``i``'s jobs, each the cell's ``template`` made a shard: part 1, then a continuation per
    further part; the last uploads the archive's own name."""
    return [
        replace(
            template,
            kind="shard",
            shard=f"{i}/{n}",
            artifact=archive_name(cell, i, n) if part == rung.parts else part_artifact(cell, i, n, part),
            deadline_s=rung.deadline_s,
            part=part,
            parts=rung.parts,
            resume=part_artifact(cell, i, n, part - 1) if part > 1 else "",
        )
        for part in range(1, rung.parts + 1)
    ]


def jobs_for_cell(
    recipe: Recipe,
    cell: Cell,
    images: Optional[Mapping[str, str]] = None,
    pin: str = "",
    rungs: Optional[Sequence[Rung]] = None,
) -> list[Job]:
    """The cell's jobs; ``rungs``: each shard's chain and deadline (default: one job each, under the
    default policy's cap)."""
    n = recipe.sharding.count if cell.lane in recipe.sharding.platforms else 1
    link = Job(
        kind="link",
        recipe=recipe.key,
        lane=cell.lane,
        python=cell.python,
        cuda=cell.cuda,
        torch=cell.torch or "",
        cell=cell.id,
        shard="",
        artifact=f"cuw-shard-{cell.id}-*",
        image=(images or {}).get(cell.lane, ""),
        torch_pin=pin,
    )
    if n == 1:
        return [replace(link, kind="build", artifact="")]
    plans = list(rungs) if rungs is not None else [Rung(1, int(job_cap.job_cap(JobPolicy()).budget_s))] * n
    return [job for i in range(1, n + 1) for job in _shard_jobs(cell, i, n, plans[i - 1], link)] + [link]


def recipe_rungs(recipe: Recipe, cap: job_cap.JobCap, cell_id: str) -> list[Rung]:
    """Each shard's chain at the recipe's N from its cost table (one job each at the cap's deadline
    without one). A chain longer than :data:`RUNGS`, or a TU no chain builds, is an error naming
    ``cell_id`` (the first cell it would hit) and the fix."""
    table = recipe_costs(recipe)
    if table is None:
        return [Rung(1, int(cap.budget_s))] * recipe.sharding.count
    v = job_cap.verdict(recipe, table, recipe.sharding.count, cap, RUNGS)
    if not v.ok:
        raise InputError(f"{cell_id}: {v.detail}: {v.fix}")
    return [Rung(c.parts, c.deadline_s) for c in v.chains]


def with_free_disk(
    jobs: list[Job], table: Optional[CostTable], runners: Mapping[str, Runner], notes: dict[str, str]
) -> list[Job]:
    """``jobs`` (one cell's), each marked ``free_disk`` where the recipe's measured disk need (``table``),
    with its margin, exceeds its lane runner's free disk and the job runs on a Linux runner; a job in a
    build image also gets the container options that mount the host's folders for the step. A need the
    step cannot meet (a runner that is not Linux) is said in ``notes``, per recipe and lane."""
    if not jobs or table is None:
        return jobs
    first = jobs[0]
    need = disk_need(table, runners.get(first.lane), on_linux_runner(first.lane))
    if not need.linux and any(need.exceeds(job.kind) for job in jobs):
        notes[f"{first.recipe} {first.lane}"] = disk_line(need, first.lane, first.image)
    out = []
    for job in jobs:
        free = need.free_disk(job.kind)
        out.append(replace(job, free_disk=free, free_disk_mounts=container_mounts() if free and job.image else ""))
    return out


def select(recipe: Recipe, grid: Grid, f: Filters) -> list[Cell]:
    """The recipe's cells that pass the filters; a filter naming nothing of this recipe is an error.
    A recipe whose wheel serves every Python is filtered per Python, then collapsed: its cell builds
    with the lowest Python the filters keep."""
    everything = cells(recipe, grid, per_python=True)
    if f.pytorch and not recipe.links_torch:
        raise InputError(f"{recipe.key} is torch-free (links_torch: false); --pytorch does not apply to it")
    for name, values, axis in (
        ("--platform", f.platform, {c.lane for c in everything}),
        ("--cuda", f.cuda, {c.cuda for c in everything}),
        ("--pytorch", f.pytorch, {c.torch for c in everything if c.torch}),
        ("--python", f.python, {c.python for c in everything}),
    ):
        unknown = [v for v in values if v not in axis]
        if unknown:
            raise InputError(
                f"{name} {', '.join(unknown)} matches no cell of {recipe.key} (it has: {', '.join(sorted(axis)) or 'none'})"
            )
    chosen = [
        c
        for c in everything
        if (not f.platform or c.lane in f.platform)
        and (not f.cuda or c.cuda in f.cuda)
        and (not f.pytorch or c.torch in f.pytorch)
        and (not f.python or c.python in f.python)
    ]
    if not chosen:
        raise InputError(f"the filters match no cell of {recipe.key}: each value exists, but not together")
    return collapse(recipe, chosen)


def collapse_note(recipe: Recipe, grid: Grid) -> str:
    """How a recipe's Python axis collapses, for the summary and build --matrix; "" when it does not."""
    if not collapses_python(recipe):
        return ""
    pythons = sorted({c.python for c in cells(recipe, grid, per_python=True)}, key=lambda v: tuple(map(int, v.split("."))))
    tag = "py3-none" if recipe.wheel_python == "py3" else f"abi3 from Python {recipe.abi3_min_python}"
    return (
        f"Python axis collapsed (wheel_python: {recipe.wheel_python}, a {tag} wheel): one cell per lane x CUDA"
        f"{' x torch' if recipe.links_torch else ''}, built with the lowest Python, serving {', '.join(pythons)}"
    )


def _chunk_groups(jobs: list[Job]) -> list[tuple[str, list[Job]]]:
    """Groups by package x lane x CUDA; splits a group by cell when it is too big."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(f"{job.recipe}-{job.lane}-cu{job.cuda}", []).append(job)
    out: list[tuple[str, list[Job]]] = []
    for key in sorted(groups):
        by_cell: dict[str, list[Job]] = {}
        for job in groups[key]:
            by_cell.setdefault(job.cell, []).append(job)
        part: list[Job] = []
        parts: list[list[Job]] = []
        for cell_id in sorted(by_cell):
            cell_jobs = by_cell[cell_id]
            if len(cell_jobs) > MAX_JOBS:
                raise InputError(f"{cell_id} alone needs {len(cell_jobs)} jobs, over GitHub's {MAX_JOBS}: lower sharding.count")
            if part and (len(part) + len(cell_jobs) > MAX_JOBS or _size(part + cell_jobs) > MAX_BYTES):
                parts.append(part)
                part = []
            part = part + cell_jobs
        if part:
            parts.append(part)
        for i, chunk in enumerate(parts, 1):
            out.append((f"{key}-{i}" if len(parts) > 1 else key, chunk))
    return out


def _size(jobs: list[Job]) -> int:
    return len(json.dumps({"include": [asdict(j) for j in jobs]}, sort_keys=True, separators=(",", ":")))


def _recipe_jobs(
    recipe: Recipe,
    selected: list[Cell],
    grid: Grid,
    images: Optional[Mapping[str, str]],
    cap: job_cap.JobCap,
    runners: Mapping[str, Runner],
    disk_notes: dict[str, str],
) -> list[Job]:
    """The jobs of ``recipe``'s selected cells: each shard's chain under the cap, each job's free disk."""
    sharded = [c for c in selected if c.lane in recipe.sharding.platforms and recipe.sharding.count > 1]
    rungs = recipe_rungs(recipe, cap, sharded[0].id) if sharded else None
    table = recipe_costs(recipe) if runners else None  # the measured disk need
    jobs: list[Job] = []
    for cell in selected:
        made = jobs_for_cell(recipe, cell, images, torch_pin(grid, cell.torch), rungs)
        jobs.extend(with_free_disk(made, table, runners, disk_notes))
    return jobs


def plan(
    recipes: Iterable[Recipe],
    grid: Grid,
    f: Filters,
    images: Optional[Mapping[str, str]] = None,
    hold_back: bool = False,
    cap: Optional[job_cap.JobCap] = None,
    runners: Optional[Mapping[str, Runner]] = None,
) -> dict:
    """The chunk plan: deterministic (same input, same bytes). ``images``: per lane, the build
    image its jobs run in (recipes/defaults.yml images.<lane>.ref); a lane without one runs on the runner.
    ``runners``: per lane, its runner (runners.<lane>), whose free disk decides each job's ``free_disk``.
    ``hold_back``: leave out the cells of :data:`UNVERIFIED_LANES` unless ``--platform`` names them
    (a farm dispatches no job to a lane that has never built a cell). ``cap``: the job cap (default:
    the default policy's), which sets each shard's deadline and chain."""
    cap = cap or job_cap.job_cap(JobPolicy())
    jobs: list[Job] = []
    chosen = sorted(recipes, key=lambda r: r.key)
    skipped: dict[str, str] = {}
    collapsed: dict[str, str] = {}
    held: Counter = Counter()
    disk_notes: dict[str, str] = {}
    for recipe in chosen:
        try:
            selected = select(recipe, grid, f)
        except CuwError as exc:
            if len(chosen) == 1:
                raise
            skipped[recipe.key] = str(exc)  # with several packages, one that cannot match is skipped
            continue
        if hold_back and not f.platform:
            held.update(c.lane for c in selected if c.lane in UNVERIFIED_LANES)
            selected = [c for c in selected if c.lane not in UNVERIFIED_LANES]
            if not selected:
                skipped[recipe.key] = "only unverified lanes; ask for them with --platform"
                continue
        jobs.extend(_recipe_jobs(recipe, selected, grid, images, cap, runners or {}, disk_notes))
        if collapses_python(recipe):
            collapsed[recipe.key] = collapse_note(recipe, grid)
    if not jobs:
        reasons = "; ".join(skipped.values()) or "no recipes"
        raise InputError(f"the filters match no cell: {reasons}")
    held_back = {
        lane: f"{n} cell(s) held back: {UNVERIFIED_LANES[lane]}; ask for them with --platform {lane}"
        for lane, n in sorted(held.items())
    }
    chunks = []
    for chunk_id, chunk_jobs in _chunk_groups(jobs):
        rows = [asdict(j) for j in chunk_jobs]
        chunks.append({"id": chunk_id, "jobs": len(chunk_jobs), **_matrices(rows)})
    return {
        "total_jobs": len(jobs),
        "chunks": chunks,
        "skipped": skipped,
        "collapsed": collapsed,
        **({"held_back": held_back} if held_back else {}),
        **({"disk": dict(sorted(disk_notes.items()))} if disk_notes else {}),
    }


def rung_key(part: int) -> str:
    """The chunk's matrix of part ``part``'s jobs, and the workflow job that runs it."""
    return "compile" if part == 1 else f"compile_{part}"


MATRICES = (*(rung_key(k) for k in range(1, RUNGS + 1)), "link")
"""A chunk's matrices, each a job of build.yml: the rungs, then the link (an empty one is skipped)."""


def _matrices(rows: list[dict]) -> dict[str, dict]:
    """Rung k: the parts k of the chunk's chains (rung 1: every first part and build job); then the links."""
    out = {rung_key(k): {"include": [j for j in rows if j["kind"] != "link" and j["part"] == k]} for k in range(1, RUNGS + 1)}
    return {**out, "link": {"include": [j for j in rows if j["kind"] == "link"]}}


def chunk_jobs(c: dict) -> list[dict]:
    """Every job of a chunk, rung by rung, links last."""
    return [j for key in MATRICES for j in c.get(key, {"include": []})["include"]]


def keep_cells(result: dict, keep: set[str], published: dict, builds: Optional[Mapping[str, str]] = None) -> dict:
    """The plan with only the jobs of ``keep``'s cells; chunk ids stay (a workflow dispatches one by
    its id), a chunk may end up empty. ``published``: what the index holds, for the summary;
    ``builds``: per cell, the build number its link or build job stamps (a rebuild's)."""
    chunks = []
    for c in result["chunks"]:
        kept = {
            key: {"include": [_numbered(j, builds or {}) for j in c[key]["include"] if j["cell"] in keep]} for key in MATRICES
        }
        chunks.append({**c, **kept, "jobs": sum(len(m["include"]) for m in kept.values())})
    return {**result, "chunks": chunks, "total_jobs": sum(c["jobs"] for c in chunks), "published": published}


def _numbered(job: dict, builds: Mapping[str, str]) -> dict:
    """A link or build job with its cell's build number; a shard makes no wheel and carries none."""
    number = builds.get(job["cell"], "") if job["kind"] != "shard" else ""
    return {**job, "build_number": number} if number else job


def planned_cells(result: dict) -> list[tuple[str, str, str, str, str, str]]:
    """(recipe, lane, python, cuda, torch, image) of every cell the plan holds, once each."""
    seen: dict[str, tuple[str, str, str, str, str, str]] = {}
    for c in result["chunks"]:
        for j in chunk_jobs(c):
            seen.setdefault(j["cell"], (j["recipe"], j["lane"], j["python"], j["cuda"], j["torch"], j["image"]))
    return [seen[k] for k in sorted(seen)]


def dumps(result: dict) -> str:
    return json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n"


# Lanes no runner of that platform has built a cell on yet: the summary says so beside their
# job counts. An entry goes when a cell of the lane has built, linked and verified there.
UNVERIFIED_LANES = {
    "windows": (
        "UNVERIFIED: no Windows runner has built a cell yet; its pieces are tested on Linux only (docs/compiler-caches.md)"
    ),
}


def summary(result: dict) -> str:
    """Jobs per lane and per package, and the chunks: for stderr."""
    per_lane: Counter = Counter()
    per_package: Counter = Counter()
    chained: Counter = Counter()
    for chunk in result["chunks"]:
        for job in chunk_jobs(chunk):
            per_lane[job["lane"]] += 1
            per_package[job["recipe"]] += 1
            if job["kind"] == "shard" and job["part"] == 1 and job["parts"] > 1:
                chained[(job["recipe"], job["parts"])] += 1
    lines = [f"{result['total_jobs']} jobs in {len(result['chunks'])} chunks (each <= {MAX_JOBS} jobs, < 1 MB)"]
    lines += [
        f"  lane {lane:14} {n:6}" + (f"  {UNVERIFIED_LANES[lane]}" if lane in UNVERIFIED_LANES else "")
        for lane, n in sorted(per_lane.items())
    ]
    lines += [f"  package {pkg:11} {n:6}" for pkg, n in sorted(per_package.items())]
    lines += [f"  chunk {c['id']:40} {c['jobs']:4} jobs" for c in result["chunks"]]
    lines += [f"  skipped {key}: {why}" for key, why in sorted(result.get("skipped", {}).items())]
    lines += [f"  collapsed {key}: {note}" for key, note in sorted(result.get("collapsed", {}).items())]
    lines += [
        f"  ladder {key}: {n} shard job(s) predicted past the job cap, "
        f"each a chain of {parts} parts (rungs compile..{rung_key(parts)})"
        for (key, parts), n in sorted(chained.items())
    ]
    lines += [f"  lane {lane}: {note}" for lane, note in sorted(result.get("held_back", {}).items())]
    freeing = Counter(job["lane"] for c in result["chunks"] for job in chunk_jobs(c) if job.get("free_disk"))
    lines += [
        f"  free disk: {n} {lane} job(s) delete the runner's preinstalled folders first "
        f"(measured need over runners.{lane}.free_disk_gb)"
        for lane, n in sorted(freeing.items())
    ]
    lines += [f"  {key} {note}" for key, note in result.get("disk", {}).items()]
    published = result.get("published")
    if published:
        lines.append(
            f"  published at {published['from']}: {len(published['current'])} cell(s) up to date, "
            f"{len(published['stale'])} stale, {len(published['missing'])} missing"
            + (f", {len(published['not_comparable'])} not comparable" if published.get("not_comparable") else "")
            + "; --rebuild "
            f"{published['rebuild']}: {published['building']} cell(s) planned"
        )
        lines += [f"    up to date, left out: {cell}" for cell in published["current"] if cell not in published["built"]]
        lines += [
            f"    stale: {cell}: {why}" + ("" if cell in published["built"] else " (not rebuilt: --rebuild stale or all)")
            for cell, why in sorted(published["stale"].items())
        ]
        lines += [
            f"    not comparable: {cell}: {why}" + ("" if cell in published["built"] else " (not rebuilt: --rebuild all)")
            for cell, why in sorted(published.get("not_comparable", {}).items())
        ]
        lines += [f"    build number: {cell}: {number}" for cell, number in sorted(published.get("builds", {}).items())]
    return "\n".join(lines)


def chunk(result: dict, chunk_id: Optional[str]) -> dict:
    if chunk_id is None:
        return result
    for c in result["chunks"]:
        if c["id"] == chunk_id:
            return c
    known = ", ".join(c["id"] for c in result["chunks"][:10])
    raise InputError(f"--chunk: no chunk {chunk_id!r} in the plan; pass an id `cuw matrix` lists (first ones: {known})")
