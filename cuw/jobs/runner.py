"""One job's skeleton: the shard and the link are each a list of steps run on it.

What every job does the same way is written here once: it runs alone (its lock), its machine is
sampled from its start to its report, it settles its toolkit, cell, archs, builder floor and cache
choice, runs its steps in order, keeps its cache's server up only around the build (stopped
whatever happens), and prints its verdict the same way (the step summary, one line, and for a
failed build the log's tail). A job that keeps a report from its start (the shard: "running, not
ok" until its verdict) has that report say "did not start" when a step before the build refuses.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from cuw.base.errors import CuwError
from cuw.base.records import JobReport
from cuw.base.settings import Settings
from cuw.config.cell import Cell, local_cell
from cuw.config.paths import Paths
from cuw.config.policy import CacheChoice
from cuw.config.recipe import Recipe
from cuw.gates import report
from cuw.gates.conditions import Verdict, starved
from cuw.jobs import resources
from cuw.jobs.context import Progress, alone, cell_archs_in_grid, check_floor, resolve_cache
from cuw.jobs.process import build
from cuw.jobs.workspace import Workspace
from cuw.toolchain.cache import Cache, Stats, binary_for, check_remote
from cuw.toolchain.toolkit import Toolkit, find_toolkit


R = TypeVar("R", bound=JobReport)


@dataclass(kw_only=True)
class Job(Generic[R]):
    """What a job is given, what every job settles first, and what its steps hand each other
    (a job's own state extends it; ``R``, its report's record)."""

    recipe: Recipe
    paths: Paths
    settings: Settings
    progress: Optional[Progress]
    cache: Optional[CacheChoice] = None
    folder: str
    """Its work folder's name (``shard-2of4``, ``link``): its lock and the folder its sampler watches."""
    label: str
    """How its lines start: ``shard 2/4``, ``link``."""
    named: str
    """What it is, before its cell: ``shard 2/4``, ``the link``."""
    gate: str

    toolkit: Toolkit = field(init=False)
    cell: Cell = field(init=False)
    archs: list[str] = field(init=False)
    choice: CacheChoice = field(init=False)
    sampler: resources.Sampler = field(init=False)
    ws: Workspace = field(init=False)
    report_path: Optional[Path] = field(init=False, default=None)
    """Set by a job that keeps its report from its start: it then says "did not start" on a refusal."""
    report: R = field(init=False)
    """What the report carries beside the verdict (its cell, its archive, its seconds, ...)."""

    @property
    def what(self) -> str:
        """What a second run of it is refused as: ``shard 2/4 of <cell>``."""
        return f"{self.named} of {self.cell.id}"


J = TypeVar("J", bound=Job[Any])
Step = Callable[[J], None]


@dataclass(frozen=True)
class Steps(Generic[J]):
    """A job's steps, in order, in the two stretches whose refusals differ."""

    prepare: Sequence[Step[J]]
    """Up to the build (:func:`settle` among them): a refusal here is one line, and a report begun
    says the job did not start."""
    build: Sequence[Step[J]]
    """The build and everything after it: the gate, the hand-off, the report, the lines."""


def run(job: J, steps: Steps[J]) -> J:
    """Runs ``steps`` on ``job``, alone and sampled."""
    job.toolkit = find_toolkit(homes=job.settings.homes)
    job.cell = local_cell(job.recipe, job.toolkit)
    interval = resources.sample_interval(job.settings.sample_s)  # refused before the job folder is made
    binary_for(resolve_cache(job.recipe, job.cell, job.cache, job.settings).tool, job.settings)  # so is a missing tool
    with alone(job.recipe, job.cell, job.paths, job.folder, job.what, job.cache, job.settings):
        # From the job's start to its report: preparing (a source copy, deps, N archives) fills disks too.
        with resources.Sampler(job.paths.cell_work(job.cell) / job.folder, interval) as job.sampler:
            try:
                for step in steps.prepare:
                    step(job)
            except CuwError as exc:
                _did_not_start(job, exc)
                raise
            for step in steps.build:
                step(job)
    return job


def settle(job: Job[Any]) -> None:
    """What every job settles first: the cell's archs (refused outside the grid), the builder's
    floor, the cache tool and its remote (reachable)."""
    job.archs = cell_archs_in_grid(job.recipe, job.cell)
    check_floor(job.recipe, job.cell, job.settings)
    job.choice = resolve_cache(job.recipe, job.cell, job.cache, job.settings)
    if job.choice.remote:
        check_remote(job.choice.remote)


def begin_report(job: Job[R], path: Path, record: R) -> None:
    """From here until its verdict, the job's report says it is running, not ok (:func:`report.begin`)."""
    report.begin(path, record)
    job.report_path = path
    job.report = record


def _did_not_start(job: Job[Any], exc: CuwError) -> None:
    """A refusal before the build: the begun report says so instead of "running"."""
    if job.report_path is None:
        return
    record = job.sampler.record()
    causes = starved(str(exc), 0, resources.summary(record))  # a source copy or a pip install can fill the disk
    reasons = [*causes.values(), f"the {job.gate} did not start its build: {exc}"]
    report.write(Verdict(job.gate, False, reasons), job.report_path, replace(job.report, resources=record))


@dataclass(frozen=True)
class Built:
    rc: int
    seconds: float
    stats: Stats


def cached_build(
    job: Job[Any], job_cache: Cache, env: dict[str, str], expected: Optional[int], count_host: bool, zero: bool = True
) -> Built:
    """The build with the job's cache up: started, zeroed (the counters then count this build
    alone), stopped whatever happens; its exit code, seconds and the cache's counters."""
    job_cache.start()
    try:
        if zero:
            job_cache.zero()
        started = time.monotonic()
        rc = build(job.ws, job.recipe, env, job.label, expected, job.progress, count_host=count_host)
        seconds = round(time.monotonic() - started, 1)
        stats = job_cache.stats()
    finally:
        job_cache.stop()
    return Built(rc, seconds, stats)


def announce(job: Job[Any], verdict: Verdict) -> None:
    """The verdict in the step summary and as one line."""
    report.step_summary(f"{job.recipe.key} {job.label}", verdict, job.settings.github.step_summary)
    report.say(verdict.line)


def show_failure(job: Job[Any], log: str, tail: bool = True) -> None:
    """A failed job: the build log's last lines (``tail``) and where the whole log is."""
    if tail:
        for line in log.splitlines()[-15:]:
            print(f"  | {line}", file=sys.stderr)
    report.say(f"full log: {job.ws.build_log}")
