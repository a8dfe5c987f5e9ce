"""A cell's disk need against its runner's free disk: learned by ``cuw costs`` from the jobs' reports,
held against ``runners.<lane>.free_disk_gb`` by one rule, marked on the matrix's jobs (``free_disk``),
said by ``cuw plan``, and acted on by the workflow's free-disk step on Linux runners, in a build image
through the host's folders mounted into the job's container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuw.base.errors import CuwError
from cuw.ci.matrix import Filters, chunk_jobs, plan
from cuw.config.policy import Runner, load_policy
from cuw.config.recipe import load_recipe
from cuw.partition.costs import disk_used_gb, load, record
from cuw.partition.disk_need import (
    FREE_DISK_FOLDERS,
    HOST_MOUNT,
    MARGIN,
    container_mounts,
    disk_line,
    disk_need,
    needs_free_disk,
    on_linux_runner,
)
from cuw.tools import planner
from conftest import run_settings

LINUX = Runner(memory_gb=16, cores=4, free_disk_gb=14)


@pytest.mark.parametrize(
    "need_gb, runner, expected",
    [
        (None, LINUX, False),  # never measured: nothing to act on
        (0.0, LINUX, False),
        (11.2, LINUX, False),  # 11.2 x 1.25 = 14.0: exactly what the runner has fits
        (11.3, LINUX, True),  # 14.125 with the margin: over
        (14.0, LINUX, True),  # the need alone equals the runner's free disk: the margin puts it over
        (40.0, LINUX, True),
        (40.0, None, False),  # a lane without a runner in the policy
        (40.0, Runner(memory_gb=16, cores=4), False),  # a runner whose free disk the policy does not give
        (40.0, Runner(memory_gb=16, cores=4, free_disk_gb=60), False),  # a larger runner fits it
    ],
)
def test_the_need_with_its_margin_against_the_runners_free_disk(need_gb, runner, expected):
    assert MARGIN == 0.25
    assert needs_free_disk(need_gb, runner) is expected


def test_a_build_job_needs_what_its_shard_or_its_link_needs_and_only_a_linux_runner_frees():
    assert (on_linux_runner("linux"), on_linux_runner("linux_aarch64"), on_linux_runner("windows")) == (True, True, False)
    need = disk_need(None, LINUX, linux=True)
    assert (need.shard_gb, need.link_gb, need.free_disk("shard"), need.free_disk("build")) == (None, None, False, False)
    from cuw.partition.disk_need import DiskNeed

    small_shard = DiskNeed(shard_gb=2.0, link_gb=20.0, runner=LINUX, linux=True)
    assert [small_shard.free_disk(k) for k in ("shard", "link", "build")] == [False, True, True]
    not_linux = DiskNeed(shard_gb=2.0, link_gb=20.0, runner=LINUX, linux=False)
    assert [not_linux.free_disk(k) for k in ("shard", "link", "build")] == [False, False, False]
    assert not_linux.exceeds("link")
    line = disk_line(not_linux, "windows", "")
    assert "the link jobs need more, but run on a windows runner that is not Linux, where the free-disk step cannot act" in line
    assert "the free-disk step runs on them (it deletes" in disk_line(small_shard, "linux", "")
    in_image = disk_line(small_shard, "linux", "img@sha256:x")
    assert "the free-disk step runs on them (in the build image img@sha256:x, it empties" in in_image
    assert f"mounted at {HOST_MOUNT})" in in_image
    assert "it fits, the free-disk step does not run" in disk_line(DiskNeed(1.0, 1.0, LINUX, True), "linux", "")
    assert "no free_disk_gb" in disk_line(DiskNeed(1.0, 99.0, Runner(16, 4), True), "windows", "")


def test_the_container_mounts_put_every_folder_under_the_host_mount():
    mounts = container_mounts().split()
    assert mounts[0::2] == ["-v"] * len(FREE_DISK_FOLDERS)
    assert mounts[1::2] == [f"{f}:{HOST_MOUNT}{f}" for f in FREE_DISK_FOLDERS]
    assert container_mounts("/tmp/x").split()[1] == f"/tmp/x{FREE_DISK_FOLDERS[0]}:{HOST_MOUNT}{FREE_DISK_FOLDERS[0]}"


def test_the_policy_gives_linux_runners_14_gb_free_and_refuses_a_free_disk_under_1_gb(recipes_dir):
    runners = load_policy(recipes_dir).runners
    assert (runners["linux"].free_disk_gb, runners["linux_aarch64"].free_disk_gb, runners["windows"].free_disk_gb) == (
        14,
        14,
        None,
    )
    defaults = recipes_dir / "defaults.yml"
    defaults.write_text(defaults.read_text().replace("free_disk_gb: 14}", "free_disk_gb: 0}", 1))
    with pytest.raises(CuwError, match=r"runners.linux.free_disk_gb = 0: whole GB >= 1"):
        load_policy(recipes_dir)


def _with_disk(recipes_dir: Path, shard_gb: float, link_gb: float) -> None:
    """The example's committed cost table with measured shard and link entries."""
    path = recipes_dir / "example" / "costs.json"
    data = json.loads(path.read_text())
    data["shard"] = {"fixed_s": 5.0, "from": "test", "disk_gb": shard_gb}
    data["link"] = {"fixed_s": 9.0, "per_replay_s": 0.03, "from": "test", "disk_gb": link_gb}
    path.write_text(json.dumps(data))


