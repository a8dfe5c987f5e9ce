"""A whole cell here: every shard as a parallel process, then the link.

The loop polls (once a second) because it also reads each running shard's seat log for its
progress line: a futures pool would need the same polling loop beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from cuw.gates import report
from cuw.seat import seat_log
from cuw.config.cell import local_cell
from cuw.base.errors import CuwError
from cuw.base.settings import Settings
from cuw.partition.rules import ShardSpec
from cuw.base.progress import Meter
from cuw.config.paths import Paths
from cuw.config.policy import CacheChoice
from cuw.config.recipe import Recipe
from cuw.toolchain.cache import tool_class
from cuw.toolchain.toolkit import find_toolkit
from cuw.jobs.workspace import Workspace, default_jobs


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
    settings: Optional[Settings] = None,
) -> tuple[list[Optional[bool]], Union[LinkResult, bool]]:
    """A whole cell here: every shard as a parallel process, then the link.

    With a tool whose jobs share one tree (sccache), shards run one at a time. ``shard_args`` go
    to every shard's command line (``--image REF``: each shard in its own container) and ``link``
    replaces the link in this process (a link in a fresh container); it returns whether it passed.
    ``lane``: the build image's, where it is another machine's. ``settings``: the run's (the command
    line passes them; this process's environment when None); every shard process gets its ``child_env``.
    """
    settings = settings or Settings.from_env()
    toolkit = find_toolkit(homes=settings.homes)
    cell = local_cell(recipe, toolkit, lane)
    cell_archs_in_grid(recipe, cell)
    choice = resolve_cache(recipe, cell, cache, settings)
    n = recipe.sharding.count if count is None else count
    if n < 1:
        raise CuwError(f"--shards must be at least 1, got {n}")
    specs = [ShardSpec(i, n) for i in range(1, n + 1)]
    check_lane(recipe, cell, specs[0])
    folder = paths.cell_artifacts(cell)
    for stale in folder.glob("cuw-shard-*"):
        stale.unlink()
    cores = os.cpu_count() or 1
    shared_tree = tool_class(choice.tool).shared_tree
    parallel = 1 if shared_tree else min(n, cores)
    jobs = default_jobs(parallel)
    progress(
        f"build {cell.id}: {plural(n, 'shard')}, {parallel} at a time, {plural(jobs, 'compile job')} each, then the link "
        f"({choice.tool}{', remote ' + choice.remote if choice.remote else ''})"
    )
    outcomes: list[Optional[bool]] = [None] * n
    pending = list(specs)
    running: dict[int, tuple[subprocess.Popen, seat_log.LogReader, Optional[int]]] = {}
    meters: dict[int, Meter] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                spec = pending.pop(0)
                cmd = [
                    sys.executable,
                    "-m",
                    "cuw",
                    "shard",
                    recipe.key,
                    str(spec),
                    "--quiet",
                    "--jobs",
                    str(jobs),
                    "--work",
                    str(paths.work),
                    "--artifacts",
                    str(paths.artifacts),
                ]
                if recipes_dir:
                    cmd += ["--recipes", str(recipes_dir)]
                cmd += ["--cache-tool", choice.tool] + (["--cache-remote", choice.remote] if choice.remote else [])
                cmd += list(shard_args)
                ws = Workspace.for_job(paths.cell_work(cell), f"shard-{spec.tag}", shared_tree)
                owned = None
                if recipe.source.path is not None:
                    try:  # from the unpatched folder: a good guess (the shard's own line says it exactly)
                        owned = shard_workload(recipe, recipe.source_dir, spec)[1]
                    except CuwError:
                        pass
                reader = seat_log.LogReader(ws.seat_log, count_host=recipe.sharding.filter == "source")
                running[spec.index] = (spawn(cmd, stdin=subprocess.DEVNULL, env=settings.child_env()), reader, owned)
                # Several shards at once: plain lines (no bars), each at most every 10 s.
                meters[spec.index] = Meter(f"shard {spec}: compiled", owned, "TUs", say=progress, every_s=10.0, terminal=False)
            time.sleep(1.0)
            for index, (proc, reader, owned) in list(running.items()):
                meters[index].update(reader.compiled_count())
                if proc.poll() is not None:
                    meters[index].close()
                    outcomes[index - 1] = proc.returncode == 0
                    progress(f"shard {index}/{n}: {'done' if proc.returncode == 0 else 'FAILED'}")
                    del running[index]
    except BaseException:
        # Ctrl-C or an error here: every shard still running stops its build and is reaped
        # (a shard turns SIGTERM into stopping its own build group, given time to do so).
        stop([proc for proc, _, _ in running.values()], grace=30.0)
        raise
    failed = [f"{i}/{n}" for i, ok in enumerate(outcomes, 1) if not ok]
    if failed:
        progress(f"shards that failed their gate: {', '.join(failed)}; linking what arrived")
    if link is not None:
        return outcomes, link()
    result = run_link(recipe, paths, jobs=default_jobs(), progress=progress, cache=choice, settings=settings)
    return outcomes, result
