"""The compile shard: its slice of the TUs, the build, the shard gate and the cache archive."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from cuw import __version__
from cuw.jobs import archive, continuation
from cuw.gates import compdb
from cuw.jobs import leftovers
from cuw.jobs import resources
from cuw.gates import report
from cuw.seat import seat_log
from cuw.jobs.backends import build_env
from cuw.base.errors import CuwError
from cuw.base.files import sha256_of
from cuw.base.records import TU_ACTIONS, SeatLogEntry, ShardReport
from cuw.base.settings import Settings
from cuw.gates.conditions import ShardObservation, Verdict, shard_gate, starved
from cuw.partition.assignment import recipe_assignment
from cuw.partition.costs import recipe_costs
from cuw.partition.parallel_jobs import JobChoice, choose_jobs, slice_peaks
from cuw.partition.coverage import covered_keys, is_cuda, rest_keys, seat_rest, source_filter_files, unfiltered_keys
from cuw.partition.rules import Assignment, ShardSpec, tu_key
from cuw.config.paths import Paths
from cuw.jobs.fingerprint import handoff_fingerprint
from cuw.jobs.patching import PatchContext
from cuw.config.policy import CacheChoice
from cuw.config.recipe import Recipe
from cuw.toolchain.cache import Cache, open_cache, tool_class
from cuw.toolchain.builder import current_builder
from cuw.jobs.workspace import Workspace, default_jobs, install_extra_deps, prepare, real_objects


from cuw.jobs import runner
from cuw.jobs.context import (
    Progress,
    check_lane,
    describe_cache,
    plural,
    policy_for,
)


@dataclass
class ShardResult:
    verdict: Verdict
    archive: Optional[Path]
    report: Path


def apply_source_filter(
    src_root: Path, globs: list[str], spec: ShardSpec, lane: str = "linux", assignment: Optional[Assignment] = None
) -> list[str]:
    """Deletes out-of-slice files matched by ``globs``; returns the kept keys.

    ``assignment`` is the recipe's rule (:func:`cuw.partition.assignment.recipe_assignment`);
    without one, the hash rule. On Windows only CUDA sources are partitioned.
    """
    rule = assignment or Assignment(spec.count)
    kept = []
    for path in source_filter_files(src_root, globs, lane):
        key = tu_key(str(path), str(src_root))
        if rule.owner(key) == spec.index:
            kept.append(key)
        else:
            path.unlink()
    return kept


def expected_owned(recipe: Recipe, src_root: Path, spec: ShardSpec, lane: str = "linux") -> list[str]:
    """TU keys shard ``spec`` is expected to compile: its slice of the partition's files and,
    under ``filter: source`` with ``seat_rest``, its slice of the rest the seat partitions."""
    keys = covered_keys(recipe, src_root, lane) + rest_keys(recipe, src_root, lane)
    return recipe_assignment(recipe, spec.count, src_root, lane).owned(keys, spec.index)


def shard_workload(recipe: Recipe, src_root: Path, spec: ShardSpec, lane: str = "linux") -> tuple[list[str], int]:
    """(the TUs the shard owns, how many TUs it will compile) in a prepared tree, before the
    source filter runs. Under ``filter: source`` both count host TUs too (progress then counts
    every compile); with ``seat_rest: false`` every shard also compiles the whole rest."""
    owned = expected_owned(recipe, src_root, spec, lane)
    if recipe.sharding.filter != "source" or seat_rest(recipe):
        return owned, len(owned)
    return owned, len(owned) + len(unfiltered_keys(recipe, src_root, lane))


def shard_jobs(recipe: Recipe, lane: str, owned: list[str], jobs: Optional[int]) -> JobChoice:
    """The shard's parallel compile jobs: ``--jobs`` (default: one per core) as far as the lane's
    runner memory holds the slice's measured peaks, unless the recipe pins max_jobs."""
    runner = policy_for(recipe).runners.get(lane)
    return choose_jobs(slice_peaks(recipe_costs(recipe), owned), jobs or default_jobs(), runner, recipe.max_jobs)