def _jobs(result: dict) -> list[dict]:
    return [j for c in result["chunks"] for j in chunk_jobs(c)]


def test_the_matrix_marks_free_disk_from_a_large_measured_need_and_not_from_a_small_one(recipes_dir):
    policy = load_policy(recipes_dir)
    recipe = lambda: load_recipe("example", recipes_dir)  # noqa: E731 -- read again after each table edit
    filters = Filters(platform=("linux", "windows"), cuda=("13.0",))
    _with_disk(recipes_dir, shard_gb=1.5, link_gb=2.0)
    small = _jobs(plan([recipe()], policy.grid, filters, {}, runners=policy.runners))
    assert small and not any(j["free_disk"] for j in small)
    _with_disk(recipes_dir, shard_gb=3.0, link_gb=18.0)  # the link needs more than 14 GB; the shards do not
    large = plan([recipe()], policy.grid, filters, {}, runners=policy.runners)
    marked = {(j["lane"], j["kind"]): j["free_disk"] for j in _jobs(large)}
    assert marked == {("linux", "shard"): False, ("linux", "link"): True, ("windows", "build"): False}
    _with_disk(recipes_dir, shard_gb=13.0, link_gb=18.0)
    assert all(
        j["free_disk"] for j in _jobs(plan([recipe()], policy.grid, filters, {}, runners=policy.runners)) if j["lane"] == "linux"
    )
    # On the bare runner a marked job needs no mounts; in the lane's build image each marked job
    # carries the container options that mount the host's folders for the step, and no other does.
    assert not any(j["free_disk_mounts"] for j in _jobs(large))
    _with_disk(recipes_dir, shard_gb=3.0, link_gb=18.0)
    images = {"linux": policy.images["linux"].ref}
    boxed = _jobs(plan([recipe()], policy.grid, Filters(platform=("linux",), cuda=("13.0",)), images, runners=policy.runners))
    assert {(j["kind"], j["free_disk"], j["free_disk_mounts"]) for j in boxed} == {
        ("shard", False, ""),
        ("link", True, container_mounts()),
    }
    # Without runners (a local workflow run's plan) nothing is read and nothing is marked.
    assert not any(j["free_disk"] for j in _jobs(plan([recipe()], policy.grid, filters, {})))


