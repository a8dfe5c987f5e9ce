"""A shard that stops at its deadline and the continuation that resumes it, on the real example build.

Shard 1/3 of the example runs as a chain of three jobs; shards 2/3 and 3/3 are the shared built
cell's (``example_cell``), and the link takes the chain's last part with them:

* part 1 (``cuw shard --deadline +0``, a subprocess): the deadline passed during preparation, so it
  compiles nothing, still packs a valid archive, says what is left and how to go on, exits 0;
* part 2 (``--resume`` part 1): the seat's test hook (``CUW_SEAT_DEADLINE_AFTER=1``, one compile
  job) lets exactly one owned compile start before its deadline counts as passed: partial again;
* part 3 (``--resume`` part 2): compiles the rest, the TU part 2 finished is a cache hit, not partial;
* the link of parts 3 with shards 2 and 3: zero misses, a verified wheel.

No timing is left to chance: the deadline is either already past or a count of compiles.
The refusals (another shard's archive, a tampered one, a finished one, a partial one given to the
link) are each one line, exit 2, before anything builds.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, BuiltCell, run_cuw, run_settings
from cuw.config.cell import local_cell
from cuw.config.paths import Paths
from cuw.config.recipe import load_recipe
from cuw.jobs import archive
from cuw.jobs.link import run_link
from cuw.jobs.shard import run_shard
from cuw.partition.rules import ShardSpec
from cuw.seat import runtime, seat_log
from cuw.toolchain.toolkit import find_toolkit

pytestmark = pytest.mark.long  # three real parts and a link: the long tier (nox -s long), which CI runs

SPEC = ShardSpec(1, 3)


@dataclass(frozen=True)
class Chain:
    root: Path
    paths: Paths
    recipes: Path
    cell: str
    parts: dict[int, Path]
    """Part number -> a copy of that part's archive, its report beside it."""
    part1_stderr: str
    example: BuiltCell

    def archive_of(self, index: int) -> Path:
        return self.example.cell_artifacts / f"cuw-shard-{self.cell}-{index}of3.tar"

    def shard_args(self) -> list[str]:
        return ["--recipes", str(self.recipes), "--work", str(self.paths.work), "--artifacts", str(self.paths.artifacts)]


def _keep(target: Path, where: Path) -> Path:
    """A copy of a part's archive and report: the next part writes the same file names."""
    where.mkdir(parents=True)
    for made in (target, archive.report_path(target)):
        shutil.copy2(made, where / made.name)
    return where / target.name


def _seat_entries(paths: Paths, cell: str) -> list[dict]:
    return seat_log.read_log(paths.work / cell / f"shard-{SPEC.tag}" / "logs" / "seat.jsonl")


