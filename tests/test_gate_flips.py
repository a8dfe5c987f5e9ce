"""Each gate failing for the right reason on real builds, one condition at a time."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLE_CUDA_TUS, EXAMPLE_HOST_TUS, expected_tu_values, trim_example, wheel_tu_values, run_settings
from cuw.jobs import archive
from cuw.toolchain.cache import Ccache
from cuw.base.errors import CuwError
from cuw.partition.rules import ShardSpec, owner
from cuw.config.paths import Paths
from cuw.jobs.local import run_build
from cuw.jobs.link import run_link
from cuw.jobs.shard import run_shard
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import find_toolkit
from cuw.gates.conditions import ShardObservation, shard_gate

N = 3
KEPT = 3  # kernel TUs of the trimmed example (conftest.trim_example) a cold gate-condition build compiles


@pytest.fixture
def shards(example_cell):
    """The example's three shard archives from the suite's one cold build (conftest.example_cell)."""
    assert example_cell.count == N
    return example_cell.recipes, example_cell.cell_artifacts


def fresh(shards, tmp_path) -> tuple[Path, Paths, Path]:
    """A private copy of the shard archives and folders for one test."""
    recipes, cell_dir = shards
    paths = Paths(work=tmp_path / "work", artifacts=tmp_path / "artifacts", dist=tmp_path / "dist")
    shutil.copytree(cell_dir, paths.artifacts / cell_dir.name)
    return recipes, paths, paths.artifacts / cell_dir.name


def archive_of(folder: Path, index: int) -> Path:
    (path,) = folder.glob(f"cuw-shard-*-{index}of{N}{archive.SUFFIX}")
    return path


def test_missing_shard_self_heals_and_is_reported_as_its_misses(shards, tmp_path):
    recipes, paths, folder = fresh(shards, tmp_path)
    archive_of(folder, 2).unlink()
    said: list[str] = []
    result = run_link(load_recipe("example", recipes), paths, progress=said.append, settings=run_settings())

    assert not result.verdict.ok and result.missing_shards == [2]
    assert "link: missing shard archives: 1 of 3 (2); their TUs recompile here and the gate will report them" in said
    facts = result.verdict.facts
    tus = EXAMPLE_CUDA_TUS + EXAMPLE_HOST_TUS["example"]
    assert facts["misses"] > 0 and facts["hits"] + facts["misses"] == tus
    assert "(its archive is missing)" in result.verdict.line
    for reason in result.verdict.reasons:
        if reason.startswith("cache misses"):
            assert reason.count("<- shard 2/3") == facts["misses"]
    # Self-healed: the rebuilt wheel is complete, but it is not shipped.
    assert result.wheel is None and not paths.dist.exists()
    rejected = json.loads(result.report.read_text())["wheel"]
    assert wheel_tu_values(Path(rejected), "cuw_example", tmp_path) == expected_tu_values()


def test_counters_left_unzeroed_fail_the_link_whose_progress_counts_every_tu(shards, tmp_path, monkeypatch):
    """One link from the shards' archives, its counters not zeroed after the merge: its progress counts
    every TU the shards compiled (the seat's log, not the counters), and the gate refuses the counters."""
    recipes, paths, _ = fresh(shards, tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    said: list[str] = []
    result = run_link(load_recipe("example", recipes), paths, progress=said.append, zero_stats=False, settings=run_settings())
    tus = EXAMPLE_CUDA_TUS + EXAMPLE_HOST_TUS["example"]
    last = [line for line in said if line.startswith("link: compiled ")][-1]
    assert last.startswith(f"link: compiled {tus}/{tus} TUs"), last
    assert not result.verdict.ok
    assert any("not zeroed after the merge" in r for r in result.verdict.reasons)
    # The verdict also reaches the JSON report and the GitHub step summary.
    assert json.loads(result.report.read_text())["ok"] is False
    assert "example link: ❌ FAIL" in summary.read_text() and "not zeroed" in summary.read_text()


def _bypass(recipes: Path) -> None:
    """The recipe points CMake at the real nvcc by absolute path, around the seat."""
    path = recipes / "example" / "recipe.yml"
    data = yaml.safe_load(path.read_text())
    data["env"] = {"SKBUILD_CMAKE_DEFINE": f"CMAKE_CUDA_COMPILER={find_toolkit(homes=run_settings().homes).nvcc}"}
    path.write_text(yaml.safe_dump(data))


def test_seat_bypassed_by_an_absolute_nvcc_path_fails_the_link(shards, tmp_path, monkeypatch):
    """The example cut to three kernel TUs (conftest.trim_example): every TU the link compiles around
    the seat is a real nvcc compile, and its two conditions need three (more than the host TUs), not nine."""
    recipes, paths, _ = fresh(shards, tmp_path)
    private = tmp_path / "recipes"
    shutil.copytree(recipes, private, symlinks=True)
    trim_example(private, KEPT)
    _bypass(private)
    # The shards were built from the untrimmed source before the change: the fingerprint refuses first...
    with pytest.raises(CuwError, match=r"shard 1/3 was built with another source \("):
        run_link(load_recipe("example", private), paths, progress=None, settings=run_settings())
    # ...and behind it the link gate holds on its own (a handoff whose fingerprints agree).
    monkeypatch.setattr("cuw.jobs.link.check_fingerprint", lambda *args: None)
    result = run_link(load_recipe("example", private), paths, progress=None, settings=run_settings())
    assert not result.verdict.ok
    line = result.verdict.line
    # Only the host TUs reached the cache (through the host seat); every CUDA TU went around it.
    assert f"{KEPT} of {KEPT} CUDA TUs bypassed the seat" in line
    assert f"the cache saw {EXAMPLE_HOST_TUS['example']} calls for {KEPT} CUDA TUs" in line


def test_seat_bypassed_fails_the_shard(recipes_dir, paths, monkeypatch):
    """nvcc named by absolute path: the seat saw no CUDA compile. The same build's observations judged
    with device_code: false (kernels compiled at run time; the recipe key changes nothing else in a
    shard whose slice holds a host TU): the host seat's compiles show the build compiled from source;
    without them, the shard fails."""
    observed: list[ShardObservation] = []
    monkeypatch.setattr("cuw.jobs.shard.shard_gate", lambda obs: observed.append(obs) or shard_gate(obs))
    trim_example(recipes_dir, KEPT)  # every TU of the build compiles around the seat: three, not nine
    _bypass(recipes_dir)
    result = run_shard(load_recipe("example", recipes_dir), ShardSpec(1, N), paths, progress=None, settings=run_settings())
    assert not result.verdict.ok and result.archive is None
    assert any("seat saw no CUDA compile" in r for r in result.verdict.reasons)
    (obs,) = observed
    assert obs.device_code and obs.seat_compiles_seen == 0 and obs.host_compiles_seen > 0
    host_only = shard_gate(replace(obs, device_code=False))
    assert not any("the seat saw no" in r for r in host_only.reasons), host_only.reasons
    assert host_only.facts["compiled"] > 0  # host TUs of its slice, through the host seat
    # The same build with its host compiles gone around the host seat too (the long tier's
    # test_without_device_code_a_compile_around_both_seats_fails_the_shard makes it happen for real).
    around_both = shard_gate(replace(obs, device_code=False, host_compiles_seen=0))
    assert not around_both.ok
    assert any("the seat saw no compile (the recipe has device_code: false" in r for r in around_both.reasons)


# A second cold shard around the seats (~30 s): nox -s long. The seat-bypassed condition still fires in
# the default tier (test_seat_bypassed_fails_the_shard).
@pytest.mark.long
def test_without_device_code_a_compile_around_both_seats_fails_the_shard(recipes_dir, paths, tmp_path):
    """device_code: false (kernels compiled at run time) with nvcc and the host compiler both named by
    absolute path: the seat saw nothing and the shard fails, naming the key. (A host compile through
    the host seat counting for such a recipe: test_seat_bypassed_fails_the_shard, on that build's
    observations.)"""
    path = recipes_dir / "example" / "recipe.yml"
    data = yaml.safe_load(path.read_text())
    data["device_code"] = False
    nvcc_only = f"CMAKE_CUDA_COMPILER={find_toolkit(homes=run_settings().homes).nvcc}"
    data["env"] = {"SKBUILD_CMAKE_DEFINE": f"{nvcc_only};CMAKE_CXX_COMPILER={shutil.which('g++')}"}
    path.write_text(yaml.safe_dump(data))
    result = run_shard(load_recipe("example", recipes_dir), ShardSpec(2, N), paths, progress=None, settings=run_settings())
    assert not result.verdict.ok and result.archive is None
    assert any("the seat saw no compile (the recipe has device_code: false" in r for r in result.verdict.reasons)


def test_a_real_compile_error_fails_the_shard_that_owns_the_tu(recipes_dir, paths):
    trim_example(recipes_dir, KEPT)  # a cold shard: its slice of three kernel TUs, not of nine
    key = "csrc/kernels/k01_scale.cu"
    path = recipes_dir / "example" / "package" / key
    path.write_text(path.read_text() + "\nstatic int broken = cuw_no_such_symbol;\n")
    spec = ShardSpec(owner(key, N), N)
    result = run_shard(load_recipe("example", recipes_dir), spec, paths, progress=None, settings=run_settings())
    assert not result.verdict.ok
    assert result.archive is None and not list(paths.artifacts.glob(f"*/*{archive.SUFFIX}"))
    assert any(r.startswith(f"a real compile error ({key})") and "cuw_no_such_symbol" in r for r in result.verdict.reasons)


def test_an_owned_compile_the_cache_cannot_store_fails_the_shard_and_the_link(recipes_dir, paths, shards, tmp_path, monkeypatch):
    """nvcc's --save-temps compiles fine, but ccache refuses to cache a call that carries it
    (unsupported_compiler_option): the shard fails at once instead of a link miss hours later,
    and a link whose replays carry it fails on its uncacheable count."""
    trim_example(recipes_dir, KEPT)  # nothing of it can be a hit: three kernel TUs compile for real, not nine
    with open(recipes_dir / "example" / "recipe.yml", "a") as fh:
        fh.write('nvcc_flags: ["--save-temps"]\n')
    recipe = load_recipe("example", recipes_dir)
    key = "csrc/kernels/k01_scale.cu"
    result = run_shard(recipe, ShardSpec(owner(key, N), N), paths, progress=None, settings=run_settings())
    assert not result.verdict.ok and result.archive is None
    (reason,) = [r for r in result.verdict.reasons if "the cache could not store them" in r]
    assert "(unsupported_compiler_option)" in reason and key in reason, result.verdict.reasons
    assert "a real compile error" not in result.verdict.line  # the compiles themselves succeeded

    _, link_paths, _ = fresh(shards, tmp_path / "link")
    with pytest.raises(CuwError, match=r"was built with another source \("):  # the shards': untrimmed, no --save-temps
        run_link(recipe, link_paths, progress=None, settings=run_settings())
    monkeypatch.setattr("cuw.jobs.link.check_fingerprint", lambda *args: None)  # the link gate's own count, behind it
    linked = run_link(recipe, link_paths, progress=None, settings=run_settings())
    assert not linked.verdict.ok and linked.verdict.facts["uncacheable"] == KEPT
    assert any(r.startswith(f"uncacheable compiles: {KEPT}") for r in linked.verdict.reasons), linked.verdict.reasons


def _rewrite_manifest(path: Path, **changes) -> None:
    manifest = archive.read_manifest(path)
    staging = path.parent / "rewrite"
    staging.mkdir()
    restored = archive.unpack(path, staging)
    fields = {**manifest.__dict__, **changes}
    archive.pack(Ccache(restored.staging, restored.staging.parent), archive.Manifest(**fields), path)
    shutil.rmtree(staging)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("altered", r"is not the [0-9a-f]{16}… shard 1/3 recorded when it made the archive"),
        ("truncate", "corrupted or truncated"),
        ("recipe", "is for recipe 'example_torch', not 'example'"),
        ("cell", "is for cell example-linux-py3.10-"),
        ("ccache", "made with ccache 4.7.5"),
        ("escape", "would land outside the cache directory"),
        ("duplicate", "are both shard 1/3"),
    ],
)
def test_bad_archives_stop_the_link_before_anything_is_merged(shards, tmp_path, damage, message):
    recipes, paths, folder = fresh(shards, tmp_path)
    target = archive_of(folder, 1)
    manifest = archive.read_manifest(target)
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    elif damage == "recipe":
        _rewrite_manifest(target, cell={**manifest.cell, "recipe": "example_torch"})
    elif damage == "cell":
        _rewrite_manifest(target, cell={**manifest.cell, "python": "3.10"})
    elif damage == "ccache":
        _rewrite_manifest(target, cache_version="4.7.5")
    elif damage == "escape":
        _craft_escape(target, manifest)
    elif damage == "duplicate":
        copy = folder / f"cuw-shard-copy-of-1{archive.SUFFIX}"
        shutil.copy(target, copy)
        shutil.copy(archive.report_path(target), archive.report_path(copy))
    if damage != "altered":  # each check behind the digest: as if the shard itself had made the archive so
        report_file = archive.report_path(target)
        report_file.write_text(
            json.dumps({**json.loads(report_file.read_text()), "archive_sha256": hashlib.sha256(target.read_bytes()).hexdigest()})
        )
    else:
        _rewrite_manifest(target, cache_version="4.7.5")
    with pytest.raises(CuwError, match=message):
        run_link(load_recipe("example", recipes), paths, progress=None, settings=run_settings())
    assert not list(paths.work.glob("*/link")), "refused before the link's folder was made: nothing half-merged"
    assert not (tmp_path / "evil").exists()