def test_cuw_matrix_and_cuw_plan_say_the_need_and_the_step(recipes_dir, capsys):
    from cuw.cli.main import main as cuw_main

    _with_disk(recipes_dir, shard_gb=12.0, link_gb=3.0)
    args = ["matrix", "--package", "example", "--recipes", str(recipes_dir), "--platform", "linux", "--cuda", "13.0"]
    assert cuw_main([*args, "--on-host"]) == 0
    got = capsys.readouterr()
    jobs = _jobs(json.loads(got.out))
    assert {j["kind"]: j["free_disk"] for j in jobs} == {"shard": True, "link": False}
    assert "free disk: 4 linux job(s) delete the runner's preinstalled folders first" in got.err
    assert not any(j["free_disk_mounts"] for j in jobs)
    assert cuw_main(args) == 0  # in the policy's build image: the same jobs marked, with the mounts
    got = capsys.readouterr()
    boxed = _jobs(json.loads(got.out))
    assert {(j["kind"], j["free_disk"], bool(j["free_disk_mounts"])) for j in boxed} == {
        ("shard", True, True),
        ("link", False, False),
    }
    assert "free disk: 4 linux job(s) delete the runner's preinstalled folders first" in got.err
    result = planner.plan(load_recipe("example", recipes_dir), [4], checked_n=4, settings=run_settings())
    assert [s.disk_gb for s in result.shards] == [12.0] * 4
    assert result.disk.startswith(
        "disk: a shard used 12.00 GB, the link used 3.00 GB; with 25% margin against lane linux's 14 GB free"
    )
    assert (
        "the shard jobs need more; the free-disk step runs on them (in the build image quay.io/pypa/manylinux_2_28" in result.disk
    )
    assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--shards", "4"]) == 0
    out = capsys.readouterr().out
    assert "14 GB free disk" in out and "disk GB" in out and result.disk in out
    for fmt in ("markdown", "html"):
        assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--shards", "4", "--format", fmt]) == 0
        assert "disk GB" in capsys.readouterr().out


def test_costs_learn_the_largest_disk_a_shard_used_and_the_links_and_old_tables_load(tmp_path):
    def shard(name: str, start_mb: float | None, least_mb: float | None) -> Path:
        folder = tmp_path / name / "logs"
        folder.mkdir(parents=True)
        line = {"action": "compiled", "key": f"{name}.cu", "seconds": 4.0, "at": 4.0, "rc": 0, "outcome": "miss"}
        folder.joinpath("seat.jsonl").write_text(json.dumps(line) + "\n")
        resources = {} if start_mb is None else {"resources": {"disk_free_start_mb": start_mb, "min_disk_free_mb": least_mb}}
        report = tmp_path / f"cuw-shard-{name}.report.json"
        body = {"gate": "shard", "ok": True, "build_s": 10.0, "build_log": str(folder / "build.log"), **resources}
        report.write_text(json.dumps(body))
        return report

    out = tmp_path / "costs.json"
    got = record([shard("a", 14000.0, 11500.0), shard("b", 14000.0, 7000.0), shard("c", None, None)], out)
    assert got.shard is not None and got.shard.disk_gb == 7.0  # the largest: 14 GB less 7 GB at the least
    assert json.loads(out.read_text())["shard"]["disk_gb"] == 7.0 and load(out).shard == got.shard
    # Reports without the record (an older forge's) keep the disk the table had.
    assert record([shard("d", None, None)], out).shard.disk_gb == 7.0
    link = tmp_path / "x.whl.link.json"
    phases = {"build_s": 30.0, "replay_s": 6.0, "replays": 120}
    link.write_text(
        json.dumps(
            {
                "gate": "link",
                "ok": True,
                "phases": phases,
                "resources": {"disk_free_start_mb": 20000.0, "min_disk_free_mb": 4500.5},
            }
        )
    )
    assert record([link], out).link.disk_gb == 15.499 and load(out).link.disk_gb == 15.499
    assert disk_used_gb({"disk_free_start_mb": 10.0, "min_disk_free_mb": 12.0}) == 0.0  # freed meanwhile
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"costs": {"a.cu": 1.0}, "shard": {"fixed_s": 2.0}, "link": {"fixed_s": 1.0, "per_replay_s": 0.1}}))
    assert (load(old).shard.disk_gb, load(old).link.disk_gb) == (None, None)
    old.write_text(json.dumps({"costs": {"a.cu": 1.0}, "shard": {"fixed_s": 2.0, "disk_gb": "lots"}}))
    with pytest.raises(CuwError, match=r"shard.disk_gb = 'lots' is not a number of GB from 0 to 1e9"):
        load(old)


