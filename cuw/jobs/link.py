"""The link job: every shard archive restored, the full build with every compile a cache hit,
the link gate, then finish and the verify gate.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from cuw.jobs import archive, continuation
from cuw.gates import compdb
from cuw.jobs import leftovers
from cuw.jobs import resources
from cuw.gates import report
from cuw.seat import seat_log
from cuw.jobs.backends import build_env
from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.base.records import LinkReport
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
from cuw.toolchain.cache import Cache, open_cache, tool_class
from cuw.wheel.finish import FIRST_BUILD, BuildNumber, CudaRuntime, build_of, check_build, dist_versions, repair, retag
from cuw.toolchain.toolkit import Toolkit
from cuw.toolchain.builder import current_builder
from cuw.config import lanes
from cuw.wheel.variants import make_variant
from cuw.wheel.verify import Check, GateCannotRun, device_code, verify, write_verify_reports
from cuw.wheel.verify import Report as VerifyReport
from cuw.jobs.workspace import Workspace, default_jobs, install_extra_deps, prepare
from cuw.jobs.tests_source import upstream_fetch


from cuw.jobs import runner
from cuw.jobs.context import Progress


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
    restored: list[archive.Restored], cell: Cell, job_cache: Cache, settings: Settings
):
    """Every restored archive's manifest held against this link (cell, tool, N, builder, no partial
    part, no shard twice): (N, shard index -> archive)."""
    count = restored[0].manifest.shard_count
    seen: dict[int, Path] = {}
    for item in restored:
        path, manifest = item.path, item.manifest
        archive.expect(manifest, path, cell, job_cache, count, current_builder(settings))
        continuation.refuse_partial(manifest, path)  # a shard's chain hands over its last part
        if manifest.shard_index in seen:
            raise InputError(f"{path} and {seen[manifest.shard_index]} are both shard {manifest.shard_index}/{count}")
        seen[manifest.shard_index] = path
    return count, seen


def _unpack_all(archives: list[Path], staging: Path) -> list[archive.Restored]:
    """Each archive in one pass (:func:`cuw.jobs.archive.unpack`: hashed as it is extracted, against
    the digest its shard recorded) into its own folder under ``staging``; any refusal removes
    ``staging`` whole, so nothing of any archive is left to adopt. Every report is read first: a
    missing digest is refused before a byte of an archive is read."""
    recorded = [archive.recorded_digest(path) for path in archives]
    if staging.exists():
        shutil.rmtree(staging)  # a killed link's: this link holds the cell's lock
    staging.mkdir(parents=True)
    try:
        meter = Meter("link: restored", len(archives), "archives", terminal=False, every_s=10.0)
        # Side by side (file I/O and hashing release the GIL), each into its own staging folder.
        with ThreadPoolExecutor(max_workers=min(len(archives), RESTORE_THREADS)) as pool:
            unpacking = [
                pool.submit(archive.unpack, path, staging, digest, shard) for path, (digest, shard) in zip(archives, recorded)
            ]
            for done, _ in enumerate(as_completed(unpacking), 1):
                meter.update(done)
        meter.close()
        return [f.result() for f in unpacking]  # the first bad archive in name order raises
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@dataclass(kw_only=True)
class LinkJob(runner.Job[LinkReport]):
    """The link's state, filled in step by step."""

    jobs: Optional[int]
    zero_stats: bool
    build: BuildNumber = FIRST_BUILD
    """The wheel's build number (``--build-number``, or the plan's): finish stamps it."""
    phases: dict[str, float] = field(default_factory=dict)
    """Where the link's time goes (the planner's link estimate reads it from the report)."""
    clock: float = field(init=False, default_factory=time.monotonic)
    job_cache: Cache = field(init=False)
    restored: list[archive.Restored] = field(init=False)
    """Every archive, unpacked into staging and checked: adopted into the cache once its fingerprint is this link's."""
    fingerprint: dict[str, str] = field(init=False)
    count: int = field(init=False)
    missing: list[int] = field(init=False)
    replays: set[str] = field(init=False)
    merged_at: int = field(init=False)
    env: dict[str, str] = field(init=False)
    built: runner.Built = field(init=False)
    wheels: list[Path] = field(init=False)
    log: str = field(init=False)
    verdict: Verdict = field(init=False)
    shipped: Optional[Path] = None
    verified: Optional[VerifyReport] = None
    written: Path = field(init=False)

    def lap(self, phase: str) -> None:
        """The seconds since the last lap, as ``phase``."""
        now = time.monotonic()
        self.phases[phase], self.clock = round(now - self.clock, 1), now


