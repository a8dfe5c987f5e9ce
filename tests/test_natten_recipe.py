"""recipes/natten on natten's real sdist: it loads, its patch is idempotent and loud,
the source filter's globs and families match the generated kernels, the family
table per N, and a CMake configure of a shard whose Hopper family is empty."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from natten_source import CUDA13_ARCHS, fresh_natten_tree, natten_ctx, natten_recipe

from cuw.base.errors import CuwError
from cuw.partition.rules import ShardSpec, families_of, tu_key
from cuw.jobs.patching import apply

CMAKE = "csrc/CMakeLists.txt"
# FIELD-NOTES: natten's generated set at CUDA >= 12.8 with the default policy.
FAMILY_SIZES = {"blackwell": 50, "base": 72, "hopper": 22}


@pytest.fixture(scope="module")
def natten_pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """natten's sdist as upstream ships it (copy it before editing)."""
    return fresh_natten_tree(tmp_path_factory.mktemp("natten") / "pristine")


@pytest.fixture(scope="module")
def natten_patched(natten_pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """natten patched for the CUDA 13 cell's archs, its kernels generated (read it; copy it before editing)."""
    return _patched(natten_pristine, tmp_path_factory.mktemp("natten") / "patched")


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _copy(pristine: Path, dest: Path) -> Path:
    shutil.copytree(pristine, dest)
    return dest


def _patched(pristine: Path, dest: Path, archs: list[str] = CUDA13_ARCHS) -> Path:
    src = _copy(pristine, dest)
    assert apply(natten_recipe(), natten_ctx(src, archs))
    return src


def _filtered_keys(src: Path) -> list[str]:
    recipe = natten_recipe()
    files = {p for glob in recipe.sharding.source.globs for p in src.glob(glob) if p.is_file()}
    return sorted(tu_key(str(p), str(src)) for p in files)


def _patch_module():
    spec = importlib.util.spec_from_file_location("natten_patch", Path(natten_recipe().folder) / "patch.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recipe_loads():
    recipe = natten_recipe()
    assert recipe.links_torch and recipe.source.pypi == "natten==0.21.7" and len(recipe.source.sha256 or "") == 64
    sharding = recipe.sharding
    assert (sharding.count, sharding.filter, sharding.rule, sharding.per_family) == (20, "source", "sorted", False)
    assert sorted(sharding.source.families) == ["base", "blackwell", "hopper"]
    assert recipe.max_jobs == 1 and recipe.env["NATTEN_N_WORKERS"] == "${MAX_JOBS}"


def test_the_patch_runs_twice_and_the_second_run_changes_nothing(natten_pristine, tmp_path):
    src = _copy(natten_pristine, tmp_path / "src")
    pristine = _digest(src)
    apply(natten_recipe(), natten_ctx(src))
    once = _digest(src)
    assert once != pristine
    assert (src / "csrc/autogen/.cuw-autogen").read_text() == "default [75, 80, 86, 89, 90, 100, 120]\n"
    setup = (src / "setup.py").read_text()
    assert 'or "7.5;8.0;8.6;8.9;9.0;10.0;12.0"' in setup and '+ ";120-virtual"' in setup
    assert setup.count('stamp = path.join(autogen_dir, ".cuw-autogen")') == 1
    apply(natten_recipe(), natten_ctx(src))
    assert _digest(src) == once


def test_the_globs_and_families_match_the_generated_kernels(natten_pristine, natten_patched, tmp_path):
    assert _filtered_keys(natten_pristine) == []  # the sdist ships no kernel: the patch generates them
    recipe = natten_recipe()
    keys = _filtered_keys(natten_patched)
    family = families_of(keys, recipe.sharding.source.families)
    assert len(keys) == 144
    assert Counter(family.values()) == FAMILY_SIZES
    # sorted indices as the field notes give them: Blackwell 0-49, Hopper 120-141
    assert {family[k] for k in keys[:50]} == {"blackwell"}
    assert {family[k] for k in keys[120:142]} == {"hopper"}
    # the set follows the arch list: no sm_100 -> no Blackwell kernels, no sm_90 -> no Hopper kernels
    ampere_hopper = _filtered_keys(_patched(natten_pristine, tmp_path / "sm90", ["8.0", "9.0"]))
    assert len(ampere_hopper) == 94
    assert len(_filtered_keys(_patched(natten_pristine, tmp_path / "sm80", ["8.0", "8.6"]))) == 72


def test_a_missing_anchor_fails_loudly(natten_pristine, tmp_path):
    src = _copy(natten_pristine, tmp_path / "src")
    cmake = src / CMAKE
    anchor = "target_link_libraries(natten PUBLIC"
    cmake.write_text(cmake.read_text().replace(anchor, "target_link_libraries(natten  PUBLIC"))
    with pytest.raises(CuwError, match=r"natten patch: csrc/CMakeLists.txt: anchor not found .*target_link_libraries"):
        apply(natten_recipe(), natten_ctx(src))

    src = _copy(natten_pristine, tmp_path / "renamed")
    setup = src / "setup.py"
    setup.write_text(setup.read_text().replace("NUM_SPLITS = {", "SPLITS_BY_POLICY = {"))
    with pytest.raises(CuwError, match=r"natten's kernel generator failed: setup.py no longer defines NUM_SPLITS"):
        apply(natten_recipe(), natten_ctx(src))

    with pytest.raises(CuwError, match=r"the cell has no arch list"):
        apply(natten_recipe(), natten_ctx(_copy(natten_pristine, tmp_path / "noarch"), []))


def test_kernels_generated_for_other_archs_are_refused(natten_patched, tmp_path):
    src = _copy(natten_patched, tmp_path / "src")
    # the patch's own second run, for another cell
    with pytest.raises(CuwError, match=r"\.cuw-autogen says 'default \[75, .*this cell wants 'default \[90\]'"):
        apply(natten_recipe(), natten_ctx(src, ["9.0"]))
    # and setup.py's generator, as the build runs it
    module = _patch_module()
    proc = subprocess.run(
        [sys.executable, "-c", module._GENERATE, "default", "90"], cwd=src, capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    generated = "'default [75, 80, 86, 89, 90, 100, 120]'"
    assert f"kernels were generated for {generated}, this build wants 'default [90]'" in proc.stderr
    # for the cell's own archs, setup.py keeps what the patch generated (what a shard deleted stays deleted)
    kernel = next(src.glob("csrc/autogen/src/cuda/hopper_fna/*.cu"))
    kernel.unlink()
    same = ",".join(str(n) for n in module.natten_archs(CUDA13_ARCHS))
    proc = subprocess.run(
        [sys.executable, "-c", module._GENERATE, "default", same], cwd=src, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Kernel instantiations already generated for default [75, 80, 86, 89, 90, 100, 120]" in proc.stdout
    assert not kernel.exists()


def test_shards_without_a_family_per_n(natten_patched):
    """FIELD-NOTES: zero-Hopper shards N=20 -> 0, N=23 -> 1, N=40 -> 18; first Blackwell-empty at N=51."""
    from cuw.tools import planner  # the forge's own module: one that cannot be imported fails, never skips

    recipe = natten_recipe()
    src = natten_patched
    keys = _filtered_keys(src)
    inputs = planner.Inputs(keys, "test", None, src)
    family = families_of(keys, recipe.sharding.source.families)
    hopper_empty = {n: planner.evaluate(recipe, inputs, n, family)[0].family_empty["hopper"] for n in (20, 22, 23, 40)}
    assert hopper_empty == {20: 0, 22: 0, 23: 1, 40: 18}
    assert planner.family_ceiling(recipe, inputs, family, "hopper") == 22
    assert planner.family_ceiling(recipe, inputs, family, "blackwell") == 50
    row51 = planner.evaluate(recipe, inputs, 51, family)[0]
    assert row51.family_empty["blackwell"] == 1 and row51.family_empty["base"] == 0


def _configure(src: Path, build: Path) -> subprocess.CompletedProcess:
    """natten's own CMake configure + generate, with the arguments its setup.py passes (no build)."""
    build.mkdir()
    nvcc = shutil.which("nvcc")
    assert nvcc
    cmd = [
        "cmake",
        str(src / "csrc"),
        f"-DPYTHON_PATH={sys.executable}",
        "-DOUTPUT_FILE_NAME=natten/libnatten",
        "-DNATTEN_CUDA_ARCH_LIST=75-real;80-real;86-real;89-real;90a-real;100a-real;120-real;120-virtual",
        "-DNATTEN_IS_WINDOWS=0",
        "-DADD_LINEINFO=0",
        "-DIS_LIBTORCH_BUILT_WITH_CXX11_ABI=1",
        "-DNATTEN_WITH_HOPPER_FNA=1",
        "-DNATTEN_WITH_BLACKWELL_FNA=1",
    ]
    env = {**os.environ, "CUDACXX": str(Path(nvcc).resolve())}
    return subprocess.run(cmd, cwd=build, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.needs("cmake", "nvcc", "torch")  # natten's CMakeLists.txt imports torch for its include paths
def test_a_shard_with_no_hopper_file_configures_and_the_seed_guard_does_not(natten_patched, tmp_path):
    from cuw.partition.assignment import recipe_assignment
    from cuw.jobs.shard import apply_source_filter

    recipe = natten_recipe()
    spec = ShardSpec(30, 40)
    fixed = _copy(natten_patched, tmp_path / "fixed")
    kept = apply_source_filter(fixed, recipe.sharding.source.globs, spec, "linux", recipe_assignment(recipe, 40, fixed))
    every = _filtered_keys(natten_patched)
    assert kept == [k for i, k in enumerate(every) if i % 40 == 29]  # sorted index i -> shard i mod N + 1
    assert not list(fixed.glob("csrc/autogen/src/cuda/hopper_*/*.cu"))
    assert list(fixed.glob("csrc/autogen/src/cuda/blackwell_*/*.cu"))
    broken = _copy(fixed, tmp_path / "broken")
    cmake = broken / CMAKE
    cmake.write_text(cmake.read_text().replace("if(TARGET natten_hopper)", "if(NATTEN_WITH_HOPPER_FNA)"))

    ok = _configure(fixed, tmp_path / "build-fixed")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert (tmp_path / "build-fixed/CMakeFiles/natten_blackwell.dir").is_dir()
    assert not (tmp_path / "build-fixed/CMakeFiles/natten_hopper.dir").exists()
    # Blackwell kernels compile for sm_100a only, the rest for the whole list; C++20 for torch 2.14;
    # cuSPARSE/cuBLAS headers from torch's nvidia-* wheels, after the toolkit's own
    flags = (tmp_path / "build-fixed/CMakeFiles/natten_blackwell.dir/flags.make").read_text()
    assert re.findall(r"arch=compute_\w+", flags) == ["arch=compute_100a"]
    assert "std=c++20" in flags and "-Xcompiler=-idirafter," in flags
    main_flags = (tmp_path / "build-fixed/CMakeFiles/natten.dir/flags.make").read_text()
    codes = set(re.findall(r"code=\[(\w+)\]", main_flags))
    assert codes == {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120", "compute_120"}

    failed = _configure(broken, tmp_path / "build-broken")
    assert failed.returncode != 0
    assert 'Objects of target "natten_hopper" referenced but no such target exists' in failed.stderr
