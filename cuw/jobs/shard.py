"""The compile shard: its slice of the TUs, the build, the shard gate and the cache archive."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cuw import __version__
from cuw.jobs import archive, continuation
from cuw.gates import compdb
from cuw.jobs import leftovers
from cuw.jobs import resources
from cuw.gates import report
from cuw.seat import seat_log
from cuw.jobs.backends import build_env
from cuw.config.cell import Cell, local_cell
from cuw.base.errors import CuwError
from cuw.base.files import sha256_of
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
from cuw.toolchain.cache import Cache, Stats, check_remote, open_cache, tool_class
from cuw.toolchain.toolkit import find_toolkit
from cuw.toolchain.builder import current_builder
from cuw.jobs.workspace import Workspace, default_jobs, install_extra_deps, prepare, real_objects


from cuw.jobs.context import (
    Progress,
    alone,
    check_floor,
    check_lane,
    cell_archs_in_grid,
    describe_cache,
    plural,
    policy_for,
    resolve_cache,
)
from cuw.jobs.process import build


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


def run_shard(
    recipe: Recipe,
    spec: ShardSpec,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    cache: Optional[CacheChoice] = None,
    settings: Optional[Settings] = None,
    deadline: Optional[float] = None,
    resume: Optional[Path] = None,
) -> ShardResult:
    """One shard, alone: a second run of the same shard here is refused before it touches anything.
    ``settings``: the run's (the command line passes them; this process's environment when None).
    ``deadline`` (Unix time): no owned compile starts after it, and the job packs what it has as a
    partial part; ``resume``: the previous part's archive, restored before the build
    (:mod:`cuw.jobs.continuation`)."""
    settings = settings or Settings.from_env()
    cell = local_cell(recipe, find_toolkit(homes=settings.homes))
    interval = resources.sample_interval(settings.sample_s)  # refused before the job folder is made
    with alone(recipe, cell, paths, f"shard-{spec.tag}", f"shard {spec} of {cell.id}", cache, settings):
        # From the job's start to its report: prepare (source copy, deps) fills disks too.
        with resources.Sampler(paths.cell_work(cell) / f"shard-{spec.tag}", interval) as sampler:
            return _run_shard(recipe, spec, paths, jobs, progress, cache, sampler, settings, Chain(deadline, resume))


@dataclass(frozen=True)
class Chain:
    """Where this job stands in its shard's chain of parts: its deadline, the archive it resumes."""

    deadline: Optional[float] = None
    resume: Optional[Path] = None


def _observe(
    ws: Workspace,
    recipe: Recipe,
    rc: int,
    owned: list[str],
    stats: Stats,
    sampler: resources.Sampler,
    job_cache: Cache,
    earlier: list[str],
) -> tuple[ShardObservation, list[dict]]:
    """What the shard gate judges, from the build's log, tree and seat log; and the compiles.
    ``earlier``: a continuation's TUs finished in earlier parts."""
    entries = seat_log.read_log(ws.seat_log)
    compiles = [e for e in entries if e.get("action") == "compiled"]
    seen = ("compiled", "stubbed", "deferred")
    obs = ShardObservation(
        build_rc=rc,
        log=ws.build_log.read_text(errors="replace"),
        real_objects=real_objects(ws),
        seat_compiles_seen=sum(1 for e in entries if e.get("action") in seen and e.get("kind") != "host"),
        compiled=sorted({e["key"] for e in compiles if e.get("rc") == 0}),
        failed=sorted({e["key"] for e in compiles if e.get("rc") != 0}),
        expected_owned=owned,
        cache_files=stats.files,
        unstored_misses=stats.unstored,
        build_tus=compdb.compiled_sources(ws.tree, ws.src),
        host_compiles_seen=sum(1 for e in entries if e.get("action") in seen and e.get("kind") == "host"),
        device_code=recipe.device_code,
        resources=resources.summary(sampler.record()),
        uncacheable={
            e["key"]: str(e["outcome"]).split(":", 1)[-1]
            for e in compiles
            if e.get("rc") == 0 and str(e.get("outcome", "")).startswith("uncacheable")
        },
        deferred=sorted({e["key"] for e in entries if e.get("action") == "deferred"}),
        missed=seat_log.missed_keys(compiles, job_cache),
        earlier=earlier,
    )
    return obs, compiles


