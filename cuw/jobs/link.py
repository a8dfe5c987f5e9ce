"""The link job: every shard archive restored, the full build with every compile a cache hit,
the link gate, then finish and the verify gate.
"""

from __future__ import annotations

import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from cuw.jobs import archive, continuation
from cuw.gates import compdb
from cuw.jobs import leftovers
from cuw.jobs import resources
from cuw.gates import report
from cuw.seat import seat_log
from cuw.jobs.backends import build_env
from cuw.config.cell import Cell, local_cell
from cuw.base.errors import CuwError
from cuw.base.settings import Settings
from cuw.gates.conditions import LinkObservation, Verdict, link_gate
from cuw.partition.assignment import recipe_assignment
from cuw.partition.rules import shard_listing
from cuw.base.progress import Meter
from cuw.config.paths import Paths
from cuw.jobs.fingerprint import check_fingerprint, handoff_fingerprint
from cuw.jobs.patching import PatchContext
from cuw.config.policy import CacheChoice, load_policy
from cuw.config.recipe import Recipe
from cuw.toolchain.cache import Cache, check_remote, open_cache, tool_class
from cuw.wheel.finish import CudaRuntime, dist_versions, repair, retag
from cuw.toolchain.toolkit import Toolkit, find_toolkit
from cuw.toolchain.builder import current_builder
from cuw.config import lanes
from cuw.wheel.verify import Check, verify, write_verify_reports
from cuw.wheel.verify import Report as VerifyReport
from cuw.jobs.workspace import Workspace, default_jobs, install_extra_deps, prepare


from cuw.jobs.context import Progress, alone, check_floor, cell_archs_in_grid, resolve_cache
from cuw.jobs.process import build


@dataclass
class LinkResult:
    verdict: Verdict
    wheel: Optional[Path]
    report: Path
    missing_shards: list[int] = field(default_factory=list)
    verify: Optional[VerifyReport] = None

    @property
    def ok(self) -> bool:
        return self.verdict.ok and self.verify is not None and self.verify.ok


RESTORE_THREADS = 4


def _checked_archives(  # type: ignore[no-untyped-def]
    recipe: Recipe, cell: Cell, paths: Paths, job_cache: Cache, settings: Settings, whole: bool = False
):
    """Every archive's manifest read and held against this link (cell, tool, N, no shard twice):
    (archives, manifests, N, shard index -> archive). Reads only: the link calls it (``whole``: every
    member's name too) before it touches its folder, and again when it merges."""
    folder = paths.cell_artifacts(cell)
    archives = archive.shard_archives(folder)
    if not archives:
        raise CuwError(
            f"no shard archives for {cell.id} in {folder}: run the shards first (nox -s shard -- {recipe.key} 1/N, ... N/N)"
        )
    manifests = [archive.check_archive(a) if whole else archive.read_manifest(a) for a in archives]
    count = manifests[0].shard_count
    seen: dict[int, Path] = {}
    for path, manifest in zip(archives, manifests):
        archive.expect(manifest, path, cell, job_cache, count, current_builder(settings))
        continuation.refuse_partial(manifest, path)  # a shard's chain hands over its last part
        if manifest.shard_index in seen:
            raise CuwError(f"{path} and {seen[manifest.shard_index]} are both shard {manifest.shard_index}/{count}")
        seen[manifest.shard_index] = path
    return archives, manifests, count, seen


