"""Real packages from their PyPI sdists, built as N shards + link: the slow tier.

Marked ``e2e`` and left out of the default run (``nox -s tests``); run with
``nox -s e2e -- <recipe>`` (or ``pytest -m e2e --e2e-recipe <recipe>``).
Each case builds one arch (sm_90) to keep the run within hours on two cores,
checks every shard gate, a link with zero misses, the verify gate (which
imports the wheel in a clean child process with no GPU) and work
conservation, and writes its timings to ``$CUW_E2E_REPORT`` (JSON) when set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from conftest import need, run_settings
from cuw.config.recipe import load_recipe
from cuw.config.paths import Paths
from cuw.jobs.local import run_build


@dataclass(frozen=True)
class Case:
    shards: int
    needs_torch: bool
    archs: tuple[str, ...] = ("9.0",)
    max_jobs: Optional[int] = None
    """Caps the recipe's parallel compiles (the two cores here are shared)."""
    tests_passed_over: Optional[int] = None
    """The recipe's upstream tests (verify.tests) that must pass in its verify gate: more than this many."""
    broken: Optional[tuple[str, str, str, str]] = None
    """(file, anchor, replacement, a test file that must fail): after the build, a patch breaks one kernel
    and the cell is linked again from the same cache (only that TU recompiles); verify must fail naming tests."""


# recipe -> how the end-to-end build runs it. Each wheel gets its builder's floor: this machine's
# glibc on the host, the image's with --e2e-image (nox -s e2e -- lightgbm --e2e-image <ref>).
E2E: dict[str, Case] = {
    # Its test/ folder (from the pinned snapshot of tag 2.1.2 in ../shared/sources): 1,300+ tests on CPU.
    "torch_scatter": Case(
        shards=3,
        needs_torch=True,
        tests_passed_over=1300,
        # segment_csr's CPU kernel divides each segment's sum by one more than its length: mean is wrong.
        broken=(
            "csrc/cpu/segment_csr_cpu.cpp",
            "arg_out_data + n * K + k, args[k],\n                                           row_end - row_start);",
            "arg_out_data + n * K + k, args[k],\n                                           row_end - row_start + 1);",
            "test_segment.py",
        ),
    ),
    "torchsort": Case(shards=2, needs_torch=True),
    # gcc 12 (Debian 12) gives lightgbm's library GLIBCXX_3.4.30: manylinux_2_35 or higher; the
    # stand-in image's gcc 10 keeps it at its floor, manylinux_2_31.
    "lightgbm": Case(shards=3, needs_torch=False, max_jobs=1),
    # The whole cell the recipe ships: 144 CUDA + 167 host TUs, ~9,400 CPU-s cold (about 1.5 h
    # on two cores).
    "llama_cpp_python": Case(shards=10, needs_torch=False),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("e2e_recipe") or sorted(E2E)
    unknown = [name for name in chosen if name not in E2E]
    if unknown:
        raise pytest.UsageError(f"no end-to-end case for {', '.join(unknown)}; cases: {', '.join(sorted(E2E))}")
    metafunc.parametrize("case_name", chosen)


def _one_arch(recipes_dir: Path, name: str, archs: tuple[str, ...]) -> None:
    """The copied recipe builds only ``archs`` on CUDA 13.0 (with the README line an override needs)."""
    folder = recipes_dir / name
    with open(folder / "recipe.yml", "a") as fh:
        fh.write(f'archs: {{"13.0": {json.dumps(list(archs))}}}\n')
    with open(folder / "README.md", "a") as fh:
        fh.write(f"\n- `archs`: the end-to-end test builds {', '.join(archs)} only, to fit two cores.\n")


@pytest.mark.e2e
def test_real_package_sharded_build(case_name, recipes_dir, paths, request, monkeypatch):
    case = E2E[case_name]
    if case.needs_torch:
        need("torch")
    if load_recipe(case_name, recipes_dir).verify.tests.source.git:  # its tests' snapshot, offline
        monkeypatch.setenv("CUW_GIT_MIRROR", str(need("shared-sources")))
    _one_arch(recipes_dir, case_name, case.archs)
    if case.max_jobs:
        with open(recipes_dir / case_name / "recipe.yml", "a") as fh:
            fh.write(f"max_jobs: {case.max_jobs}\n")
    recipe = load_recipe(case_name, recipes_dir)
    image = request.config.getoption("e2e_image")

    started = time.monotonic()
    if image:  # every job in a container of the image, through the command line
        folders = ["--work", str(paths.work), "--artifacts", str(paths.artifacts), "--dist", str(paths.dist)]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "cuw",
                "build",
                case_name,
                "--shards",
                str(case.shards),
                "--image",
                image,
                "--recipes",
                str(recipes_dir),
                *folders,
            ],
            stdin=subprocess.DEVNULL,
        )
        link = None
    else:
        outcomes, link = run_build(recipe, paths, count=case.shards, recipes_dir=recipes_dir, settings=run_settings())
    wall = time.monotonic() - started

    reports = sorted(paths.artifacts.glob("*/cuw-shard-*.report.json"))
    shards = [json.loads(r.read_text()) for r in reports]
    if link is None:
        outcomes = [s["ok"] for s in shards]
        (report_path,) = [*paths.dist.glob("*.whl.link.json"), *paths.artifacts.glob("*/link.report.json")][:1]
    else:
        report_path = link.report
    link_report = json.loads(report_path.read_text())
    timings = {
        "recipe": case_name,
        "shards": case.shards,
        "wall_s": round(wall, 1),
        "shard_build_s": [s["build_s"] for s in shards],
        "shard_compiled": [s["facts"]["compiled"] for s in shards],
        "link_build_s": link_report["build_s"],
        "link": link_report["facts"],
        "builder": link_report.get("builder"),
        "wheel": Path(link_report["wheel"]).name if link_report.get("wheel") else None,
    }
    # Work conservation: TUs compiled by all shards / TUs the link replayed (1.0: each exactly once).
    link_logs = list(paths.work.glob("*/link/logs/seat.jsonl"))
    replayed = {e["key"] for log in link_logs for e in map(json.loads, log.read_text().splitlines()) if e["action"] == "compiled"}
    timings["work_conservation"] = round(sum(timings["shard_compiled"]) / max(len(replayed), 1), 3)
    print(json.dumps(timings))
    if os.environ.get("CUW_E2E_REPORT"):
        Path(os.environ["CUW_E2E_REPORT"]).write_text(json.dumps(timings, indent=2))

    assert outcomes == [True] * case.shards, [s["reasons"] for s in shards]
    assert link_report["ok"], link_report["reasons"]
    facts = link_report["facts"]
    assert facts["misses"] == 0 and facts["uncacheable"] == 0 and facts["total"] > 0
    assert not link_report.get("missing_shards")
    # Finished and verified: only a wheel that passed verify reaches dist/, at its builder's floor.
    (wheel,) = paths.dist.glob("*.whl")
    verified = json.loads(wheel.with_name(wheel.name + ".verify.json").read_text())
    assert verified["ok"], [c for c in verified["checks"] if not c["ok"]]
    if case.tests_passed_over is not None:  # the package's own tests ran against the wheel, and all passed
        tests = verified["tests"]
        assert tests["passed"] > case.tests_passed_over and tests["failed"] == tests["errors"] == 0, tests
    assert wheel.name[:-4].rsplit("-", 1)[1].split(".")[-1] == link_report["builder"]["floor"]
    # Work conservation: every TU the link replayed was compiled by exactly one shard.
    assert len(link_logs) == 1 and timings["work_conservation"] == 1.0
    if case.broken is not None:
        _broken_kernel_fails_verify(case, case_name, recipes_dir, paths, monkeypatch)