def _refuse_lost_remote(
    job_cache: Cache, verdict: Verdict, target: Path, report_path: Path, context: dict[str, Any], spec: ShardSpec
) -> None:
    """Entries that never reached the remote: a manifest would claim a cache the link cannot find."""
    lost = archive.remote_failures(job_cache)
    if not lost:
        return
    counts = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
    why = (
        f"remote cache {job_cache.remote} failed during the build ({counts}): "
        "this shard's cache did not all reach it; no manifest handed over, run the shard again"
    )
    target.unlink(missing_ok=True)
    report.write(Verdict(verdict.gate, False, [why], verdict.facts), report_path, context)
    raise CuwError(f"shard {spec}: {why}")


def _manifest(
    recipe: Recipe,
    spec: ShardSpec,
    cell: Cell,
    job_cache: Cache,
    obs: ShardObservation,
    fingerprint: dict[str, str],
    compiles: list[dict],
    counters: dict[str, int],
    resumed: Optional[continuation.Resumed],
    settings: Settings,
) -> archive.Manifest:
    return archive.Manifest(
        format=archive.FORMAT,
        forge_version=__version__,
        cell=cell.to_dict(),
        shard_index=spec.index,
        shard_count=spec.count,
        filter=recipe.sharding.filter,
        cache_tool=job_cache.tool,
        cache_version=job_cache.version(),
        cache_remote=job_cache.remote,
        owned=obs.expected_owned,
        compiled=continuation.merged_compiled(resumed, obs.compiled),
        counters=counters,
        fingerprint=fingerprint,
        timeline=[row for row in map(seat_log.timeline_row, compiles) if row is not None],
        builder=current_builder(settings).to_dict(),
        part=resumed.part if resumed else 1,
        partial=bool(obs.left),
        left=obs.left,
    )