def _restore(ws: Workspace, checked) -> tuple[int, list[int], set[str]]:  # type: ignore[no-untyped-def]
    """Merges the archives :func:`_checked_archives` held against this link into its cache; returns
    (N, missing shards, the TUs the arrived shards compiled: what the link will replay)."""
    archives, manifests, count, seen = checked
    staging = ws.root / "staging"
    staging.mkdir()
    try:
        meter = Meter("link: restored", len(archives), "archives", terminal=False, every_s=10.0)
        # The archives unpack side by side (file I/O releases the GIL), each into its own staging
        # folder; merging waits for all of them. Restore does not overlap the build's configure:
        # CMake's try_compile probes and host compiles reach the cache through launchers nothing
        # could hold back until the merge, and the stats are zeroed only after it.
        with ThreadPoolExecutor(max_workers=min(len(archives), RESTORE_THREADS)) as pool:
            unpacking = [pool.submit(archive.unpack, path, staging) for path in archives]
            for done, _ in enumerate(as_completed(unpacking), 1):
                meter.update(done)
        meter.close()
        restored = [f.result() for f in unpacking]  # the first bad archive in name order raises
        archive.merge_into(restored, ws.cache_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    missing = [i for i in range(1, count + 1) if i not in seen]
    return count, missing, {key for m in manifests for key in m.compiled}


def run_link(
    recipe: Recipe,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    zero_stats: bool = True,
    cache: Optional[CacheChoice] = None,
    settings: Optional[Settings] = None,
) -> LinkResult:
    """Restores every shard archive, re-runs the full build and gates it; alone: a second link of
    the cell here is refused before it touches the first one's folder or build.

    ``zero_stats=False`` exists so a test can show the gate catching counters
    that still carry the shards' history. ``settings``: the run's (the command line passes them;
    this process's environment when None).
    """
    settings = settings or Settings.from_env()
    cell = local_cell(recipe, find_toolkit(homes=settings.homes))
    interval = resources.sample_interval(settings.sample_s)  # refused before the job folder is made
    with alone(recipe, cell, paths, "link", f"the link of {cell.id}", cache, settings):
        # From the job's start to its report: restoring N archives and finishing the wheel fill disks too.
        with resources.Sampler(paths.cell_work(cell) / "link", interval) as sampler:
            return _run_link(recipe, paths, jobs, progress, zero_stats, cache, sampler, settings)


def _run_link(
    recipe: Recipe,
    paths: Paths,
    jobs: Optional[int],
    progress: Optional[Progress],
    zero_stats: bool,
    cache: Optional[CacheChoice],
    sampler: resources.Sampler,
    settings: Settings,
) -> LinkResult:
    toolkit = find_toolkit(homes=settings.homes)
    cell = local_cell(recipe, toolkit)
    archs = cell_archs_in_grid(recipe, cell)
    check_floor(recipe, cell, settings)
    choice = resolve_cache(recipe, cell, cache, settings)
    if choice.remote:
        check_remote(choice.remote)
    # Archives that are not the ones their shards made, or from another builder, are refused
    # before the link's folder is touched.
    for path in archive.shard_archives(paths.cell_artifacts(cell)):
        archive.check_digest(path)
    archive.check_builders(paths.cell_artifacts(cell), current_builder(settings))
    ws = Workspace.for_job(paths.cell_work(cell), "link", tool_class(choice.tool).shared_tree)
    its_cache = open_cache(choice.tool, ws.cache_dir, ws.tree, choice.remote, settings)  # read only: what the archives must match
    _checked_archives(recipe, cell, paths, its_cache, settings, whole=True)
    leftovers.stop_orphans(ws.cuda_home, "link")  # a killed link's build, still running in the job folder
    link_patch = PatchContext(ws.src, cell, archs, recipe.key)
    # Where the link's time goes (the planner's link estimate reads it from the report).
    phases: dict[str, float] = {}
    clock = time.monotonic()
    job_cache = prepare(ws, recipe, toolkit, None, choice.tool, choice.remote, link_patch, cell.lane, settings)
    phases["prepare_s"], clock = round(time.monotonic() - clock, 1), time.monotonic()
    # What every shard's cache is a function of, against this link's own: before anything is built.
    checked = _checked_archives(recipe, cell, paths, job_cache, settings)
    archives, manifests, count, _ = checked
    fingerprint = handoff_fingerprint(recipe, ws.src, archs, toolkit, count, cell.lane)
    for path, manifest in zip(archives, manifests):
        check_fingerprint(manifest.fingerprint, fingerprint, path, f"{manifest.shard_index}/{manifest.shard_count}")
    count, missing, replays = _restore(ws, checked)
    phases["restore_s"], clock = round(time.monotonic() - clock, 1), time.monotonic()
    merged_at = int(time.time())
    if progress:
        got = count - len(missing)
        progress(f"link: restored {got}/{count} shard caches into {ws.cache_dir}")
        progress(resources.disk_line("link", sampler))  # once the job is sure to build: a refusal stays one line
        if missing:
            progress(
                f"link: missing shard archives: {shard_listing(missing, count)}; their TUs recompile here "
                "and the gate will report them"
            )
    env = build_env(
        recipe,
        ws.cuda_home,
        ws.build,
        jobs or default_jobs(),
        None,
        settings.child_env(),
        lane=cell.lane,
        archs=archs,
        deps_dir=install_extra_deps(recipe, ws, cell.cuda),
    )
    phases["deps_s"] = round(time.monotonic() - clock, 1)
    job_cache.start()
    try:
        if zero_stats:
            job_cache.zero()
        started = time.monotonic()
        # What the shards compiled, CUDA and host, is what the link replays (unknown with a shard missing).
        rc = build(ws, recipe, env, "link", None if missing else len(replays), progress, count_host=True)
        build_s = round(time.monotonic() - started, 1)
        stats = job_cache.stats()
    finally:
        job_cache.stop()

    compiles = [e for e in seat_log.read_log(ws.seat_log) if e.get("action") == "compiled"]
    phases["build_s"] = build_s
    # The replays' own seconds; the rest of build_s is configure, probes, the link steps.
    phases["replay_s"] = round(sum(float(e.get("seconds") or 0.0) for e in compiles), 1)
    phases["replays"] = len(compiles)
    in_build, compile_db = compdb.cuda_compiles_from(ws.tree, ws.src)
    wheels = sorted(ws.wheel_dir.glob("*.whl"))
    log = ws.build_log.read_text(errors="replace")
    obs = LinkObservation(
        build_rc=rc,
        wheel=str(wheels[0]) if wheels else None,
        hits=stats.hits,
        misses=stats.misses,
        uncacheable=stats.uncacheable,
        total=stats.total,
        stats_zeroed_at=stats.zeroed_at,
        merged_at=merged_at,
        cuda_tus_in_build=in_build,
        compile_db=compile_db,
        seat_keys=sorted({e["key"] for e in compiles}),
        misses_by_key=seat_log.missed_keys(compiles, job_cache),
        uncacheable_by_key=sorted(e["key"] for e in compiles if str(e.get("outcome", "")).startswith("uncacheable")),
        shard_count=count,
        assignment=recipe_assignment(recipe, count, ws.src, cell.lane) if count > 1 else None,
        missing_shards=missing,
        log=log,
        resources=resources.summary(sampler.record()),
    )
    verdict = link_gate(obs)
    context = {
        "cell": cell.to_dict(),
        "shard_count": count,
        "fingerprint": fingerprint,
        "build_log": str(ws.build_log),
        "wheel": obs.wheel,
        "build_s": build_s,
        "cache": {"tool": job_cache.tool, "version": job_cache.version(), "remote": job_cache.remote},
        "phases": phases,
        "builder": current_builder(settings).to_dict(),
    }
    report.step_summary(f"{recipe.key} link", verdict, settings.github.step_summary)
    report.say(verdict.line)
    shipped: Optional[Path] = None
    verified: Optional[VerifyReport] = None
    if verdict.ok and wheels:
        clock = time.monotonic()
        verified, final = _finish_and_verify(wheels[0], recipe, cell, archs, toolkit, ws, paths, settings)
        phases["finish_s"] = round(time.monotonic() - clock, 1)
        if verified.ok:
            # Into dist/ through temp files renamed into place, wheel first, reports after it: two
            # links of one cell writing at once, or a reader (pip, an upload) never see a torn file.
            from cuw.base.files import copy_into, writable_dir

            writable_dir(paths.dist, "--dist")
            beside = write_verify_reports(verified, final)
            shipped = copy_into(final, paths.dist / final.name, "--dist")
            for made in beside:
                copy_into(made, paths.dist / made.name, "--dist")
            context["wheel"] = str(shipped)
        else:
            write_verify_reports(verified, final)
    context["resources"] = sampler.record()  # after finish and verify: the whole job
    if shipped:
        report_path = report.write(verdict, paths.dist / f"{shipped.name}.link.json", context)
        report.say(f"wheel: {shipped}")
    else:
        report_path = report.write(verdict, paths.cell_artifacts(cell) / "link.report.json", context)
        if wheels:
            report.say(f"rejected wheel kept at {wheels[0]} (not copied to {paths.dist})")
        if rc != 0:
            for line in log.splitlines()[-15:]:
                print(f"  | {line}", file=sys.stderr)
        report.say(f"full log: {ws.build_log}")
    return LinkResult(verdict, shipped, report_path, missing, verified)


def _finish_and_verify(
    wheel: Path,
    recipe: Recipe,
    cell: Cell,
    archs: list[str],
    toolkit: Toolkit,
    ws: Workspace,
    paths: Paths,
    settings: Settings,
) -> tuple[VerifyReport, Path]:
    """Local version label, curated metadata, auditwheel repair, then the verify gate (with the
    run's cuobjdump; its table to the run's step summary)."""
    recipes_dir = Path(recipe.folder).parent
    policy = load_policy(recipes_dir).wheel
    out = ws.root / "finished"
    try:
        retagged = retag(
            wheel,
            cell,
            recipe,
            out / "retagged",
            dist_versions(paths.dist, cell, recipes_dir),
            CudaRuntime.for_cell(policy, recipe, cell),
        )
        final = repair(retagged, cell.lane, policy, recipe, out / "repaired", current_builder(settings).floor)
    except CuwError as exc:
        failed = VerifyReport(str(wheel), [Check("finish", False, [str(exc)])])
        report.say(f"verify gate FAIL: finish: {exc}")
        return failed, wheel
    checked = verify(
        final,
        recipe,
        cell,
        toolkit,
        policy,
        archs,
        floor=current_builder(settings).floor if lanes.lane(cell.lane).os == "linux" else None,
        cuobjdump=settings.cuobjdump,
    )
    report.say(checked.line)
    report.append_summary(checked.to_markdown(), settings.github.step_summary)
    return checked, final