def test_costs_learn_disk_gb_from_a_real_cells_shard_and_link_reports(example_cell, tmp_path):
    """The suite's cold example build: each report's resources record gives its job's disk use."""
    shards = sorted(example_cell.cell_artifacts.glob("cuw-shard-*.report.json"))
    links = sorted(example_cell.paths.dist.glob("*.link.json"))
    assert len(shards) == example_cell.count and len(links) == 1
    table = record([*shards, *links], tmp_path / "costs.json")
    used = [disk_used_gb(json.loads(p.read_text())["resources"]) for p in shards]
    assert all(u is not None and u >= 0 for u in used)
    assert table.shard is not None and table.shard.disk_gb == max(used)
    link = json.loads(links[0].read_text())["resources"]
    assert table.link is not None
    assert table.link.disk_gb == round(max(0.0, link["disk_free_start_mb"] - link["min_disk_free_mb"]) / 1000, 3)
    assert load(tmp_path / "costs.json").shard.disk_gb == table.shard.disk_gb


FREE_DISK_IF = "matrix.free_disk && runner.os == 'Linux'"
CONTAINER_OPTIONS = "${{ vars.CUW_CONTAINER_OPTIONS }} ${{ matrix.free_disk_mounts }}"


def test_every_shard_rung_and_the_link_free_the_disk_first_on_a_linux_runner():
    """The step sits on every job that runs a shard part or a link, right after the checkout (before the
    toolkit and the forge are installed), runs where the matrix says so on a Linux runner, its job's
    container gets the mounts the matrix gives, and the script's folders are the forge's list."""
    import re

    import yaml

    from conftest import REPO
    from cuw.ci.matrix import MATRICES

    jobs = yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())["jobs"]
    assert set(MATRICES) <= set(jobs)
    for name in MATRICES:
        steps = jobs[name]["steps"]
        freeing = [s for s in steps if s.get("run") == ".github/scripts/free-disk.sh"]
        assert len(freeing) == 1 and freeing[0]["if"] == FREE_DISK_IF, name
        checkout = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@"))
        # right after the checkout, which is first but for a rung's record of the job's start (JOB_STARTED)
        assert steps.index(freeing[0]) == checkout + 1 and checkout == (0 if name == "link" else 1), name
        assert jobs[name]["container"]["options"] == CONTAINER_OPTIONS, name
    others = [n for n, job in jobs.items() if n not in MATRICES and "free-disk.sh" in str(job)]
    assert others == [], "plan and publish build nothing: they never free the disk"
    script = (REPO / ".github/scripts/free-disk.sh").read_text()
    listed = re.search(r"^folders=\(\n(.*?)^\)", script, re.S | re.M)
    assert listed is not None and tuple(listed.group(1).split()) == FREE_DISK_FOLDERS
    assert f"host={HOST_MOUNT}\n" in script
    assert 'sudo rm -rf "${folders[@]}"' in script and script.count("df -h /") == 2


@pytest.mark.skipif(not Path("/.dockerenv").exists(), reason="shows the script's refusal in a container without the mounts")
def test_the_free_disk_script_frees_nothing_inside_a_container(tmp_path):
    """Here (a container without the job's mounts) the script deletes nothing: a sudo that would say
    it was called is never reached."""
    import os
    import subprocess

    from conftest import REPO

    (tmp_path / "sudo").write_text("#!/bin/sh\necho SUDO CALLED\nexit 9\n")
    (tmp_path / "sudo").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    got = subprocess.run([str(REPO / ".github/scripts/free-disk.sh")], capture_output=True, text=True, env=env)
    assert got.returncode == 0 and "in a container without the runner's folders mounted at /cuw-host" in got.stderr
    assert "SUDO CALLED" not in got.stdout
