"""The resume command a partial part prints is the one that runs, and no interruption loses a part.

``cuw shard R i/N --deadline ...`` that stops at its deadline prints ``continue with: cuw shard R i/N
--resume <its own archive>``: the continuation resumes the archive it will itself replace. It keeps
that part aside (:func:`cuw.jobs.continuation.hold`) before it writes anything, so a run stopped at
any point, or one that fails its gate, leaves the part for the same command to resume again.

The unit tests hold the folder moves; the long one runs the printed command on the real example,
stops it with SIGTERM after it starts, mid-build and while packing, runs it again each time, and
links the chain's last part with the other shards: zero misses.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, BuiltCell, run_cuw, run_settings
from cuw.base.errors import InputError
from cuw.config.cell import local_cell
from cuw.config.paths import Paths
from cuw.config.recipe import load_recipe
from cuw.jobs import archive, continuation
from cuw.jobs.link import run_link
from cuw.toolchain.toolkit import find_toolkit


def _part(folder: Path, name: str, body: bytes, digest: bool = True) -> Path:
    """An archive-shaped file with its report (recording its digest, or saying it is running)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    target.write_bytes(body)
    record = {"shard": "1/3", "archive_sha256": archive.sha256_of(target)} if digest else {"shard": "1/3", "state": "running"}
    archive.report_path(target).write_text(json.dumps(record))
    return target


def test_resuming_its_own_output_keeps_the_part_aside_before_anything_is_written(tmp_path):
    target = _part(tmp_path / "artifacts", "cuw-shard-c-1of3.tar", b"part one")
    held = continuation.hold(target, target)
    assert held == continuation.kept_folder(target) / target.name and held.read_bytes() == b"part one"
    archive.check_digest(held)  # its report went with it
    # What the run then does to its own output: its report says running, its archive is replaced or removed.
    archive.report_path(target).write_text(json.dumps({"state": "running"}))
    target.unlink()
    assert continuation.resume_path(target) == target.resolve()  # the same command is not refused
    again = continuation.hold(target.resolve(), target)
    assert again == held and again.read_bytes() == b"part one"
    archive.check_digest(again)


def test_a_newer_finished_part_replaces_the_one_kept_and_another_path_is_read_where_it_is(tmp_path):
    folder = tmp_path / "artifacts"
    target = _part(folder, "cuw-shard-c-1of3.tar", b"part one")
    continuation.hold(target, target)
    _part(folder, target.name, b"part two")  # the continuation finished, partial again, before it released
    held = continuation.hold(target, target)
    assert held.read_bytes() == b"part two" and sorted(p.name for p in folder.iterdir()) == sorted(
        [target.name, archive.report_path(target).name, continuation.kept_folder(target).name]
    )
    elsewhere = _part(tmp_path / "resume", target.name, b"downloaded")
    assert continuation.hold(elsewhere, target) == elsewhere  # nothing this job writes can replace it


def test_an_interrupted_hold_leaves_the_part_where_it_was(tmp_path):
    target = _part(tmp_path / "artifacts", "cuw-shard-c-1of3.tar", b"part one")
    stale = continuation.kept_folder(target).with_name(continuation.kept_folder(target).name + ".999.new")
    stale.mkdir()
    (stale / target.name).write_bytes(b"half")
    held = continuation.hold(target, target)
    assert not stale.exists() and held.read_bytes() == b"part one"


def test_with_no_part_anywhere_the_same_command_is_refused_by_name(tmp_path):
    target = tmp_path / "artifacts" / "cuw-shard-c-1of3.tar"
    with pytest.raises(InputError, match=r"--resume .*cuw-shard-c-1of3.tar: no such archive"):
        continuation.resume_path(target)
    running = _part(tmp_path / "artifacts", target.name, b"cut", digest=False)
    assert continuation.hold(running, running) == running  # no part kept: the digest check refuses it by name
    with pytest.raises(InputError, match=r"records no archive_sha256"):
        archive.check_digest(running)


# -- the printed command on the real example --------------------------------------------------------

SPEC = "1/3"
PACK_THEN_TERM = """
import os, signal, sys
from cuw.jobs import archive
made = archive._entry_info
calls = []
def entry_info(arcname, entry):  # the second entry into the temp archive: SIGTERM while packing
    calls.append(arcname)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    return made(arcname, entry)
archive._entry_info = entry_info
from cuw.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _printed(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if "continue with: " in line]
    assert len(lines) == 1, stderr[-3000:]
    return shlex.split(lines[0].split("continue with: ", 1)[1])


def _term_when(argv: list[str], ready, what: str, timeout: float = 900) -> int:
    """``python -m cuw <argv>`` stopped with SIGTERM once ``ready()``; its exit status."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cuw", *argv],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"finished before {what}: {proc.stderr.read()[-3000:] if proc.stderr else ''}"
        assert time.monotonic() < end, f"never reached {what}"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    return proc.returncode