@dataclass(kw_only=True)
class ShardJob(runner.Job[ShardReport]):
    """The shard's state, filled in step by step."""

    spec: ShardSpec
    jobs: Optional[int]
    deadline: Optional[float] = None
    """Unix time: no owned compile starts after it, and the job packs what it has as a partial part."""
    resume: Optional[Path] = None
    """The previous part's archive, restored before the build (:mod:`cuw.jobs.continuation`)."""
    resumed: Optional[continuation.Resumed] = None
    target: Path = field(init=False)
    """Its archive; the report lies beside it."""
    job_cache: Cache = field(init=False)
    fingerprint: dict[str, str] = field(init=False)
    owned: list[str] = field(init=False)
    will_compile: int = field(init=False)
    parallel: JobChoice = field(init=False)
    built: runner.Built = field(init=False)
    compiles: list[SeatLogEntry] = field(init=False)
    obs: ShardObservation = field(init=False)
    verdict: Verdict = field(init=False)
    manifest: Optional[archive.Manifest] = None
    written: Optional[Path] = None

    @property
    def source_filter(self) -> bool:
        return self.recipe.sharding.filter == "source"


def run_shard(
    recipe: Recipe,
    spec: ShardSpec,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    cache: Optional[CacheChoice] = None,
    *,
    settings: Settings,
    deadline: Optional[float] = None,
    resume: Optional[Path] = None,
) -> ShardResult:
    """One shard, alone: a second run of the same shard here is refused before it touches anything.
    ``settings``: the run's (the command line's).
    ``deadline`` (Unix time): no owned compile starts after it, and the job packs what it has as a
    partial part; ``resume``: the previous part's archive, restored before the build
    (:mod:`cuw.jobs.continuation`)."""
    job = ShardJob(
        recipe=recipe,
        paths=paths,
        settings=settings,
        progress=progress,
        cache=cache,
        folder=f"shard-{spec.tag}",
        label=f"shard {spec}",
        named=f"shard {spec}",
        gate="shard",
        spec=spec,
        jobs=jobs,
        deadline=deadline,
        resume=resume,
    )
    steps = runner.Steps(
        prepare=[_check_lane, runner.settle, _begin, _prepare, _slice],
        build=[_announce, _build, _gate, _refuse_lost_remote, _hand_off, _write_report],
    )
    runner.run(job, steps)
    assert job.report_path is not None
    return ShardResult(job.verdict, job.written, job.report_path)


def _check_lane(job: ShardJob) -> None:
    check_lane(job.recipe, job.cell, job.spec)


def _begin(job: ShardJob) -> None:
    """The job folder, its orphans stopped, and the report saying "running" from here."""
    job.target = job.paths.cell_artifacts(job.cell) / archive.archive_name(job.cell, job.spec.index, job.spec.count)
    job.ws = Workspace.for_job(job.paths.cell_work(job.cell), job.folder, tool_class(job.choice.tool).shared_tree)
    # A run killed with SIGKILL leaves its build running in the job folder: stopped before the wipe.
    leftovers.stop_orphans(job.ws.cuda_home, job.label)
    # Before this run's report replaces the one beside the archive that records its digest; a part that
    # is this run's own output (the command a partial part prints) is kept aside first.
    if job.resume:
        its_cache = open_cache(job.choice.tool, job.ws.cache_dir, job.ws.tree, job.choice.remote, settings=job.settings)
        resume = continuation.hold(job.resume, job.target)
        job.resumed = continuation.check_resume(resume, job.spec, job.cell, its_cache, current_builder(job.settings))
    # The previous archive stays until this run's replaces it (or its gate fails); its
    # report says "running, not ok" until this run's verdict is written, after the archive.
    archive.remove_partials(job.target)
    runner.begin_report(job, archive.report_path(job.target), _record(job))


def _record(job: ShardJob) -> ShardReport:
    """The report's record before the build: its cell and shard, no archive yet (written as null)."""
    return ShardReport(gate="shard", ok=False, cell=job.cell.to_dict(), shard=str(job.spec), nulls=frozenset({"archive"}))


def _prepare(job: ShardJob) -> None:
    """The source, patched, its deps and the seat; the fingerprint of the tree every job of the
    cell starts from (before the source filter trims this shard's copy)."""
    recipe, spec, ws, choice = job.recipe, job.spec, job.ws, job.choice
    patch_ctx = PatchContext(ws.src, job.cell, job.archs, recipe.key)
    # Under the source filter the seat partitions the rest (seat_rest), or nothing.
    seat_spec = spec if not job.source_filter or (seat_rest(recipe) and spec.count > 1) else None
    job.job_cache = prepare(
        ws,
        recipe,
        job.toolkit,
        seat_spec,
        choice.tool,
        choice.remote,
        patch_ctx,
        job.cell.lane,
        settings=job.settings,
        deadline=job.deadline,
    )
    job.fingerprint = handoff_fingerprint(recipe, ws.src, job.archs, job.toolkit, spec.count, job.cell.lane)
    if job.resumed:
        continuation.restore(job.resumed, ws, job.fingerprint, spec)


