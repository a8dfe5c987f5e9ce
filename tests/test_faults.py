"""Fault injection with real builds: what a shard or link leaves behind when the world breaks.

They start from the suite's one cold build of the example (3 shards, conftest.example_cell);
each test copies its archives and breaks one thing: a shard killed mid-compile, a corrupted
cache entry, the Redis remote stopped mid-build, no space left while packing,
two links writing one ``dist/`` at once.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from conftest import EXAMPLE_CELL_SHARDS, run_settings, trim_example, warm_cuw
from cuw.base.ports import free_port
from cuw.jobs import archive
from cuw.jobs import leftovers
from cuw.config.cell import local_cell
from cuw.base.errors import CuwError
from cuw.config.paths import Paths
from cuw.jobs.link import run_link
from cuw.partition.rules import ShardSpec
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.jobs.workspace import Workspace

WAIT_S = 240
N = EXAMPLE_CELL_SHARDS


class Built:
    def __init__(self, root: Path, recipes: Path) -> None:
        self.root = root
        self.recipes = recipes
        self.recipe = load_recipe("example", recipes)
        self.cell = local_cell(self.recipe, find_toolkit(homes=run_settings().homes))
        self.artifacts = root / "artifacts"

    def folder(self, artifacts: Path) -> Path:
        return artifacts / self.cell.id

    def archive(self, artifacts: Path, index: int) -> Path:
        return self.folder(artifacts) / archive.archive_name(self.cell, index, N)

    def report(self, artifacts: Path, index: int) -> Path:
        return self.folder(artifacts) / archive.archive_name(self.cell, index, N).replace(archive.SUFFIX, ".report.json")

    def archive_names(self, artifacts: Path) -> list[str]:
        return [self.archive(artifacts, i).name for i in range(1, N + 1)]

    def copy_artifacts(self, dest: Path) -> Path:
        shutil.copytree(self.artifacts, dest)
        return dest

    def seat_log(self, work: Path, index: int) -> Path:
        return work / self.cell.id / f"shard-{index}of{N}" / "logs" / "seat.jsonl"

    def cuw(self, *args: str, **kwargs) -> list[str]:
        return [sys.executable, "-m", "cuw", *args, "--recipes", str(self.recipes)]


@pytest.fixture
def built(example_cell) -> Built:
    """The suite's one cold build of the example (conftest.example_cell); tests copy what they break."""
    assert example_cell.outcomes == (True,) * N
    return Built(example_cell.root, example_cell.recipes)


@pytest.fixture(autouse=True)
def no_orphans(tmp_path):
    """Nothing a test started keeps running in its folders."""
    yield
    for cuda_home in tmp_path.glob("work*/*/*/cuda"):
        leftovers.stop_orphans(cuda_home, "test cleanup")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def partials(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if "partial" in p.name)


def visible_archives(folder: Path) -> list[str]:
    """What a link would restore: the same glob run_link uses."""
    return sorted(p.name for p in folder.glob(f"cuw-shard-*{archive.SUFFIX}"))