def _craft_escape(path: Path, manifest: archive.Manifest) -> None:
    with tarfile.open(path, "w") as tar:
        data = json.dumps(asdict(manifest)).encode()
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        evil = tarfile.TarInfo("cache/../../../../evil")
        evil.size = 4
        tar.addfile(evil, io.BytesIO(b"evil"))


SOURCE_FILTER_N = 2  # shards of the source-filter build: each keeps a strict part of the kernels, together all


def test_source_filter_partitions_before_the_build_and_the_seat_stays_pass_through(recipes_dir, paths, tmp_path, warm_cache):
    """``seat_rest: false``: the seat partitions nothing, every shard compiles the rest (the host TUs).
    With the default, the seat partitions the rest: tests/test_source_filter_rest.py."""
    n = SOURCE_FILTER_N
    path = recipes_dir / "example" / "recipe.yml"
    data = yaml.safe_load(path.read_text())
    data["sharding"] = {
        "count": n,
        "filter": "source",
        "source": {"globs": ["csrc/kernels/*.cu"], "seat_rest": False},
        "platforms": ["linux", "linux_aarch64"],
    }
    path.write_text(yaml.safe_dump(data))
    recipe = load_recipe("example", recipes_dir)
    outcomes, link = run_build(recipe, paths, count=n, recipes_dir=recipes_dir, settings=run_settings())
    assert outcomes == [True] * n and link.verdict.ok, link.verdict.line

    owned = []
    tarballs = sorted(paths.artifacts.glob(f"*/*{archive.SUFFIX}"))
    assert len(tarballs) == n
    for tarball in tarballs:
        manifest = archive.read_manifest(tarball)
        # Host TUs are cached but not partitioned under the source filter: every shard compiles them.
        cuda = sorted(k for k in manifest.compiled if k.endswith(".cu"))
        assert manifest.filter == "source" and sorted(manifest.owned) == cuda
        assert sorted(set(manifest.compiled) - set(cuda)) == ["csrc/dispatch.cpp", "csrc/registry.cpp"]
        owned += manifest.owned
        assert archive.report_path(tarball).is_file()
        assert json.loads(archive.report_path(tarball).read_text())["counters"]["misses"] == 0, "the shards start warm"
    assert sorted(owned) == sorted(f"csrc/kernels/{p.name}" for p in (recipes_dir / "example/package/csrc/kernels").glob("*.cu"))
    for shard_dir in paths.work.glob("*/shard-*"):
        entries = [json.loads(line) for line in (shard_dir / "logs" / "seat.jsonl").read_text().splitlines()]
        assert not [e for e in entries if e["action"] == "stubbed"], "the seat partitions nothing under the source filter"
        assert all(e["owner"] is None for e in entries if e["action"] == "compiled")
        # The forge deleted the out-of-slice sources before the build system ran.
        kept = sorted(p.name for p in (shard_dir / "src/csrc/kernels").glob("*.cu"))
        assert 0 < len(kept) < 9
    assert wheel_tu_values(link.wheel, "cuw_example", tmp_path) == expected_tu_values()