@pytest.fixture(scope="module")
def chain(example_cell: BuiltCell, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    assert example_cell.outcomes == (True,) * example_cell.count
    root = tmp_path_factory.mktemp("deadline")
    recipes = root / "recipes"
    shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    paths = Paths(work=root / "work", artifacts=root / "artifacts", dist=root / "dist")
    recipe = load_recipe("example", recipes)
    cell = local_cell(recipe, find_toolkit(homes=run_settings().homes)).id
    target = paths.artifacts / cell / f"cuw-shard-{cell}-1of3.tar"
    chain = Chain(root, paths, recipes, cell, {}, "", example_cell)
    for index in (2, 3):  # the built cell's shards, with the reports that record their digests
        _keep(chain.archive_of(index), root / f"shard{index}")
        for made in (chain.archive_of(index), archive.report_path(chain.archive_of(index))):
            (paths.artifacts / cell).mkdir(parents=True, exist_ok=True)
            shutil.copy2(made, paths.artifacts / cell / made.name)

    first = run_cuw("shard", "example", str(SPEC), "--deadline", "+0", *chain.shard_args())
    assert first.returncode == 0, first.stderr[-3000:]
    chain.parts[1] = _keep(target, root / "part1")

    os.environ[runtime.DEADLINE_AFTER_VAR] = "1"
    try:
        second = run_shard(
            recipe,
            SPEC,
            paths,
            jobs=1,
            progress=None,
            deadline=time.time() + 86400,
            resume=chain.parts[1],
            settings=run_settings(),
        )
    finally:
        del os.environ[runtime.DEADLINE_AFTER_VAR]
    assert second.verdict.ok, second.verdict.reasons
    chain.parts[2] = _keep(target, root / "part2")

    third = run_shard(recipe, SPEC, paths, progress=None, resume=chain.parts[2], settings=run_settings())
    assert third.verdict.ok, third.verdict.reasons
    chain.parts[3] = _keep(target, root / "part3")
    return Chain(root, paths, recipes, cell, chain.parts, first.stderr, example_cell)


def test_a_part_whose_deadline_passed_before_the_build_compiles_nothing_and_is_still_valid(chain):
    manifest = archive.check_archive(chain.parts[1])
    assert (manifest.part, manifest.partial, manifest.compiled) == (1, True, [])
    assert manifest.left and set(manifest.left) <= set(manifest.owned)
    line = [x for x in chain.part1_stderr.splitlines() if "stopped at its deadline" in x and "continue with" in x]
    assert len(line) == 1, chain.part1_stderr[-2000:]
    assert f"shard {SPEC} part 1: stopped at its deadline with {len(manifest.left)} of {len(manifest.owned)} TUs left" in line[0]
    assert f"continue with: cuw shard example {SPEC} --resume " in line[0] and line[0].endswith(f"-1of3{archive.SUFFIX}")
    report = json.loads(archive.report_path(chain.parts[1]).read_text())
    assert report["ok"] and report["facts"]["partial"] and report["part"] == 1 and report["left"] == manifest.left


def test_a_continuation_stopped_by_its_deadline_again_is_part_two_with_some_tus_done(chain):
    manifest = archive.check_archive(chain.parts[2])
    assert (manifest.part, manifest.partial) == (2, True)
    assert manifest.compiled and manifest.left  # one compile job: one TU, whatever the machine's speed
    assert sorted(manifest.left) == sorted(set(archive.check_archive(chain.parts[1]).left) - set(manifest.compiled))


def test_the_last_part_replays_the_earlier_parts_tus_as_hits_and_leaves_nothing(chain):
    manifest = archive.check_archive(chain.parts[3])
    assert (manifest.part, manifest.partial, manifest.left) == (3, False, [])
    earlier = archive.check_archive(chain.parts[2]).compiled
    outcomes = {e["key"]: e.get("outcome") for e in _seat_entries(chain.paths, chain.cell) if e.get("action") == "compiled"}
    assert earlier and {outcomes[k] for k in earlier} == {"hit"}
    assert sorted(k for k, o in outcomes.items() if o == "miss") == sorted(archive.check_archive(chain.parts[2]).left)
    assert sorted(manifest.compiled) == sorted(set(manifest.owned) & set(outcomes))


def test_the_link_of_the_chains_last_part_has_zero_misses(chain):
    result = run_link(load_recipe("example", chain.recipes), chain.paths, progress=None, settings=run_settings())
    assert result.ok, result.verdict.reasons
    assert result.verdict.facts["misses"] == 0 and result.verdict.facts["hits"] > 0


def _one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("cuw: error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    return errors[0]


def test_a_link_given_a_partial_part_refuses_it_naming_shard_part_and_whats_left(chain, tmp_path):
    folder = tmp_path / "artifacts" / chain.cell
    folder.mkdir(parents=True)
    for kept in (
        chain.parts[2],
        chain.root / "shard2" / chain.archive_of(2).name,
        chain.root / "shard3" / chain.archive_of(3).name,
    ):
        for made in (kept, archive.report_path(kept)):
            shutil.copy2(made, folder / made.name)
    proc = run_cuw(
        "link",
        "example",
        "--recipes",
        str(chain.recipes),
        "--work",
        str(tmp_path / "work"),
        "--artifacts",
        str(tmp_path / "artifacts"),
        "--dist",
        str(tmp_path / "dist"),
    )
    line = _one_error_line(proc)
    left = len(archive.check_archive(chain.parts[2]).left)
    assert f"shard 1/3 part 2 stopped at its deadline with {left} TUs left" in line
    assert "its continuation did not run or stopped at its deadline too" in line
    assert not (tmp_path / "work" / chain.cell / "link").exists()  # refused before the link's folder was made


def test_resuming_another_shards_archive_is_refused(chain):
    other = chain.root / "shard2" / chain.archive_of(2).name
    line = _one_error_line(run_cuw("shard", "example", str(SPEC), "--resume", str(other), *chain.shard_args()))
    assert "the archive is shard 2/3, this job is shard 1/3" in line


def test_resuming_a_tampered_archive_is_refused(chain, tmp_path):
    copy = _keep(chain.parts[2], tmp_path / "tampered")
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    line = _one_error_line(run_cuw("shard", "example", str(SPEC), "--resume", str(copy), *chain.shard_args()))
    assert "SHA-256" in line and "altered" in line


def test_resuming_a_finished_part_is_refused(chain):
    line = _one_error_line(run_cuw("shard", "example", str(SPEC), "--resume", str(chain.parts[3]), *chain.shard_args()))
    assert "part 3 finished with nothing left" in line and "hand that archive to the link" in line