@pytest.mark.long
def test_the_printed_command_stopped_at_any_point_and_run_again_finishes_the_chain(example_cell: BuiltCell, tmp_path):
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    paths = Paths(work=tmp_path / "work", artifacts=tmp_path / "artifacts", dist=tmp_path / "dist")
    recipe = load_recipe("example", recipes)
    cell = local_cell(recipe, find_toolkit(homes=run_settings().homes)).id
    folder = paths.artifacts / cell
    folder.mkdir(parents=True)
    for index in (2, 3):  # the built cell's other shards, each with the report recording its digest
        made = example_cell.cell_artifacts / f"cuw-shard-{cell}-{index}of3.tar"
        for path in (made, archive.report_path(made)):
            shutil.copy2(path, folder / path.name)
    where = ["--recipes", str(recipes), "--work", str(paths.work), "--artifacts", str(paths.artifacts)]
    first = run_cuw("shard", "example", SPEC, "--deadline", "+0", *where)
    assert first.returncode == 0, first.stderr[-3000:]
    printed = _printed(first.stderr)
    target = folder / f"cuw-shard-{cell}-1of3.tar"
    assert printed[:5] == ["cuw", "shard", "example", SPEC, "--resume"] and Path(printed[5]) == target
    part1 = archive.check_archive(target)
    assert part1.partial and part1.compiled == []
    again = [*printed[1:], *where]
    report = archive.report_path(target)
    seat = paths.work / cell / "shard-1of3" / "logs" / "seat.jsonl"

    def running() -> bool:
        try:
            return json.loads(report.read_text()).get("state") == "running"
        except (OSError, ValueError):
            return False

    def compiling() -> bool:
        return seat.is_file() and '"compiled"' in seat.read_text(errors="replace")

    kept = continuation.kept_folder(target) / target.name
    assert _term_when(again, running, "its report saying running") != 0
    assert "archive_sha256" not in report.read_text()  # the case: the report beside the part was rewritten
    assert archive.check_archive(kept).part == 1 and not compiling()
    archive.check_digest(kept)
    assert _term_when(again, compiling, "a compile of its slice") != 0
    archive.check_digest(kept)
    packing = subprocess.run(
        [sys.executable, "-c", PACK_THEN_TERM, *again], cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert packing.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), packing.stderr[-3000:]
    assert archive.check_archive(target).part == 1  # stopped inside pack (the hook runs nowhere else): nothing renamed in
    archive.check_digest(kept)

    last = run_cuw(*again)
    assert last.returncode == 0, last.stderr[-3000:]
    finished = archive.check_archive(target)
    assert (finished.part, finished.partial, finished.left) == (2, False, [])
    assert not continuation.kept_folder(target).exists() and not list(folder.glob(".*"))
    linked = run_link(recipe, paths, progress=None, settings=run_settings())
    assert linked.ok, linked.verdict.reasons
    assert linked.verdict.facts["misses"] == 0 and linked.verdict.facts["hits"] > 0


def test_the_workflows_deadline_counts_from_the_jobs_start_not_the_compile_steps(tmp_path):
    """build.yml's compile rungs record the job's start in their first step; the compile step's
    deadline is that start plus deadline_s, so the setup before it comes off the build's time."""
    import yaml

    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "build.yml").read_text())["jobs"]
    rungs = [job for name, job in jobs.items() if name == "compile" or name.startswith("compile_")]
    assert rungs and all("JOB_STARTED=$(date +%s)" in job["steps"][0]["run"] for job in rungs)
    step = next(s for s in rungs[0]["steps"] if s.get("name") == "Compile shard")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nox").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NOX_ARGS"\n')
    (bin_dir / "nox").chmod(0o755)
    started = int(time.time()) - 600  # ten minutes of setup steps before the compile step
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NOX_ARGS": str(tmp_path / "args"), "RECIPE": "example", "SHARD": "2/4"}
    env |= {"CELL": "c", "FAIL_SHARD": "", "DEADLINE_S": "3885", "RESUME": "", "PART": "1", "JOB_STARTED": str(started)}
    run = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env)
    assert run.returncode == 0
    args = (tmp_path / "args").read_text().splitlines()
    assert args[5] == "--deadline" and int(args[6]) == started + 3885


def test_in_an_image_the_printed_resume_of_the_jobs_own_archive_is_not_mounted_read_only(tmp_path):
    """``--image``: a --resume archive in the artifacts folder the job writes (the printed command's) is
    not mounted read-only over it (the shard could not write its own archive, nor keep the part aside);
    one elsewhere (the workflow's resume/) is read-only."""
    import argparse

    from cuw.base.settings import Settings
    from cuw.cli.verbs import _image_mounts

    artifacts, recipes = tmp_path / "artifacts", tmp_path / "recipes"
    own = artifacts / "cell" / "cuw-shard-cell-1of2.tar"
    args = argparse.Namespace(verb="shard", work=tmp_path / "work", artifacts=artifacts, dist=tmp_path / "dist", resume=own)
    folders, read_only = _image_mounts(args, recipes, Settings.from_env({}))
    assert folders == [tmp_path / "work", artifacts] and read_only == [recipes]
    args.resume = tmp_path / "resume" / "cuw-shard-cell-1of2.tar"
    assert _image_mounts(args, recipes, Settings.from_env({}))[1] == [recipes, tmp_path / "resume"]