def _run_shard(
    recipe: Recipe,
    spec: ShardSpec,
    paths: Paths,
    jobs: Optional[int],
    progress: Optional[Progress],
    cache: Optional[CacheChoice],
    sampler: resources.Sampler,
    settings: Settings,
    chain: Chain,
) -> ShardResult:
    toolkit = find_toolkit(homes=settings.homes)
    cell = local_cell(recipe, toolkit)
    check_lane(recipe, cell, spec)
    archs = cell_archs_in_grid(recipe, cell)
    check_floor(recipe, cell, settings)
    choice = resolve_cache(recipe, cell, cache, settings)
    if choice.remote:
        check_remote(choice.remote)
    out_dir = paths.cell_artifacts(cell)
    name = archive.archive_name(cell, spec.index, spec.count)
    target = out_dir / name
    report_path = archive.report_path(target)
    source_filter = recipe.sharding.filter == "source"
    ws = Workspace.for_job(paths.cell_work(cell), f"shard-{spec.tag}", tool_class(choice.tool).shared_tree)
    # A run killed with SIGKILL leaves its build running in the job folder: stopped before the wipe.
    leftovers.stop_orphans(ws.cuda_home, f"shard {spec}")
    # Before this run's report replaces the one beside the archive that records its digest.
    resumed = None
    if chain.resume:
        resumed = continuation.check_resume(
            chain.resume, spec, cell, open_cache(choice.tool, ws.cache_dir, ws.tree, choice.remote, settings)
        )
    # The previous archive stays until this run's replaces it (or its gate fails); its
    # report says "running, not ok" until this run's verdict is written, after the archive.
    archive.remove_partials(target)
    report.begin("shard", report_path, {"cell": cell.to_dict(), "shard": str(spec), "archive": None})
    try:
        patch_ctx = PatchContext(ws.src, cell, archs, recipe.key)
        # Under the source filter the seat partitions the rest (seat_rest), or nothing.
        seat_spec = spec if not source_filter or (seat_rest(recipe) and spec.count > 1) else None
        job_cache = prepare(
            ws, recipe, toolkit, seat_spec, choice.tool, choice.remote, patch_ctx, cell.lane, settings, chain.deadline
        )
        # Before the source filter trims this shard's copy: the tree every job of the cell starts from.
        fingerprint = handoff_fingerprint(recipe, ws.src, archs, toolkit, spec.count, cell.lane)
        if resumed:
            continuation.restore(resumed, ws, fingerprint, spec)
        if source_filter:
            owned, will_compile = shard_workload(recipe, ws.src, spec, cell.lane)
            rule = recipe_assignment(recipe, spec.count, ws.src, cell.lane)
            apply_source_filter(ws.src, recipe.sharding.source.globs, spec, cell.lane, rule)
        else:
            owned = expected_owned(recipe, ws.src, spec, cell.lane)
            will_compile = len(owned)
            known = len(covered_keys(recipe, ws.src, cell.lane))
            if progress and spec.count > known:
                progress(
                    f"shard {spec}: warning: N={spec.count} is more than the {known} TUs known in the source; "
                    f"at least {spec.count - known} shards get an empty slice (cuw plan {recipe.key} picks N)"
                )
    except CuwError as exc:  # nothing was built: the report says so instead of "running"
        record = sampler.record()
        causes = starved(str(exc), 0, resources.summary(record))  # a source copy or a pip install can fill the disk
        report.write(
            Verdict("shard", False, [*causes.values(), f"the shard did not start its build: {exc}"]),
            report_path,
            {"cell": cell.to_dict(), "shard": str(spec), "archive": None, "resources": record},
        )
        raise
    label = f"shard {spec}"
    parallel = shard_jobs(recipe, cell.lane, owned, jobs)
    if progress:
        # Once the job is sure to build: a refusal before it stays one line.
        progress(resources.disk_line(label, sampler))
        progress(
            f"{label}: building {cell.id} ({len(owned)} TUs in its slice, filter {recipe.sharding.filter}, "
            f"{describe_cache(job_cache)}; {plural(parallel.jobs, 'compile job')}: {parallel.why}); log {ws.build_log}"
        )
    env = build_env(
        recipe,
        ws.cuda_home,
        ws.build,
        parallel.jobs,
        spec if source_filter else None,
        settings.child_env(),
        lane=cell.lane,
        shard=spec,
        archs=archs,
        deps_dir=install_extra_deps(recipe, ws, cell.cuda),
    )
    job_cache.start()
    try:
        job_cache.zero()
        started = time.monotonic()
        # Host compiles count where the slice holds host TUs (the source filter's rest, a seat's host
        # partition) or where host code is all there is (device_code: false).
        count_host = source_filter or not recipe.device_code or any(not is_cuda(k) for k in owned)
        rc = build(ws, recipe, env, label, will_compile, progress, count_host=count_host)
        build_s = round(time.monotonic() - started, 1)
        stats = job_cache.stats()
    finally:
        job_cache.stop()

    obs, compiles = _observe(ws, recipe, rc, owned, stats, sampler, job_cache, resumed.earlier if resumed else [])
    verdict = shard_gate(obs)
    written: Optional[Path] = None
    context = {
        "cell": cell.to_dict(),
        "shard": str(spec),
        "archive": None,
        "build_s": build_s,
        "build_log": str(ws.build_log),
        "counters": stats.summary(),
        "compile_usage": seat_log.measured_totals(compiles),  # the CPU seconds and peak the planner is held to
        "parallel_jobs": {"jobs": parallel.jobs, "predicted_peak_mb": parallel.peak_mb, "why": parallel.why},
        **({"part": resumed.part if resumed else 1, "left": obs.left} if chain.deadline or resumed else {}),
    }
    # Taken again at each write: the record covers the job up to the report that carries it.
    context["resources"] = sampler.record()
    if job_cache.remote:  # before the gate's own word on unstored misses: the remote's failure names it
        _refuse_lost_remote(job_cache, verdict, target, report_path, context, spec)
    if verdict.ok:
        manifest = _manifest(recipe, spec, cell, job_cache, obs, fingerprint, compiles, stats.summary(), resumed, settings)
        try:
            written = archive.pack(job_cache, manifest, target)
        except CuwError as exc:
            failed = Verdict(
                verdict.gate,
                False,
                [*starved(str(exc), 0, resources.summary(sampler.record())).values(), f"the gate passed but {exc}"],
                verdict.facts,
            )
            try:
                report.write(failed, report_path, {**context, "previous_archive": str(target) if target.exists() else None})
            except CuwError:
                pass  # the disk that refused the archive may refuse the report too; the marker says "not ok"
            raise CuwError(f"shard {spec}: {exc}") from None
        context["archive"] = str(written)
        context["archive_sha256"] = sha256_of(written)  # the link refuses an archive that is not this one
    else:
        target.unlink(missing_ok=True)  # a finished run that failed its gate: no older archive stands in for it
    context["resources"] = sampler.record()  # packing the archive counts: it can fill the disk too
    report.write(verdict, report_path, context)  # after the archive: an ok report always has its archive
    report.step_summary(f"{recipe.key} {label}", verdict, settings.github.step_summary)
    report.say(verdict.line)
    if not verdict.ok:
        for line in obs.log.splitlines()[-15:]:
            print(f"  | {line}", file=sys.stderr)
        report.say(f"full log: {ws.build_log}")
    elif obs.left and written:
        report.say(continuation.continue_line(label, manifest.part, len(obs.left), len(owned), recipe.key, spec, written))
    elif job_cache.remote:
        report.say(f"cache written to {job_cache.remote}; shard manifest: {written}")
    else:
        report.say(f"cache archive: {written}")
    return ShardResult(verdict, written, report_path)
