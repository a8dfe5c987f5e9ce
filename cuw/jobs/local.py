"""A whole cell here: every shard as a parallel process, then the link.

The loop polls (once a second) because it also reads each running shard's seat log for its
progress line: a futures pool would need the same polling loop beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from cuw.gates import report
from cuw.seat import seat_log
from cuw.config.cell import Cell, local_cell
from cuw.base.errors import CuwError, InputError
from cuw.base.settings import Settings
from cuw.partition.rules import ShardSpec
from cuw.base.progress import Meter
from cuw.config.paths import Paths
from cuw.config.policy import CacheChoice
from cuw.config.recipe import Recipe
from cuw.toolchain.cache import tool_class
from cuw.toolchain.toolkit import find_toolkit
from cuw.jobs.workspace import Workspace, default_jobs
from cuw.wheel.finish import FIRST_BUILD, BuildNumber


from cuw.jobs.context import Progress, cell_archs_in_grid, check_lane, plural, resolve_cache
from cuw.jobs.link import LinkResult, run_link
from cuw.jobs.process import spawn, stop
from cuw.jobs.shard import shard_workload


def run_build(
    recipe: Recipe,
    paths: Paths,
    count: Optional[int] = None,
    recipes_dir: Optional[Path] = None,
    progress: Progress = report.say,
    cache: Optional[CacheChoice] = None,
    shard_args: Sequence[str] = (),
    link: Optional[Callable[[], bool]] = None,
    lane: Optional[str] = None,
    *,
    settings: Settings,
    build: BuildNumber = FIRST_BUILD,
) -> tuple[list[Optional[bool]], Union[LinkResult, bool]]:
    """A whole cell here: every shard as a parallel process, then the link.

    With a tool whose jobs share one tree (sccache), shards run one at a time. ``shard_args`` go
    to every shard's command line (``--image REF``: each shard in its own container) and ``link``
    replaces the link in this process (a link in a fresh container); it returns whether it passed.
    ``lane``: the build image's, where it is another machine's. ``settings``: the run's (the command
    line's); every shard process gets its ``child_env``. ``build``: the wheel's build number (the link's).
    """
    cell = local_cell(recipe, find_toolkit(homes=settings.homes), lane)
    cell_archs_in_grid(recipe, cell)
    choice = resolve_cache(recipe, cell, cache, settings)
    n = recipe.sharding.count if count is None else count
    if n < 1:
        raise InputError(f"--shards must be at least 1, got {n}")
    specs = [ShardSpec(i, n) for i in range(1, n + 1)]
    check_lane(recipe, cell, specs[0])
    for stale in paths.cell_artifacts(cell).glob("cuw-shard-*"):
        stale.unlink()
    parallel = 1 if tool_class(choice.tool).shared_tree else min(n, os.cpu_count() or 1)
    launcher = _Launcher(recipe, paths, cell, default_jobs(parallel), choice, recipes_dir, shard_args, progress, settings)
    progress(
        f"build {cell.id}: {plural(n, 'shard')}, {parallel} at a time, {plural(launcher.jobs, 'compile job')} each, "
        f"then the link ({choice.tool}{', remote ' + choice.remote if choice.remote else ''})"
    )
    outcomes = _run_shards(specs, parallel, launcher)
    failed = [f"{i}/{n}" for i, ok in enumerate(outcomes, 1) if not ok]
    if failed:
        progress(f"shards that failed their gate: {', '.join(failed)}; linking what arrived")
    if link is not None:
        return outcomes, link()
    return outcomes, run_link(recipe, paths, jobs=default_jobs(), progress=progress, cache=choice, settings=settings, build=build)


@dataclass(frozen=True)
class _Running:
    proc: subprocess.Popen
    reader: seat_log.LogReader
    meter: Meter


@dataclass(frozen=True)
class _Launcher:
    """How this cell's shards start: each a ``cuw shard`` process with its own progress meter."""

    recipe: Recipe
    paths: Paths
    cell: Cell
    jobs: int
    choice: CacheChoice
    recipes_dir: Optional[Path]
    shard_args: Sequence[str]
    progress: Progress
    settings: Settings

    def command(self, spec: ShardSpec) -> list[str]:
        cmd = [sys.executable, "-m", "cuw", "shard", self.recipe.key, str(spec), "--quiet", "--jobs", str(self.jobs)]
        cmd += ["--work", str(self.paths.work), "--artifacts", str(self.paths.artifacts)]
        if self.recipes_dir:
            cmd += ["--recipes", str(self.recipes_dir)]
        cmd += ["--cache-tool", self.choice.tool] + (["--cache-remote", self.choice.remote] if self.choice.remote else [])
        return cmd + list(self.shard_args)

    def start(self, spec: ShardSpec) -> _Running:
        shared_tree = tool_class(self.choice.tool).shared_tree
        ws = Workspace.for_job(self.paths.cell_work(self.cell), f"shard-{spec.tag}", shared_tree)
        owned = None
        if self.recipe.source.path is not None:
            try:  # from the unpatched folder: a good guess (the shard's own line says it exactly)
                owned = shard_workload(self.recipe, self.recipe.source_dir, spec)[1]
            except CuwError:
                pass
        reader = seat_log.LogReader(ws.seat_log, count_host=self.recipe.sharding.filter == "source")
        proc = spawn(self.command(spec), stdin=subprocess.DEVNULL, env=self.settings.child_env())
        # Several shards at once: plain lines (no bars), each at most every 10 s.
        meter = Meter(f"shard {spec}: compiled", owned, "TUs", say=self.progress, every_s=10.0, terminal=False)
        return _Running(proc, reader, meter)


def _run_shards(specs: list[ShardSpec], parallel: int, launcher: _Launcher) -> list[Optional[bool]]:
    """Every shard, ``parallel`` at a time; whether each passed its gate."""
    n = len(specs)
    outcomes: list[Optional[bool]] = [None] * n
    pending = list(specs)
    running: dict[int, _Running] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                spec = pending.pop(0)
                running[spec.index] = launcher.start(spec)
            time.sleep(1.0)
            for index, job in list(running.items()):
                job.meter.update(job.reader.compiled_count())
                if job.proc.poll() is not None:
                    job.meter.close()
                    outcomes[index - 1] = job.proc.returncode == 0
                    launcher.progress(f"shard {index}/{n}: {'done' if job.proc.returncode == 0 else 'FAILED'}")
                    del running[index]
    except BaseException:
        # Ctrl-C or an error here: every shard still running stops its build and is reaped
        # (a shard turns SIGTERM into stopping its own build group, given time to do so).
        stop([job.proc for job in running.values()], grace=30.0)
        raise
    return outcomes