def wait_for_compile(proc: subprocess.Popen, seat_log: Path, timeout: float = WAIT_S) -> None:
    """Until the shard's seat has finished one compile of its slice (more are on their way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the shard ended before any compile"
        if seat_log.exists() and any('"action": "compiled"' in line for line in seat_log.read_text().splitlines()):
            return
        time.sleep(0.1)
    raise AssertionError(f"no compile in {seat_log} after {timeout} s")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# -- 1. kill -9 of a shard mid-compile, then a re-run -------------------------------------------


def test_killed_shard_keeps_the_previous_archive_and_a_rerun_recovers(built, tmp_path, example_cache):
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    work = tmp_path / "work"
    job = Workspace.for_job(work / built.cell.id, f"shard-1of{N}", False)
    good, report = built.archive(artifacts, 1), built.report(artifacts, 1)
    before = sha(good)
    assert json.loads(report.read_text())["ok"] is True

    proc = subprocess.Popen(
        built.cuw("shard", "example", f"1/{N}", "--quiet", "--work", str(work), "--artifacts", str(artifacts)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_compile(proc, built.seat_log(work, 1))
        # While the re-run is in progress: the good archive is there, intact; its report no longer says ok.
        assert sha(good) == before
        running = json.loads(report.read_text())
        assert running["ok"] is False and running["state"] == "running"
        assert running["previous"]["ok"] is True
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    # The build runs in a session of its own: pip, CMake, ninja and the compilers outlive the kill
    # and keep working in the job folder; the re-run must stop them before it wipes the folder.

    assert sha(good) == before, "the earlier good archive was never at risk"
    assert visible_archives(built.folder(artifacts)) == built.archive_names(artifacts)
    assert partials(artifacts) == []
    after_kill = json.loads(report.read_text())
    assert after_kill["ok"] is False and after_kill["state"] == "running", "a killed run never leaves an ok report"

    # The killed run was cold (it had to be mid-compile); the re-run starts warm (conftest.warm_cuw).
    rerun = subprocess.run(
        warm_cuw(
            example_cache,
            *built.cuw("shard", "example", f"1/{N}", "--quiet", "--work", str(work), "--artifacts", str(artifacts))[3:],
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert leftovers.job_processes(job.cuda_home) == [], "the killed run's orphaned build was stopped"
    final = json.loads(report.read_text())
    assert final["ok"] is True and final["state"] == "finished" and final["archive"] == str(good)
    assert archive.read_manifest(good).shard_index == 1
    assert partials(artifacts) == []


def test_orphans_of_a_killed_job_are_found_by_its_cuda_home_and_stopped(tmp_path):
    mine, other = tmp_path / "job" / "cuda", tmp_path / "other" / "cuda"
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    orphan = subprocess.Popen(sleep, env={**os.environ, "CUDA_HOME": str(mine)}, start_new_session=True)
    bystander = subprocess.Popen(sleep, env={**os.environ, "CUDA_HOME": str(other)}, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        while orphan.pid not in leftovers.job_processes(mine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers.stop_orphans(mine, "test") == [orphan.pid]
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None, "a process of another job (or a shell in the folder) is left alone"
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()


def _holding(lock: Path) -> subprocess.Popen:
    """Another process holding ``lock`` as a running job does (flock, released when it dies)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    code = (
        "import fcntl, sys, time; fh = open(sys.argv[1], 'a+b'); fcntl.flock(fh, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def _cuw(*args: str, seed: Path | None = None) -> subprocess.Popen:
    """``python -m cuw <args>``; with ``seed``, its shard jobs start warm (conftest.warm_cuw)."""
    return subprocess.Popen(
        warm_cuw(seed, *args) if seed else [sys.executable, "-m", "cuw", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def test_runs_of_a_running_shard_or_link_are_refused_and_touch_nothing(built, tmp_path):
    """Four of each started together while one holds the job: every one refused in one line, exit 2,
    and the holder's folders, archives and build left as they were."""
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    work = tmp_path / "work"
    cell_work = work / built.cell.id
    before = {p.name: sha(p) for p in (artifacts / built.cell.id).iterdir()}
    for lock, argv in (
        (cell_work / f".shard-{ShardSpec(1, N).tag}.lock", ["shard", "example", f"1/{N}"]),
        (cell_work / ".link.lock", ["link", "example", "--dist", str(tmp_path / "dist")]),
    ):
        holder = _holding(lock)
        try:
            runs = [_cuw(*argv, "--work", str(work), "--artifacts", str(artifacts)) for _ in range(4)]
            for run in runs:
                out, err = run.communicate(timeout=300)
                assert run.returncode == 2, out[-1000:] + err[-2000:]
                assert err.strip().splitlines()[-1].endswith("wait for it or stop it") and "already running" in err
                assert "Traceback" not in err
        finally:
            holder.kill()
            holder.wait()
    # sccache's jobs share the cell's build tree: while one runs, no other job of the cell starts.
    holder = _holding(cell_work / ".tree.lock")
    try:
        run = _cuw("shard", "example", f"2/{N}", "--cache-tool", "sccache", "--work", str(work), "--artifacts", str(artifacts))
        out, err = run.communicate(timeout=300)
        assert (
            run.returncode == 2 and "another job of" in err and "on its shared build tree (sccache) is already running" in err
        ), err
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in cell_work.iterdir()) == sorted(
        [".link.lock", f".shard-{ShardSpec(1, N).tag}.lock", f".shard-{ShardSpec(2, N).tag}.lock", ".tree.lock"]
    )
    assert {p.name: sha(p) for p in (artifacts / built.cell.id).iterdir()} == before
    assert not any((tmp_path / "dist").glob("*"))


def test_two_shards_started_together_one_builds_and_one_is_refused(built, tmp_path, example_cache):
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    folders = ["--work", str(tmp_path / "work"), "--artifacts", str(artifacts)]
    runs = [_cuw("shard", "example", f"2/{N}", *folders, "--jobs", "1", seed=example_cache) for _ in range(2)]
    results = [(run.communicate(timeout=900), run.returncode) for run in runs]
    codes = sorted(rc for _, rc in results)
    assert codes == [0, 2], [err[-1500:] for (_, err), _ in results]
    ((_, refused),) = [(out, err) for (out, err), rc in results if rc == 2]
    assert f"shard 2/{N} of {built.cell.id} is already running" in refused and "Traceback" not in refused
    assert archive.read_manifest(built.archive(artifacts, 2)).shard_index == 2  # the run that built handed over


def test_a_partial_archive_left_by_a_killed_pack_is_invisible_and_cleared(built, tmp_path):
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    dest = built.archive(artifacts, 1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = dest.with_name(f".{dest.name}.{dead.pid}.x1y2.partial")
    leftover.write_bytes(dest.read_bytes()[:100])
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        packing = dest.with_name(f".{dest.name}.{live.pid}.x3y4.partial")  # a live packer's file is left alone
        packing.write_bytes(b"")
        assert visible_archives(dest.parent) == built.archive_names(artifacts)
        assert archive.remove_partials(dest) == [leftover]
        assert not leftover.exists() and packing.exists()
    finally:
        live.kill()
        live.wait()


# -- 2. one corrupted cache entry inside a valid archive ---------------------------------------


def _flip_one_result(src: Path, dest: Path) -> str:
    """Rewrites the archive with one ccache result entry's bytes flipped; returns its member name."""
    flipped = None
    with tarfile.open(src, "r:") as tin, tarfile.open(dest, "w") as tout:
        for member in tin.getmembers():
            data = tin.extractfile(member).read() if member.isfile() else None
            # ccache's entry header: magic cc ac, format version, entry type (0: result, 1: manifest).
            if flipped is None and data and data[:2] == b"\xcc\xac" and data[3] == 0 and len(data) > 200:
                middle = len(data) // 2
                data = data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 16]) + data[middle + 16 :]
                flipped = member.name
            tout.addfile(member, io.BytesIO(data) if data is not None else None)
    assert flipped, f"no ccache result entry in {src}"
    return flipped


def _record_digest(target: Path) -> None:
    report_file = archive.report_path(target)
    body = json.loads(report_file.read_text())
    report_file.write_text(json.dumps({**body, "archive_sha256": sha(target)}))


def test_an_archive_altered_after_its_shard_is_refused_before_the_link_starts(built, tmp_path):
    """One cache entry replaced inside a shard's archive after the shard made it (ccache reads it as a
    good entry: it checks an entry is intact, not what built it), a truncated copy, and an archive
    whose report was left behind: each refused naming the archive and its shard, nothing prepared."""
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    target = built.archive(artifacts, 1)
    pristine = target.read_bytes()
    altered = tmp_path / f"altered{archive.SUFFIX}"
    _flip_one_result(target, altered)
    for bad, message in (
        (altered.read_bytes(), rf"is not the [0-9a-f]{{16}}… shard 1/{N} recorded when it made the archive"),
        (pristine[:-1024], r"altered, cut short or replaced since"),
    ):
        target.write_bytes(bad)
        paths = Paths(work=tmp_path / "work", artifacts=artifacts, dist=tmp_path / "dist")
        with pytest.raises(CuwError, match=message):
            run_link(built.recipe, paths, progress=None, settings=run_settings())
        assert not (tmp_path / "work" / built.cell.id / "link").exists()
    target.write_bytes(pristine)
    archive.report_path(target).unlink()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "link",
            "example",
            "--work",
            str(tmp_path / "work"),
            "--artifacts",
            str(artifacts),
            "--dist",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("hand over the shard's archive and report together")


def test_a_corrupted_cache_entry_is_a_miss_the_link_gate_names(built, tmp_path):
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    target = built.archive(artifacts, 1)
    corrupted = tmp_path / f"corrupted{archive.SUFFIX}"
    _flip_one_result(target, corrupted)
    os.replace(corrupted, target)
    _record_digest(target)  # corrupted before its shard packed it: the digest check has nothing to say
    owned_by_1 = set(archive.read_manifest(target).compiled)

    paths = Paths(work=tmp_path / "work", artifacts=artifacts, dist=tmp_path / "dist")
    result = run_link(built.recipe, paths, progress=None, settings=run_settings())

    facts = result.verdict.facts
    assert not result.verdict.ok
    assert facts["misses"] == 1, result.verdict.line
    (missed,) = [k for k in owned_by_1 if f"{k} <- shard 1/{N}" in result.verdict.line]
    assert "(its archive is missing)" not in result.verdict.line
    assert missed in owned_by_1
    assert result.wheel is None and not list((tmp_path / "dist").glob("*.whl"))


# -- 3. the Redis remote stopped in the middle of a shard --------------------------------------


@pytest.mark.needs("redis")
def test_redis_stopped_mid_shard_fails_clearly_and_hands_nothing_over(built, recipes_dir, tmp_path):
    trim_example(recipes_dir, 3)  # the cold slice compiles on after the remote is gone: three kernels', not nine's
    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)
        artifacts, work = tmp_path / "artifacts", tmp_path / "work"
        shard = subprocess.Popen(
            [sys.executable, "-m", "cuw", "shard", "example", f"1/{N}", "--quiet", "--recipes", str(recipes_dir)]
            + ["--work", str(work), "--artifacts", str(artifacts), "--cache-remote", f"redis://127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_compile(shard, built.seat_log(work, 1))
        finally:
            redis.kill()
            redis.wait(timeout=30)
        out, err = shard.communicate(timeout=WAIT_S)
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait()

    assert shard.returncode in (1, 2), err
    assert "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("cuw: error:"), err
    assert f"redis://127.0.0.1:{port}" in lines[0]
    folder = built.folder(artifacts)
    assert visible_archives(folder) == [], "no manifest claims a cache the remote does not hold"
    assert partials(artifacts) == []
    for report in folder.glob("*.report.json"):
        assert json.loads(report.read_text())["ok"] is False


# -- 4. no space left while packing -------------------------------------------------------------

# The build itself writes files far larger than the archive (objects of 1.4 MB, a 4 MB .so
# against a 130 kB archive), so the size limit is set in the shard's own process once its build
# has finished, just before the archive is written: the disk fills up exactly while packing.
FULL_DISK = """
import resource, shutil, signal, sys
import cuw.jobs.shard as p
from cuw.jobs import workspace
def prepare_seeded(*args, **kwargs):  # the job starts warm: the full disk is the subject, not the compile
    job_cache = workspace.prepare(*args, **kwargs)
    shutil.copytree(sys.argv[1], job_cache.cache_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("stats", "CACHEDIR.TAG"))
    return job_cache
p.prepare = prepare_seeded
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as ENOSPC would
gate = p.shard_gate
def full_after_gate(obs):
    verdict = gate(obs)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return verdict
p.shard_gate = full_after_gate
from cuw.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def test_no_space_left_while_packing_leaves_no_partial_archive(built, tmp_path, example_cache):
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    good = built.archive(artifacts, 1)
    before = sha(good)
    assert good.stat().st_size > 64 * 1024, "the archive must be larger than the limit"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            FULL_DISK,
            str(example_cache),
            "shard",
            "example",
            f"1/{N}",
            "--quiet",
            "--work",
            str(tmp_path / "work"),
            "--artifacts",
            str(artifacts),
            "--recipes",
            str(built.recipes),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"cuw: error: shard 1/{N}: cannot write the shard archive"), proc.stderr
    assert partials(artifacts) == [], "no partial archive left"
    assert sha(good) == before, "the previous archive is untouched"
    report = json.loads(built.report(artifacts, 1).read_text())
    assert report["ok"] is False


# -- 5. two links of one cell writing into one dist/ at once ------------------------------------


def _record_verifies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None
        (record,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        rows = [line.split(",") for line in zf.read(record).decode().splitlines() if line]
        assert {row[0] for row in rows} == {n for n in zf.namelist() if not n.endswith("/")}
        for name, digest, size in rows:
            if name == record:
                continue
            algo, _, expected = digest.partition("=")
            data = zf.read(name)
            actual = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
            assert (actual, int(size)) == (expected, len(data)), name


def test_two_links_into_one_dist_leave_no_torn_wheel(built, tmp_path):
    dist = tmp_path / "dist"
    links = [
        subprocess.Popen(
            built.cuw(
                "link", "example", "--work", str(tmp_path / f"work{i}"), "--artifacts", str(built.artifacts), "--dist", str(dist)
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 2)
    ]
    while any(p.poll() is None for p in links):
        # A reader (pip, an upload step) polling dist/ meanwhile only ever sees whole wheels.
        for wheel in dist.glob("*.whl") if dist.is_dir() else []:
            try:
                _record_verifies(wheel)
            except FileNotFoundError:
                pass
        time.sleep(0.02)
    errors = [p.communicate()[1] for p in links]
    assert [p.returncode for p in links] == [0, 0], errors

    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    _record_verifies(wheels[0])
    assert json.loads((dist / f"{wheels[0].name}.link.json").read_text())["ok"] is True
    assert json.loads((dist / f"{wheels[0].name}.verify.json").read_text())
    assert partials(dist) == []


def test_the_build_record_holds_only_the_shards_of_its_link(built, tmp_path):
    """A report of an earlier run with another N, left in the artifacts folder, is not this wheel's history."""
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    dist = tmp_path / "dist"
    shutil.copytree(built.root / "dist", dist)
    stale = built.folder(artifacts) / archive.archive_name(built.cell, 5, 7).replace(archive.SUFFIX, ".report.json")
    stale.write_text(json.dumps({"ok": True, "shard": "5/7", "state": "finished", "counters": {}}))
    proc = subprocess.run(
        built.cuw("record", "example", "--dist", str(dist), "--artifacts", str(artifacts)),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = dist.glob("*.build.json")
    shards = json.loads(record.read_text())["shards"]
    assert sorted(s["shard"] for s in shards) == [f"{i}/{N}" for i in range(1, N + 1)], shards


@pytest.mark.parametrize(
    "change, field",
    [
        (
            lambda r: (r / "example/package/csrc/kernels/k00_saxpy.cu").write_text(
                (r / "example/package/csrc/kernels/k00_saxpy.cu").read_text() + "\n// one line more\n"
            ),
            "source",
        ),
        (
            lambda r: (r / "example/recipe.yml").write_text(
                (r / "example/recipe.yml").read_text().replace("  filter: seat\n", "  filter: seat\n  rule: cost\n")
            ),
            "ownership",
        ),
        (lambda r: (r / "example/recipe.yml").write_text((r / "example/recipe.yml").read_text() + "max_jobs: 7\n"), "recipe"),
    ],
)
def test_an_archive_from_another_source_recipe_or_rule_is_refused_before_the_link_compiles(built, tmp_path, change, field):
    """The shards' fingerprint against the link's: what the link would otherwise spend a build on
    and then blame, through today's assignment, on the wrong shard."""
    recipes = tmp_path / "recipes"
    shutil.copytree(built.recipes, recipes)
    before = (recipes / "example/recipe.yml").read_text() + (recipes / "example/package/csrc/kernels/k00_saxpy.cu").read_text()
    change(recipes)
    assert (recipes / "example/recipe.yml").read_text() + (
        recipes / "example/package/csrc/kernels/k00_saxpy.cu"
    ).read_text() != before
    artifacts = built.copy_artifacts(tmp_path / "artifacts")
    paths = Paths(work=tmp_path / "work", artifacts=artifacts, dist=tmp_path / "dist")
    with pytest.raises(CuwError, match=rf"shard \d/{N} was built with another {field} \("):
        run_link(load_recipe("example", recipes), paths, progress=None, settings=run_settings())
    seat_log = tmp_path / "work" / built.cell.id / "link" / "logs" / "seat.jsonl"
    assert not seat_log.exists() or not seat_log.read_text().strip(), "refused before anything compiled"