def run_link(
    recipe: Recipe,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    zero_stats: bool = True,
    cache: Optional[CacheChoice] = None,
    *,
    settings: Settings,
    build: BuildNumber = FIRST_BUILD,
) -> LinkResult:
    """Restores every shard archive, re-runs the full build and gates it; alone: a second link of
    the cell here is refused before it touches the first one's folder or build.

    ``zero_stats=False`` exists so a test can show the gate catching counters
    that still carry the shards' history. ``settings``: the run's (the command line's). ``build``:
    the wheel's build number, stamped by finish before verify.
    """
    job = LinkJob(
        recipe=recipe,
        paths=paths,
        settings=settings,
        progress=progress,
        cache=cache,
        folder="link",
        label="link",
        named="the link",
        gate="link",
        jobs=jobs,
        zero_stats=zero_stats,
        build=build,
    )
    steps = runner.Steps(
        prepare=[runner.settle, _check_archives, _prepare, _restore_archives, _build_env],
        build=[_build, _gate, _finish, _write_report],
    )
    runner.run(job, steps)
    return LinkResult(job.verdict, job.shipped, job.written, job.missing, job.verified)


def _check_archives(job: LinkJob) -> None:
    """Every archive read once: hashed as it is unpacked into staging beside the link's folder (not
    yet its cache), refused with nothing adopted when it is not the one its shard made, is from
    another builder or cell, or is damaged; then a killed link's build, still running there, is
    stopped. The link's own folder is not touched before all of that."""
    folder = job.paths.cell_artifacts(job.cell)
    archives = archive.shard_archives(folder)
    if not archives:
        raise InputError(
            f"no shard archives for {job.cell.id} in {folder}: "
            f"run the shards first (nox -s shard -- {job.recipe.key} 1/N, ... N/N)"
        )
    job.ws = Workspace.for_job(job.paths.cell_work(job.cell), "link", tool_class(job.choice.tool).shared_tree)
    started = time.monotonic()
    job.restored = _unpack_all(archives, _staging(job))
    try:
        for item in job.restored:
            archive.check_builder(item.manifest, item.path, current_builder(job.settings))
        its_cache = open_cache(
            job.choice.tool, job.ws.cache_dir, job.ws.tree, job.choice.remote, settings=job.settings
        )  # read only
        _checked_archives(job.restored, job.cell, its_cache, job.settings)
    except BaseException:
        shutil.rmtree(_staging(job), ignore_errors=True)
        raise
    job.phases["restore_s"] = round(time.monotonic() - started, 1)
    leftovers.stop_orphans(job.ws.cuda_home, "link")


def _staging(job: LinkJob) -> Path:
    """Where the archives are unpacked before they are adopted: beside the link's folder (which
    :func:`prepare` makes afresh), on its filesystem, so adopting is a rename."""
    return job.ws.root.with_name("link-staging")


def _prepare(job: LinkJob) -> None:
    job.clock = time.monotonic()
    link_patch = PatchContext(job.ws.src, job.cell, job.archs, job.recipe.key)
    choice = job.choice
    job.job_cache = prepare(
        job.ws, job.recipe, job.toolkit, None, choice.tool, choice.remote, link_patch, job.cell.lane, settings=job.settings
    )
    job.lap("prepare_s")