def _slice(job: ShardJob) -> None:
    """The TUs the shard owns and will compile; under the source filter the others' files deleted."""
    recipe, spec, src, lane = job.recipe, job.spec, job.ws.src, job.cell.lane
    if job.source_filter:
        job.owned, job.will_compile = shard_workload(recipe, src, spec, lane)
        rule = recipe_assignment(recipe, spec.count, src, lane)
        apply_source_filter(src, recipe.sharding.source.globs, spec, lane, rule)
        return
    job.owned = expected_owned(recipe, src, spec, lane)
    job.will_compile = len(job.owned)
    known = len(covered_keys(recipe, src, lane))
    if job.progress and spec.count > known:
        job.progress(
            f"shard {spec}: warning: N={spec.count} is more than the {known} TUs known in the source; "
            f"at least {spec.count - known} shards get an empty slice (cuw plan {recipe.key} picks N)"
        )


def _announce(job: ShardJob) -> None:
    """Its compile jobs, then (once the job is sure to build: a refusal before it stays one line) its start."""
    job.parallel = shard_jobs(job.recipe, job.cell.lane, job.owned, job.jobs)
    if job.progress:
        job.progress(resources.disk_line(job.label, job.sampler))
        job.progress(
            f"{job.label}: building {job.cell.id} ({len(job.owned)} TUs in its slice, filter {job.recipe.sharding.filter}, "
            f"{describe_cache(job.job_cache)}; {plural(job.parallel.jobs, 'compile job')}: {job.parallel.why}); "
            f"log {job.ws.build_log}"
        )


def _build(job: ShardJob) -> None:
    recipe, ws, cell, spec = job.recipe, job.ws, job.cell, job.spec
    env = build_env(
        recipe,
        ws.cuda_home,
        ws.build,
        job.parallel.jobs,
        spec if job.source_filter else None,
        job.settings.child_env(),
        lane=cell.lane,
        shard=spec,
        archs=job.archs,
        deps_dir=install_extra_deps(recipe, ws, cell.cuda),
    )
    # Host compiles count where the slice holds host TUs (the source filter's rest, a seat's host
    # partition) or where host code is all there is (device_code: false).
    count_host = job.source_filter or not recipe.device_code or any(not is_cuda(k) for k in job.owned)
    job.built = runner.cached_build(job, job.job_cache, env, job.will_compile, count_host)


def _gate(job: ShardJob) -> None:
    """The shard gate over what the build did, and what the report carries beside it."""
    job.obs, job.compiles = _observe(job)
    job.verdict = shard_gate(job.obs)
    parallel, chained = job.parallel, bool(job.deadline or job.resumed)
    job.report = replace(
        _record(job),
        build_s=job.built.seconds,
        build_log=str(job.ws.build_log),
        counters=job.built.stats.summary(),
        compile_usage=seat_log.measured_totals(job.compiles),  # the CPU seconds and peak the planner is held to
        parallel_jobs={"jobs": parallel.jobs, "predicted_peak_mb": parallel.peak_mb, "why": parallel.why},
        # Taken again at each write: the record covers the job up to the report that carries it.
        resources=job.sampler.record(),
        part=(job.resumed.part if job.resumed else 1) if chained else None,
        left=job.obs.left if chained else None,
    )


def _observe(job: ShardJob) -> tuple[ShardObservation, list[SeatLogEntry]]:
    """What the shard gate judges, from the build's log, tree and seat log; and the compiles.
    A continuation's TUs finished in earlier parts are ``earlier``."""
    ws, stats = job.ws, job.built.stats
    entries = seat_log.read_entries(ws.seat_log)
    compiles = [e for e in entries if e.is_compile]
    seen = [e for e in entries if e.action in TU_ACTIONS]
    obs = ShardObservation(
        build_rc=job.built.rc,
        log=ws.build_log.read_text(errors="replace"),
        real_objects=real_objects(ws),
        seat_compiles_seen=sum(1 for e in seen if not e.is_host),
        compiled=sorted({e.tu for e in compiles if e.rc == 0}),
        failed=sorted({e.tu for e in compiles if e.rc != 0}),
        expected_owned=job.owned,
        cache_files=stats.files,
        unstored_misses=stats.unstored,
        build_tus=compdb.compiled_sources(ws.tree, ws.src),
        host_compiles_seen=sum(1 for e in seen if e.is_host),
        device_code=job.recipe.device_code,
        resources=resources.summary(job.sampler.record()),
        uncacheable={e.tu: str(e.outcome).split(":", 1)[-1] for e in compiles if e.rc == 0 and _uncacheable(e)},
        deferred=sorted({e.tu for e in entries if e.action == "deferred"}),
        missed=seat_log.missed_keys(compiles, job.job_cache),
        earlier=job.resumed.earlier if job.resumed else [],
    )
    return obs, compiles


