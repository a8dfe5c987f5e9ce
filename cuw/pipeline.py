"""The three jobs: a compile shard, the link, and a whole cell built locally.

Each takes a loaded recipe and folder settings, runs a real build, passes the
result through its gate and returns the verdict. The CLI, nox and invoke all
call these functions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from . import __version__, archive, compdb, leftovers, report, seat
from .backends import build_command, build_env
from .cell import Cell, local_cell
from .errors import CuwError
from .gates import LinkObservation, ShardObservation, Verdict, link_gate, shard_gate
from .assignment import covered_keys, recipe_assignment, rest_keys, seat_rest, source_filter_files
from .partition import Assignment, ShardSpec, tu_key
from .progress import Meter
from .paths import Paths  # noqa: F401 - re-exported: callers import Paths from here
from .grid import cell_archs, require_in_grid
from .patching import PatchContext
from .policy import CacheChoice, Policy, cache_choice, load_policy
from .recipe import Recipe
from .cache import Cache, Sccache, check_remote, tool_class
from .finish import dist_versions, repair, retag
from .toolkit import Toolkit, find_toolkit
from .verify import Check, verify, write_verify_reports
from .verify import Report as VerifyReport
from .workspace import Workspace, build_sources, cuda_sources, default_jobs, install_extra_deps, prepare, real_objects


@dataclass
class ShardResult:
    verdict: Verdict
    archive: Optional[Path]
    report: Path


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


Progress = Callable[[str], None]


def _check_lane(recipe: Recipe, cell: Cell, spec: ShardSpec) -> None:
    if spec.count > 1 and cell.lane not in recipe.sharding.platforms:
        lanes = ", ".join(recipe.sharding.platforms)
        raise CuwError(f"recipe {recipe.key!r} does not shard on lane {cell.lane} (sharding.platforms: {lanes}); use 1/1")


def apply_source_filter(
    src_root: Path, globs: list[str], spec: ShardSpec, lane: str = "linux", assignment: Optional[Assignment] = None
) -> list[str]:
    """Deletes out-of-slice files matched by ``globs``; returns the kept keys.

    ``assignment`` is the recipe's rule (:func:`cuw.assignment.recipe_assignment`);
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
    return owned, len(owned) + len(unfiltered_sources(recipe, src_root, lane))


