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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from conftest import torch_cuda_available
from cuw.config.recipe import load_recipe
from cuw.jobs.local import run_build


@dataclass(frozen=True)
class Case:
    shards: int
    needs_torch: bool
    archs: tuple[str, ...] = ("9.0",)
    max_jobs: Optional[int] = None
    """Caps the recipe's parallel compiles (the two cores here are shared)."""
    refused_here: Optional[str] = None
    """The finish step's known refusal on this machine (text of auditwheel's reason): the
    shards and the link must still pass, and the wheel must be refused for exactly this."""


# recipe -> how the end-to-end build runs it.
E2E: dict[str, Case] = {
    "torch_scatter": Case(shards=3, needs_torch=True),
    "torchsort": Case(shards=2, needs_torch=True),
    # Built with Debian 12's gcc 12, lightgbm's library needs GLIBCXX_3.4.30, which
    # auditwheel places at manylinux_2_35: above the farm's manylinux_2_34 floor. A
    # manylinux_2_34 container (the cibuildwheel backend) builds it within the floor.
    "lightgbm": Case(shards=3, needs_torch=False, max_jobs=1, refused_here="too-recent versioned symbols"),
    # The whole cell the recipe ships: 144 CUDA + 167 host TUs, ~9,400 CPU-s cold (about 1.5 h
    # on two cores). Like lightgbm, its libraries need GLIBCXX_3.4.30 from Debian 12's gcc 12
    # (manylinux_2_35), above the farm's manylinux_2_34 floor.
    "llama_cpp_python": Case(shards=10, needs_torch=False, refused_here="too-recent versioned symbols"),
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
def test_real_package_sharded_build(case_name, recipes_dir, paths):
    case = E2E[case_name]
    if case.needs_torch and not torch_cuda_available():
        pytest.skip("needs the CUDA build of torch 2.14.1")
    _one_arch(recipes_dir, case_name, case.archs)
    if case.max_jobs:
        with open(recipes_dir / case_name / "recipe.yml", "a") as fh:
            fh.write(f"max_jobs: {case.max_jobs}\n")
    recipe = load_recipe(case_name, recipes_dir)

    started = time.monotonic()
    outcomes, link = run_build(recipe, paths, count=case.shards, recipes_dir=recipes_dir)
    wall = time.monotonic() - started

    reports = sorted(paths.artifacts.glob("*/cuw-shard-*.report.json"))
    shards = [json.loads(r.read_text()) for r in reports]
    link_report = json.loads(link.report.read_text())
    timings = {
        "recipe": case_name,
        "shards": case.shards,
        "wall_s": round(wall, 1),
        "shard_build_s": [s["build_s"] for s in shards],
        "shard_compiled": [s["facts"]["compiled"] for s in shards],
        "link_build_s": link_report["build_s"],
        "link": link.verdict.facts,
    }
    # Work conservation: TUs compiled by all shards / TUs the link replayed (1.0: each exactly once).
    link_logs = list(paths.work.glob("*/link/logs/seat.jsonl"))
    replayed = {e["key"] for log in link_logs for e in map(json.loads, log.read_text().splitlines()) if e["action"] == "compiled"}
    timings["work_conservation"] = round(sum(timings["shard_compiled"]) / max(len(replayed), 1), 3)
    print(json.dumps(timings))
    if os.environ.get("CUW_E2E_REPORT"):
        Path(os.environ["CUW_E2E_REPORT"]).write_text(json.dumps(timings, indent=2))

    assert outcomes == [True] * case.shards, [s["reasons"] for s in shards]
    assert link.verdict.ok, link.verdict.line
    facts = link.verdict.facts
    assert facts["misses"] == 0 and facts["uncacheable"] == 0 and facts["total"] > 0
    assert link.missing_shards == []
    assert link.verify is not None
    if case.refused_here:
        failed = [c for c in link.verify.checks if not c.ok]
        assert [c.name for c in failed] == ["finish"], link.verify.line
        assert case.refused_here in failed[0].details[0], failed[0].details
    else:
        assert link.verify.ok, link.verify.line
    # Work conservation: every TU the link replayed was compiled by exactly one shard.
    assert len(link_logs) == 1 and timings["work_conservation"] == 1.0