def test_pre_build_runs_inside_the_seat_and_cache_environment(recipes_dir, paths, warm_cache):
    """A pre_build compile goes through the seat (and so the cache), not around it;
    extra_deps are importable from the job's own folder. The job starts warm (conftest.warm_cache):
    the pre_build's TU is the one miss."""
    path = recipes_dir / "example" / "recipe.yml"
    data = yaml.safe_load(path.read_text())
    data["pre_build"] = (
        "mkdir -p gen && printf '__global__ void g(){}\\n' > gen/pre.cu && nvcc -c gen/pre.cu -o gen/pre.o"
        # extra_deps land in the job's own folder, on the build's PYTHONPATH
        " && python -c \"import six, os; assert six.__file__.startswith(os.environ['CUW_EXTRA_DEPS'])\""
    )
    data["extra_deps"] = ["six==1.16.0"]
    path.write_text(yaml.safe_dump(data))
    result = run_shard(load_recipe("example", recipes_dir), ShardSpec(1, 1), paths, progress=None, settings=run_settings())
    assert result.verdict.ok, result.verdict.line
    (seat_log,) = paths.work.glob("*/shard-1of1/logs/seat.jsonl")
    entries = [json.loads(line) for line in seat_log.read_text().splitlines()]
    assert any(e.get("key") == "gen/pre.cu" and e["action"] == "compiled" for e in entries)
    assert warm_cache.seeded and json.loads(result.report.read_text())["counters"]["misses"] == 1