def _uncacheable(entry: SeatLogEntry) -> bool:
    return (entry.outcome or "").startswith("uncacheable")


def _refuse_lost_remote(job: ShardJob) -> None:
    """Entries that never reached the remote: a manifest would claim a cache the link cannot find.
    Before the gate's own word on unstored misses: the remote's failure names it."""
    lost = archive.remote_failures(job.job_cache) if job.job_cache.remote else None
    if not lost:
        return
    counts = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
    why = (
        f"remote cache {job.job_cache.remote} failed during the build ({counts}): "
        "this shard's cache did not all reach it; no manifest handed over, run the shard again"
    )
    job.target.unlink(missing_ok=True)
    assert job.report_path is not None
    report.write(Verdict(job.verdict.gate, False, [why], job.verdict.facts), job.report_path, job.report)
    raise CuwError(f"shard {job.spec}: {why}")  # a remote out of reach: no kind of input or tool


def _manifest(job: ShardJob) -> archive.Manifest:
    job_cache = job.job_cache
    return archive.Manifest(
        format=archive.FORMAT,
        forge_version=__version__,
        cell=job.cell.to_dict(),
        shard_index=job.spec.index,
        shard_count=job.spec.count,
        filter=job.recipe.sharding.filter,
        cache_tool=job_cache.tool,
        cache_version=job_cache.version(),
        cache_remote=job_cache.remote,
        owned=job.obs.expected_owned,
        compiled=continuation.merged_compiled(job.resumed, job.obs.compiled),
        counters=job.built.stats.summary(),
        fingerprint=job.fingerprint,
        timeline=[row for row in map(seat_log.timeline_row, job.compiles) if row is not None],
        builder=current_builder(job.settings).to_dict(),
        part=job.resumed.part if job.resumed else 1,
        partial=bool(job.obs.left),
        left=job.obs.left,
    )


def _hand_off(job: ShardJob) -> None:
    """A passed shard's archive packed (its digest into the report); a failed one's removed: no
    older archive stands in for a finished run that failed its gate."""
    if not job.verdict.ok:
        job.target.unlink(missing_ok=True)
        return
    assert job.report_path is not None
    job.manifest = _manifest(job)
    try:
        job.written = archive.pack(job.job_cache, job.manifest, job.target)
    except CuwError as exc:
        causes = starved(str(exc), 0, resources.summary(job.sampler.record())).values()
        failed = Verdict(job.verdict.gate, False, [*causes, f"the gate passed but {exc}"], job.verdict.facts)
        previous = str(job.target) if job.target.exists() else None
        try:
            kept = replace(job.report, previous_archive=previous, nulls=job.report.nulls | {"previous_archive"})
            report.write(failed, job.report_path, kept)
        except CuwError:
            pass  # the disk that refused the archive may refuse the report too; the marker says "not ok"
        raise type(exc)(f"shard {job.spec}: {exc}") from None  # its kind kept: a full disk, an unwritable folder
    # The link refuses an archive that is not this one.
    job.report = replace(job.report, archive=str(job.written), archive_sha256=sha256_of(job.written))


def _write_report(job: ShardJob) -> None:
    """After the archive (an ok report always has its archive), then the verdict's lines."""
    assert job.report_path is not None
    job.report = replace(job.report, resources=job.sampler.record())  # packing the archive counts: it can fill the disk too
    report.write(job.verdict, job.report_path, job.report)
    if job.verdict.ok:
        continuation.release(job.resumed)  # the part kept aside is in this run's archive
    runner.announce(job, job.verdict)
    if not job.verdict.ok:
        runner.show_failure(job, job.obs.log)
        if job.resumed:
            report.say(continuation.kept_line(job.label, job.resumed))
    elif job.obs.left and job.written and job.manifest:
        left, owned = len(job.obs.left), len(job.owned)
        report.say(continuation.continue_line(job.label, job.manifest.part, left, owned, job.recipe.key, job.spec, job.written))
    elif job.job_cache.remote:
        report.say(f"cache written to {job.job_cache.remote}; shard manifest: {job.written}")
    else:
        report.say(f"cache archive: {job.written}")