def unfiltered_sources(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """Source files a source-filter recipe's globs do not cover (what ``seat_rest`` partitions)."""
    from dataclasses import replace

    sources = replace(recipe.sharding.source, seat_rest=True)
    return rest_keys(replace(recipe, sharding=replace(recipe.sharding, source=sources)), src_root, lane)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _describe(job_cache: Cache) -> str:
    return f"{job_cache.tool} {job_cache.version()}" + (f", remote {job_cache.remote}" if job_cache.remote else "")


def _spawn(cmd: list[str], **kwargs) -> subprocess.Popen:
    """A child in a process group of its own (POSIX), so it and everything it starts (pip,
    CMake, ninja, the compilers) can be stopped together, and a Ctrl-C reaches the forge first."""
    return subprocess.Popen(cmd, start_new_session=os.name == "posix", **kwargs)


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Sends ``sig`` to the child's process group (the child alone off POSIX); False when none is left."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)
        else:
            return False
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    """Stops children started by :func:`_spawn` and everything in their groups: terminate,
    wait up to ``grace`` seconds, then kill. Every child is reaped."""
    import signal

    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        # What is left of each group (a leader that ignored SIGTERM, a compiler it started) is killed.
        while _signal_group(proc, 0) and time.monotonic() < deadline and os.name == "posix":
            time.sleep(0.05)
        _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        proc.wait()


class _Terminated(SystemExit):
    """SIGTERM (a CI runner cancelling the job, or ``cuw build`` stopping its shards) while a build runs."""


def _sigterm_raises():
    """A context in which SIGTERM raises :class:`_Terminated`, so the build child is stopped
    and reaped on the way out (only the main thread can set a handler; elsewhere nothing changes)."""
    import contextlib
    import signal
    import threading

    @contextlib.contextmanager
    def scope():
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            raise _Terminated(128 + signum)

        previous = signal.signal(signal.SIGTERM, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    return scope()


def _watch(
    proc: subprocess.Popen,
    ws: Workspace,
    label: str,
    owned: int,
    progress: Optional[Progress],
    poll_s: float = 1.0,
    count_host: bool = False,
) -> int:
    """Waits for the build child, printing progress from the seat log (read incrementally: only
    what was appended, a half-written last line waits for the next look). On any error or
    interrupt the child and its process group are stopped before the exception goes on.
    ``count_host``: host compiles count too (``owned`` counts them)."""
    reader = seat.LogReader(ws.seat_log, count_host=count_host)
    meter = Meter(f"{label}: compiled", owned, "TUs", say=progress) if progress is not None else None
    try:
        while True:
            try:
                rc = proc.wait(timeout=poll_s)
                if meter is not None:
                    meter.update(reader.compiled_count())
                    meter.close()
                return rc
            except subprocess.TimeoutExpired:
                pass
            if meter is not None:
                meter.update(reader.compiled_count())
    except BaseException:
        _stop([proc])
        raise


def _build(
    ws: Workspace, recipe: Recipe, env: dict[str, str], label: str, owned: int, progress: Optional[Progress],
    count_host: bool = False,
) -> int:
    project = ws.src / recipe.build_subdir
    cmd = build_command(project, ws.wheel_dir)
    with _sigterm_raises():
        if recipe.pre_build:
            # Inside the seat and cache environment: its compiles are cached like the build's.
            with open(ws.build_log, "ab") as fh:
                fh.write(f"$ (pre_build) {recipe.pre_build}\n".encode())
                fh.flush()
                pre = _spawn(["bash", "-c", recipe.pre_build], env=env, cwd=project, stdout=fh,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
                rc = _watch(pre, ws, label, owned, None)
            if rc != 0:
                return rc
        with open(ws.build_log, "ab") as fh:
            fh.write(("$ " + " ".join(cmd) + "\n").encode())
            fh.flush()
            proc = _spawn(cmd, env=env, cwd=project, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            return _watch(proc, ws, label, owned, progress, count_host=count_host)


def _policy(recipe: Recipe) -> Policy:
    return load_policy(Path(recipe.folder).parent)


def _cell_archs(recipe: Recipe, cell: Cell) -> list[str]:
    """Refuses a cell outside the recipe's grid; returns the archs it compiles."""
    policy = _policy(recipe)
    require_in_grid(recipe, policy.grid, cell)
    return cell_archs(recipe, policy.archs, cell)


def resolve_cache(recipe: Recipe, cell: Cell, choice: Optional[CacheChoice]) -> CacheChoice:
    """The cell's cache tool and remote: given, or from the policy beside the recipes."""
    if choice is not None:
        return choice
    return cache_choice(_policy(recipe), cell.lane)


def run_shard(
    recipe: Recipe,
    spec: ShardSpec,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    cache: Optional[CacheChoice] = None,
) -> ShardResult:
    toolkit = find_toolkit()
    cell = local_cell(recipe, toolkit)
    _check_lane(recipe, cell, spec)
    archs = _cell_archs(recipe, cell)
    choice = resolve_cache(recipe, cell, cache)
    if choice.remote:
        check_remote(choice.remote)
    out_dir = paths.cell_artifacts(cell)
    name = archive.archive_name(cell, spec.index, spec.count)
    target = out_dir / name
    report_path = out_dir / name.replace(archive.SUFFIX, ".report.json")
    source_filter = recipe.sharding.filter == "source"
    ws = Workspace.for_job(paths.cell_work(cell), f"shard-{spec.tag}", tool_class(choice.tool).shared_tree)
    earlier = report.running_pid(report_path)
    if earlier is not None and earlier != os.getpid() and leftovers.pid_alive(earlier):
        raise CuwError(f"shard {spec} of {cell.id} is already running (pid {earlier}); wait for it or stop it "
                       f"(or remove {report_path} if that process is not a forge run)")  # fmt: skip
    # A run killed with SIGKILL leaves its build running in the job folder: stopped before the wipe.
    leftovers.stop_orphans(ws.cuda_home, f"shard {spec}")
    # The previous archive stays until this run's replaces it (or its gate fails); its
    # report says "running, not ok" until this run's verdict is written, after the archive.
    archive.remove_partials(target)
    report.begin("shard", report_path, {"cell": cell.to_dict(), "shard": str(spec), "archive": None})
    try:
        patch_ctx = PatchContext(ws.src, cell, archs, spec if spec.count > 1 else None, recipe.key)
        # Under the source filter the seat partitions the rest (seat_rest), or nothing.
        seat_spec = spec if not source_filter or (seat_rest(recipe) and spec.count > 1) else None
        job_cache = prepare(ws, recipe, toolkit, seat_spec, choice.tool, choice.remote, patch_ctx, lane=cell.lane)
        if source_filter:
            owned, will_compile = shard_workload(recipe, ws.src, spec, cell.lane)
            rule = recipe_assignment(recipe, spec.count, ws.src, cell.lane)
            apply_source_filter(ws.src, recipe.sharding.source.globs, spec, cell.lane, rule)
        else:
            owned = expected_owned(recipe, ws.src, spec, cell.lane)
            will_compile = len(owned)
            known = len(covered_keys(recipe, ws.src, cell.lane))
            if progress and spec.count > known:
                progress(f"shard {spec}: warning: N={spec.count} is more than the {known} TUs known in the source; "
                         f"at least {spec.count - known} shards get an empty slice (cuw plan {recipe.key} picks N)")  # fmt: skip
    except CuwError as exc:  # nothing was built: the report says so instead of "running"
        report.write(Verdict("shard", False, [f"the shard did not start its build: {exc}"]), report_path,
                     {"cell": cell.to_dict(), "shard": str(spec), "archive": None})  # fmt: skip
        raise
    label = f"shard {spec}"
    if progress:
        progress(
            f"{label}: building {cell.id} ({len(owned)} TUs in its slice, filter {recipe.sharding.filter}, "
            f"{_describe(job_cache)}); log {ws.build_log}"
        )
    env = build_env(
        recipe, ws.cuda_home, ws.build, jobs or default_jobs(), spec if source_filter else None,
        lane=cell.lane, shard=spec, archs=archs, deps_dir=install_extra_deps(recipe, ws, cell.cuda),
    )  # fmt: skip
    job_cache.start()
    try:
        job_cache.zero()
        started = time.monotonic()
        rc = _build(ws, recipe, env, label, will_compile, progress, count_host=source_filter)
        build_s = round(time.monotonic() - started, 1)
        stats = job_cache.stats()
    finally:
        job_cache.stop()

    entries = seat.read_log(ws.seat_log)
    compiles = [e for e in entries if e.get("action") == "compiled"]
    obs = ShardObservation(
        build_rc=rc,
        log=ws.build_log.read_text(errors="replace"),
        real_objects=real_objects(ws),
        seat_compiles_seen=sum(
            1 for e in entries if e.get("action") in ("compiled", "stubbed") and e.get("kind") != "host"
        ),
        compiled=sorted({e["key"] for e in compiles if e.get("rc") == 0}),
        failed=sorted({e["key"] for e in compiles if e.get("rc") != 0}),
        expected_owned=owned,
        cache_files=stats.files,
        build_tus=build_sources(ws),
    )
    verdict = shard_gate(obs)
    written: Optional[Path] = None
    context = {"cell": cell.to_dict(), "shard": str(spec), "archive": None, "build_s": build_s,
               "build_log": str(ws.build_log), "counters": stats.summary()}  # fmt: skip
    if verdict.ok and job_cache.remote:
        lost = archive.remote_failures(job_cache)
        if lost:
            # Entries that never reached the remote: a manifest would claim a cache the link cannot find.
            counts = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
            why = (f"remote cache {job_cache.remote} failed during the build ({counts}): "
                   "this shard's cache did not all reach it; no manifest handed over, run the shard again")  # fmt: skip
            verdict = Verdict(verdict.gate, False, [why], verdict.facts)
            target.unlink(missing_ok=True)
            report.write(verdict, report_path, context)
            raise CuwError(f"shard {spec}: {why}")
    if verdict.ok:
        manifest = archive.Manifest(
            format=archive.FORMAT,
            forge_version=__version__,
            cell=cell.to_dict(),
            shard_index=spec.index,
            shard_count=spec.count,
            filter=recipe.sharding.filter,
            cache_tool=job_cache.tool,
            cache_version=job_cache.version(),
            cache_remote=job_cache.remote,
            owned=owned,
            compiled=obs.compiled,
            counters=stats.summary(),
            timeline=[[e["key"], round(e["at"] - e["seconds"], 3), e["seconds"], e.get("outcome")] for e in compiles
                      if isinstance(e.get("at"), (int, float)) and isinstance(e.get("seconds"), (int, float))],
        )
        try:
            written = archive.pack(job_cache, manifest, target)
        except CuwError as exc:
            failed = Verdict(verdict.gate, False, [f"the gate passed but {exc}"], verdict.facts)
            try:
                report.write(failed, report_path, {**context, "previous_archive": str(target) if target.exists() else None})
            except CuwError:
                pass  # the disk that refused the archive may refuse the report too; the marker says "not ok"
            raise CuwError(f"shard {spec}: {exc}") from None
        context["archive"] = str(written)
    else:
        target.unlink(missing_ok=True)  # a finished run that failed its gate: no older archive stands in for it
    report.write(verdict, report_path, context)  # after the archive: an ok report always has its archive
    report.step_summary(f"{recipe.key} {label}", verdict)
    report.say(verdict.line)
    if not verdict.ok:
        for line in obs.log.splitlines()[-15:]:
            print(f"  | {line}", file=sys.stderr)
        report.say(f"full log: {ws.build_log}")
    elif job_cache.remote:
        report.say(f"cache written to {job_cache.remote}; shard manifest: {written}")
    else:
        report.say(f"cache archive: {written}")
    return ShardResult(verdict, written, report_path)


RESTORE_THREADS = 4


def _restore(recipe: Recipe, cell: Cell, paths: Paths, ws: Workspace, job_cache: Cache) -> tuple[int, list[int]]:
    """Validates every archive, then merges them into the link's cache; returns (N, missing shards)."""
    folder = paths.cell_artifacts(cell)
    archives = archive.shard_archives(folder)
    if not archives:
        raise CuwError(
            f"no shard archives for {cell.id} in {folder}: run the shards first "
            f"(nox -s shard -- {recipe.key} 1/N, ... N/N)"
        )
    manifests = [archive.read_manifest(a) for a in archives]
    count = manifests[0].shard_count
    seen: dict[int, Path] = {}
    for path, manifest in zip(archives, manifests):
        archive.expect(manifest, path, cell, job_cache, count)
        if manifest.shard_index in seen:
            raise CuwError(f"{path} and {seen[manifest.shard_index]} are both shard {manifest.shard_index}/{count}")
        seen[manifest.shard_index] = path
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
    return count, missing


def _missed_keys(compiles: list[dict], job_cache: Cache) -> list[str]:
    """TU keys that missed: from the seat's per-call outcome, or sccache's piece log."""
    if isinstance(job_cache, Sccache):
        stems = job_cache.missed_stems()
        return sorted({e["key"] for e in compiles if Path(e["key"]).name.split(".", 1)[0] in stems})
    return sorted(e["key"] for e in compiles if e.get("outcome") == "miss")


def run_link(
    recipe: Recipe,
    paths: Paths,
    jobs: Optional[int] = None,
    progress: Optional[Progress] = report.say,
    zero_stats: bool = True,
    cache: Optional[CacheChoice] = None,
) -> LinkResult:
    """Restores every shard archive, re-runs the full build and gates it.

    ``zero_stats=False`` exists so a test can show the gate catching counters
    that still carry the shards' history.
    """
    toolkit = find_toolkit()
    cell = local_cell(recipe, toolkit)
    archs = _cell_archs(recipe, cell)
    choice = resolve_cache(recipe, cell, cache)
    if choice.remote:
        check_remote(choice.remote)
    ws = Workspace.for_job(paths.cell_work(cell), "link", tool_class(choice.tool).shared_tree)
    leftovers.stop_orphans(ws.cuda_home, "link")  # a killed link's build, still running in the job folder
    link_patch = PatchContext(ws.src, cell, archs, None, recipe.key)
    job_cache = prepare(ws, recipe, toolkit, None, choice.tool, choice.remote, link_patch, lane=cell.lane)
    count, missing = _restore(recipe, cell, paths, ws, job_cache)
    merged_at = int(time.time())
    if progress:
        got = count - len(missing)
        progress(f"link: restored {got}/{count} shard caches into {ws.cache_dir}")
        if missing:
            listing = ", ".join(f"{i}/{count}" for i in missing)
            progress(f"link: missing shard archives: {listing}; their TUs recompile here and the gate will report them")
    all_tus = cuda_sources(ws.src)
    env = build_env(recipe, ws.cuda_home, ws.build, jobs or default_jobs(), None, lane=cell.lane, archs=archs,
                    deps_dir=install_extra_deps(recipe, ws, cell.cuda))  # fmt: skip
    job_cache.start()
    try:
        if zero_stats:
            job_cache.zero()
        started = time.monotonic()
        rc = _build(ws, recipe, env, "link", len(all_tus), progress)
        build_s = round(time.monotonic() - started, 1)
        stats = job_cache.stats()
    finally:
        job_cache.stop()

    compiles = [e for e in seat.read_log(ws.seat_log) if e.get("action") == "compiled"]
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
        misses_by_key=_missed_keys(compiles, job_cache),
        uncacheable_by_key=sorted(e["key"] for e in compiles if str(e.get("outcome", "")).startswith("uncacheable")),
        shard_count=count,
        assignment=recipe_assignment(recipe, count, ws.src, cell.lane) if count > 1 else None,
        missing_shards=missing,
        log=log,
    )
    verdict = link_gate(obs)
    context = {"cell": cell.to_dict(), "shard_count": count, "build_log": str(ws.build_log), "wheel": obs.wheel, "build_s": build_s,
               "cache": {"tool": job_cache.tool, "version": job_cache.version(), "remote": job_cache.remote}}  # fmt: skip
    report.step_summary(f"{recipe.key} link", verdict)
    report.say(verdict.line)
    shipped: Optional[Path] = None
    checked: Optional[VerifyReport] = None
    if verdict.ok and wheels:
        checked, final = _finish_and_verify(wheels[0], recipe, cell, archs, toolkit, ws, paths)
        if checked.ok:
            # Into dist/ through temp files renamed into place, wheel first, reports after it: two
            # links of one cell writing at once, or a reader (pip, an upload) never see a torn file.
            from .files import copy_into, writable_dir

            writable_dir(paths.dist, "--dist")
            beside = write_verify_reports(checked, final)
            shipped = copy_into(final, paths.dist / final.name, "--dist")
            for made in beside:
                copy_into(made, paths.dist / made.name, "--dist")
            context["wheel"] = str(shipped)
        else:
            write_verify_reports(checked, final)
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
    return LinkResult(verdict, shipped, report_path, missing, checked)


def _finish_and_verify(
    wheel: Path, recipe: Recipe, cell: Cell, archs: list[str], toolkit: Toolkit, ws: Workspace, paths: Paths
) -> tuple[VerifyReport, Path]:
    """Local version label, curated metadata, auditwheel repair, then the verify gate."""
    recipes_dir = Path(recipe.folder).parent
    policy = load_policy(recipes_dir).wheel
    out = ws.root / "finished"
    try:
        retagged = retag(wheel, cell, recipe, out / "retagged", dist_versions(paths.dist, cell, recipes_dir))
        final = repair(retagged, cell.lane, policy, recipe, out / "repaired")
    except CuwError as exc:
        failed = VerifyReport(str(wheel), [Check("finish", False, [str(exc)])])
        report.say(f"verify gate FAIL: finish: {exc}")
        return failed, wheel
    checked = verify(final, recipe, cell, toolkit, policy, archs)
    report.say(checked.line)
    report.append_summary(checked.to_markdown())
    return checked, final


def run_build(
    recipe: Recipe,
    paths: Paths,
    count: Optional[int] = None,
    recipes_dir: Optional[Path] = None,
    progress: Progress = report.say,
    cache: Optional[CacheChoice] = None,
) -> tuple[list[Optional[bool]], LinkResult]:
    """A whole cell here: every shard as a parallel process, then the link.

    With a tool whose jobs share one tree (sccache), shards run one at a time.
    """
    toolkit = find_toolkit()
    cell = local_cell(recipe, toolkit)
    _cell_archs(recipe, cell)
    choice = resolve_cache(recipe, cell, cache)
    n = recipe.sharding.count if count is None else count
    if n < 1:
        raise CuwError(f"--shards must be at least 1, got {n}")
    specs = [ShardSpec(i, n) for i in range(1, n + 1)]
    _check_lane(recipe, cell, specs[0])
    folder = paths.cell_artifacts(cell)
    for stale in folder.glob("cuw-shard-*"):
        stale.unlink()
    cores = os.cpu_count() or 1
    shared_tree = tool_class(choice.tool).shared_tree
    parallel = 1 if shared_tree else min(n, cores)
    jobs = default_jobs(parallel)
    progress(
        f"build {cell.id}: {_plural(n, 'shard')}, {parallel} at a time, {_plural(jobs, 'compile job')} each, then the link "
        f"({choice.tool}{', remote ' + choice.remote if choice.remote else ''})"
    )
    outcomes: list[Optional[bool]] = [None] * n
    pending = list(specs)
    running: dict[int, tuple[subprocess.Popen, seat.LogReader, Optional[int]]] = {}
    meters: dict[int, Meter] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                spec = pending.pop(0)
                cmd = [sys.executable, "-m", "cuw", "shard", recipe.key, str(spec), "--quiet", "--jobs", str(jobs),
                       "--work", str(paths.work), "--artifacts", str(paths.artifacts)]  # fmt: skip
                if recipes_dir:
                    cmd += ["--recipes", str(recipes_dir)]
                cmd += ["--cache-tool", choice.tool] + (["--cache-remote", choice.remote] if choice.remote else [])
                ws = Workspace.for_job(paths.cell_work(cell), f"shard-{spec.tag}", shared_tree)
                owned = None
                if recipe.source.path is not None:
                    try:  # from the unpatched folder: a good guess (the shard's own line says it exactly)
                        owned = shard_workload(recipe, recipe.source_dir, spec)[1]
                    except CuwError:
                        pass
                reader = seat.LogReader(ws.seat_log, count_host=recipe.sharding.filter == "source")
                running[spec.index] = (_spawn(cmd, stdin=subprocess.DEVNULL), reader, owned)
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
        _stop([proc for proc, _, _ in running.values()], grace=30.0)
        raise
    failed = [f"{i}/{n}" for i, ok in enumerate(outcomes, 1) if not ok]
    if failed:
        progress(f"shards that failed their gate: {', '.join(failed)}; linking what arrived")
    result = run_link(recipe, paths, jobs=default_jobs(), progress=progress, cache=choice)
    return outcomes, result
