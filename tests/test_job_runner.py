"""The one job runner (cuw/jobs/runner.py) the shard and the link are step lists on: its steps run
in order, alone; a refusal before the build leaves a begun report saying the job did not start
(naming a full disk first), one after it leaves the report to the job; the shard's own refusal
while it prepares goes through the same path. No build: each refusal comes before one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cuw.base.errors import CuwError
from cuw.base.records import ShardReport, read_shard_report
from cuw.config.recipe import load_recipe
from cuw.jobs import runner
from cuw.partition.rules import ShardSpec
from conftest import run_settings


@dataclass(kw_only=True)
class _Job(runner.Job[ShardReport]):
    done: list[str] = field(default_factory=list)


def _job(recipes_dir: Path, paths) -> _Job:  # type: ignore[no-untyped-def]
    return _Job(
        recipe=load_recipe("example", recipes_dir),
        paths=paths,
        settings=run_settings(),
        progress=None,
        folder="shard-1of2",
        label="shard 1/2",
        named="shard 1/2",
        gate="shard",
    )


def _step(name: str, fails: bool = False):  # type: ignore[no-untyped-def]
    def step(job: _Job) -> None:
        job.done.append(name)
        if fails:
            raise CuwError(f"{name}: cannot copy the source: [Errno 28] No space left on device")

    return step


def _begin(job: _Job) -> None:
    record = ShardReport(gate="shard", ok=False, shard="1/2", nulls=frozenset({"archive"}))
    runner.begin_report(job, job.paths.artifacts / "r.report.json", record)


def test_the_steps_run_in_order_after_settling_and_a_refusal_before_the_build_says_it_did_not_start(recipes_dir, paths):
    job = _job(recipes_dir, paths)
    steps = runner.Steps(prepare=[runner.settle, _begin, _step("prepare", fails=True)], build=[_step("build")])
    with pytest.raises(CuwError, match="^prepare: cannot copy the source"):
        runner.run(job, steps)
    assert job.done == ["prepare"] and job.archs, "settled (the cell's archs), prepared, never built"
    got = read_shard_report(paths.artifacts / "r.report.json")
    assert (got.state, got.ok, got.shard, got.archive) == ("finished", False, "1/2", None)
    assert got.reasons[0].startswith("the disk filled") and got.reasons[-1] == (
        "the shard did not start its build: prepare: cannot copy the source: [Errno 28] No space left on device"
    )
    assert got.resources is not None and "disk_free_start_mb" in got.resources


def test_a_refusal_after_the_build_started_leaves_the_report_to_the_job(recipes_dir, paths):
    job = _job(recipes_dir, paths)
    steps = runner.Steps(prepare=[runner.settle, _begin], build=[_step("build", fails=True), _step("after")])
    with pytest.raises(CuwError, match="^build: "):
        runner.run(job, steps)
    assert job.done == ["build"]
    running = read_shard_report(paths.artifacts / "r.report.json")
    assert (running.state, running.ok) == ("running", False), "the job's own step writes its verdict, not the runner"


def test_a_job_without_a_begun_report_writes_none_when_it_is_refused(recipes_dir, paths):
    job = _job(recipes_dir, paths)
    with pytest.raises(CuwError):
        runner.run(job, runner.Steps(prepare=[runner.settle, _step("prepare", fails=True)], build=[]))
    assert not paths.artifacts.exists()


def test_a_shard_refused_while_it_prepares_reports_that_it_did_not_start(recipes_dir, paths, monkeypatch):
    """The shard's prepare stretch (source, deps, seat) refusing: its report, begun as running,
    ends as not started, the previous verdict's report replaced; no archive, no build."""
    from cuw.jobs import shard

    def full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise CuwError("cannot copy the source: [Errno 28] No space left on device")

    monkeypatch.setattr(shard, "prepare", full_disk)
    lines: list[str] = []
    with pytest.raises(CuwError, match="No space left"):
        shard.run_shard(
            load_recipe("example", recipes_dir), ShardSpec(1, 2), paths, progress=lines.append, settings=run_settings()
        )
    (path,) = paths.artifacts.glob("*/cuw-shard-*-1of2.report.json")
    got = read_shard_report(path)
    assert (got.state, got.ok, got.shard, got.archive, got.schema) == ("finished", False, "1/2", None, 1)
    assert got.reasons[-1] == "the shard did not start its build: cannot copy the source: [Errno 28] No space left on device"
    assert json.loads(path.read_text())["cell"]["recipe"] == "example"
    assert not list(paths.artifacts.glob("*/*.tar")) and not any("building" in line for line in lines)