def _broken_kernel_fails_verify(case: Case, case_name: str, recipes_dir: Path, paths: Paths, monkeypatch) -> None:
    """The same cell with one kernel broken by a patch, linked as one shard from the first build's cache
    (every other TU a hit): the link gate passes and verify fails, naming the upstream tests that caught it."""
    from conftest import cache_of_archives, start_warm
    from cuw.jobs import archive
    from cuw.jobs.link import run_link
    from cuw.jobs.shard import run_shard
    from cuw.partition.rules import ShardSpec

    path, anchor, replacement, failing = case.broken
    (recipes_dir / case_name / "patch.py").write_text(
        "from cuw.jobs.patching import PatchContext\n\n\n"
        f"def patch(ctx: PatchContext) -> None:\n    ctx.replace({path!r}, {anchor!r}, {replacement!r})\n"
    )
    recipe = load_recipe(case_name, recipes_dir)
    seed = paths.work.parent / "seed"
    seed.mkdir()
    broken = Paths(paths.work.parent / "broken-work", paths.work.parent / "broken-artifacts", paths.work.parent / "broken-dist")
    # One shard job for the whole cell (ShardSpec(1, 1)) in this process, seeded, then the link.
    start_warm(cache_of_archives(archive.shard_archives(next(paths.artifacts.iterdir())), seed), monkeypatch)
    shard = run_shard(recipe, ShardSpec(1, 1), broken, progress=None, settings=run_settings())
    assert shard.verdict.ok, shard.verdict.line
    link = run_link(recipe, broken, progress=None, settings=run_settings())
    (report,) = broken.artifacts.glob("*/cuw-shard-*.report.json")
    counters = json.loads(report.read_text())["counters"]
    print(json.dumps({"broken": path, "shard_counters": counters, "verify": link.verify.line if link.verify else None}))
    assert link.verdict.ok, link.verdict.line
    assert counters["misses"] == 1 and counters["hits"] == counters["total"] - 1, (
        "only the patched TU misses the first build's cache"
    )
    assert link.verify is not None and not link.verify.ok, "a broken kernel passed verify"
    (tests,) = [c for c in link.verify.checks if not c.ok]
    assert tests.name == "tests" and any(failing in d for d in tests.details), tests.details
    assert not list(broken.dist.glob("*.whl")), "a wheel that failed verify reached dist/"