def _restore_archives(job: LinkJob) -> None:
    """What every shard's cache is a function of, against this link's own, before anything is
    built; then the staged caches adopted into the link's cache (renamed in)."""
    recipe, cell, ws = job.recipe, job.cell, job.ws
    try:
        job.count, seen = _checked_archives(job.restored, cell, job.job_cache, job.settings)
        job.fingerprint = handoff_fingerprint(recipe, ws.src, job.archs, job.toolkit, job.count, cell.lane)
        for item in job.restored:
            manifest = item.manifest
            check_fingerprint(manifest.fingerprint, job.fingerprint, item.path, f"{manifest.shard_index}/{manifest.shard_count}")
        archive.merge_into(job.restored, ws.cache_dir)
    finally:
        shutil.rmtree(_staging(job), ignore_errors=True)
    job.missing = [i for i in range(1, job.count + 1) if i not in seen]
    job.replays = {key for item in job.restored for key in item.manifest.compiled}
    restore_s = job.phases.get("restore_s", 0.0)
    job.lap("restore_s")
    job.phases["restore_s"] = round(job.phases["restore_s"] + restore_s, 1)
    job.merged_at = int(time.time())
    if job.progress:
        got = job.count - len(job.missing)
        job.progress(f"link: restored {got}/{job.count} shard caches into {ws.cache_dir}")
        job.progress(resources.disk_line("link", job.sampler))  # once the job is sure to build: a refusal stays one line
        if job.missing:
            job.progress(
                f"link: missing shard archives: {shard_listing(job.missing, job.count)}; their TUs recompile here "
                "and the gate will report them"
            )


def _build_env(job: LinkJob) -> None:
    recipe, ws, cell = job.recipe, job.ws, job.cell
    deps = install_extra_deps(recipe, ws, cell.cuda)
    env = build_env(
        recipe,
        ws.cuda_home,
        ws.build,
        job.jobs or default_jobs(),
        None,
        job.settings.child_env(),
        lane=cell.lane,
        archs=job.archs,
        deps_dir=deps,
    )
    job.env = env
    job.lap("deps_s")


def _build(job: LinkJob) -> None:
    # What the shards compiled, CUDA and host, is what the link replays (unknown with a shard missing).
    expected = None if job.missing else len(job.replays)
    job.built = runner.cached_build(job, job.job_cache, job.env, expected, count_host=True, zero=job.zero_stats)


def _gate(job: LinkJob) -> None:
    """The link gate over what the build did; its verdict printed."""
    ws, stats, cell = job.ws, job.built.stats, job.cell
    compiles = [e for e in seat_log.read_entries(ws.seat_log) if e.is_compile]
    job.phases["build_s"] = job.built.seconds
    # The replays' own seconds; the rest of build_s is configure, probes, the link steps.
    job.phases["replay_s"] = round(sum(e.seconds or 0.0 for e in compiles), 1)
    job.phases["replays"] = len(compiles)
    in_build, compile_db = compdb.cuda_compiles_from(ws.tree, ws.src)
    job.wheels = sorted(ws.wheel_dir.glob("*.whl"))
    job.log = ws.build_log.read_text(errors="replace")
    obs = LinkObservation(
        build_rc=job.built.rc,
        wheel=str(job.wheels[0]) if job.wheels else None,
        hits=stats.hits,
        misses=stats.misses,
        uncacheable=stats.uncacheable,
        total=stats.total,
        stats_zeroed_at=stats.zeroed_at,
        merged_at=job.merged_at,
        cuda_tus_in_build=in_build,
        compile_db=compile_db,
        seat_keys=sorted({e.tu for e in compiles}),
        misses_by_key=seat_log.missed_keys(compiles, job.job_cache),
        uncacheable_by_key=sorted(e.tu for e in compiles if (e.outcome or "").startswith("uncacheable")),
        shard_count=job.count,
        assignment=recipe_assignment(job.recipe, job.count, ws.src, cell.lane) if job.count > 1 else None,
        missing_shards=job.missing,
        log=job.log,
        resources=resources.summary(job.sampler.record()),
    )
    job.verdict = link_gate(obs)
    job.report = LinkReport(
        gate="link",
        ok=False,
        cell=cell.to_dict(),
        shard_count=job.count,
        fingerprint=job.fingerprint,
        build_log=str(ws.build_log),
        wheel=obs.wheel,
        build_s=job.built.seconds,
        cache={"tool": job.job_cache.tool, "version": job.job_cache.version(), "remote": job.job_cache.remote},
        builder=current_builder(job.settings).to_dict(),
        nulls=frozenset({"wheel"}),  # a link that made no wheel says so
    )
    runner.announce(job, job.verdict)