def test_no_real_objects_fires_for_a_real_cmake_tree_that_compiled_nothing_of_its_own(tmp_path):
    """CMake's compiler identification leaves object files in every configured CUDA tree; a build
    that stopped there has compiled none of the project's TUs, and the gate must say so."""
    import subprocess

    from cuw.jobs.workspace import Workspace, real_objects

    ws = Workspace(tmp_path / "conftest-named-job", tmp_path / "conftest-named-job")  # a probe marker in the job path
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text("__global__ void k() {}\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX CUDA)\n"
        'add_library(p SHARED k.cu)\nmessage(FATAL_ERROR "configure stops here")\n'
    )
    nvcc = find_toolkit(homes=run_settings().homes).nvcc
    proc = subprocess.run(
        ["cmake", "-S", str(src), "-B", str(ws.tree / "build"), f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=90"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "configure stops here" in proc.stderr
    probes = [p for p in ws.tree.rglob("*.o")]
    assert probes, "CMake's compiler identification left no object file: the check below would prove nothing"
    assert real_objects(ws) == 0
    # ... while a real object of the project's own counts, wherever the job folder is.
    own = ws.tree / "build" / "CMakeFiles" / "p.dir" / "k.cu.o"
    own.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(probes[0], own)
    assert real_objects(ws) == 1
    own.unlink()
    verdict = shard_gate(
        ShardObservation(
            build_rc=1,
            log=proc.stderr,
            real_objects=real_objects(ws),
            seat_compiles_seen=0,
            compiled=[],
            failed=[],
            expected_owned=[],
            cache_files=0,
            build_tus=[],
            host_compiles_seen=0,
            device_code=True,
        )
    )
    assert not verdict.ok and "no real object files were built" in verdict.reasons