def _finish(job: LinkJob) -> None:
    """A passed link's wheel finished and verified; a verified one shipped into dist/."""
    if not (job.verdict.ok and job.wheels):
        return
    job.clock = time.monotonic()
    job.verified, final = _finish_and_verify(
        job.wheels[0], job.recipe, job.cell, job.archs, job.toolkit, job.ws, job.paths, job.settings, job.build
    )
    job.lap("finish_s")
    if not job.verified.ok:
        write_verify_reports(job.verified, final)
        return
    # Into dist/ through temp files renamed into place, wheel first, reports after it: two
    # links of one cell writing at once, or a reader (pip, an upload) never see a torn file.
    from cuw.base.files import place_copy, writable_dir

    writable_dir(job.paths.dist, "--dist")
    beside = write_verify_reports(job.verified, final)
    job.shipped = place_copy(final, job.paths.dist / final.name, "--dist")
    for made in beside:
        place_copy(made, job.paths.dist / made.name, "--dist")
    job.report = replace(job.report, wheel=str(job.shipped))


def _write_report(job: LinkJob) -> None:
    """Beside the shipped wheel, or in the cell's artifacts for a link that shipped none."""
    # After finish and verify: the whole job, and where its time went up to here.
    record = replace(job.report, resources=job.sampler.record(), phases=dict(job.phases))
    if job.shipped:
        job.written = report.write(job.verdict, job.paths.dist / f"{job.shipped.name}.link.json", record)
        report.say(f"wheel: {job.shipped}")
        return
    job.written = report.write(job.verdict, job.paths.cell_artifacts(job.cell) / "link.report.json", record)
    if job.wheels:
        report.say(f"rejected wheel kept at {job.wheels[0]} (not copied to {job.paths.dist})")
    runner.show_failure(job, job.log, tail=job.built.rc != 0)


def _finish_and_verify(
    wheel: Path,
    recipe: Recipe,
    cell: Cell,
    archs: list[str],
    toolkit: Toolkit,
    ws: Workspace,
    paths: Paths,
    settings: Settings,
    build: BuildNumber = FIRST_BUILD,
) -> tuple[VerifyReport, Path]:
    """Local version label, curated metadata, the build number, auditwheel repair, then the verify
    gate (with the run's cuobjdump; its table to the run's step summary)."""
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
            build,
        )
        final = repair(retagged, cell.lane, policy, recipe, out / "repaired", current_builder(settings).floor)
        check_build(final, build_of(retagged.name))  # the bytes verified and recorded carry the number
        if policy.variants:  # after finish, before verify and the record: the bytes verified are the bytes published
            final = make_variant(final, cell.cuda, *device_code(final, toolkit, settings.cuobjdump), out / "variant")
    except GateCannotRun:
        raise  # no cuobjdump to list the variant's archs: the gate cannot run here (exit 2), as in verify
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
        tests=upstream_fetch(recipe, settings),
    )
    report.say(checked.line)
    report.append_summary(checked.to_markdown(), settings.github.step_summary)
    return checked, final
