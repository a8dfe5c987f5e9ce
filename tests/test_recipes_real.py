"""Every real recipe in recipes/: it loads, resolves for a cell, is in the matrix, and its
patch (if any) keeps the patch contract on the real upstream source.

The sdists come through the forge's source cache (cuw/jobs/sources.py), so a CI run downloads
each once. An sdist over MAX_DEFAULT_SDIST_BYTES is not fetched in the default run: its
recipe must be listed in LARGE_SDISTS, whose tests carry the ``e2e`` marker.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import shared_sources, run_settings
from cuw.jobs.backends import build_env
from cuw.config.cell import Cell
from cuw.base.errors import CuwError
from cuw.config.grid import cell_archs, cells, require_in_grid
from cuw.ci.matrix import MAX_BYTES, MAX_JOBS, Filters, dumps, plan
from cuw.jobs.patching import PatchContext, apply, patch_file
from cuw.config.policy import load_policy
from cuw.config.recipe import Recipe, known_recipes, load_recipe
from cuw.jobs.sources import fetch_sdist, unpack

REPO = Path(__file__).resolve().parent.parent
RECIPES_DIR = REPO / "recipes"
RECIPES = known_recipes(RECIPES_DIR)
MAX_DEFAULT_SDIST_BYTES = 10_000_000
# Recipes with a patch.py whose sdist is too big for the default run (key -> size note).
LARGE_SDISTS: dict[str, str] = {}


SHARED_SOURCES = shared_sources()
"""`git archive` snapshots of the git recipes (cumm, spconv), where this machine has them."""


def _patched_pypi_recipes() -> list:
    params = []
    for key in RECIPES:
        recipe = load_recipe(key, RECIPES_DIR)
        if patch_file(recipe) is None:
            continue
        if recipe.source.pypi is None and not recipe.source.git:
            continue
        marks = [pytest.mark.e2e] if key in LARGE_SDISTS else []
        if recipe.source.git:  # offline, from its snapshot: listed and skipped where there is none
            marks.append(pytest.mark.needs("shared-sources"))
        params.append(pytest.param(key, marks=marks, id=key))
    return params


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _cuw(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuw", *args], capture_output=True, text=True, cwd=REPO)


def test_the_real_recipes_are_there():
    expected = {"flash_attn", "llama_cpp_python", "spconv", "cumm", "causal_conv1d", "lightgbm"}
    assert expected <= set(RECIPES)


@pytest.mark.parametrize(
    "key", [pytest.param(k, marks=pytest.mark.needs("torch") if load_recipe(k, RECIPES_DIR).links_torch else ()) for k in RECIPES]
)
def test_recipe_loads_and_resolves_one_cell(key):
    recipe = load_recipe(key, RECIPES_DIR)
    assert recipe.key == key and recipe.name
    proc = _cuw("show", key, "--recipes", str(RECIPES_DIR))
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["cell"]["recipe"] == key and shown["cell_id"].startswith(f"{key}-")
    assert shown["resolved_archs"], f"{key}: no arch list for {shown['cell_id']}"
    # The recipe's env expands against a real build environment of that cell.
    policy = load_policy(RECIPES_DIR)
    # This machine's cell (a Python-independent recipe's cell serves every Python of its line).
    cell = Cell(**shown["cell"])
    require_in_grid(recipe, policy.grid, cell)
    env = build_env(
        recipe,
        Path("/cuda"),
        Path("/build"),
        2,
        None,
        base={},
        archs=cell_archs(recipe, policy.archs, cell),
        deps_dir=Path("/deps"),
    )
    assert all("${" not in env[k] for k in recipe.env)


def test_every_recipe_is_in_the_full_matrix_and_the_plan_is_valid():
    policy = load_policy(RECIPES_DIR)
    recipes = [load_recipe(key, RECIPES_DIR) for key in RECIPES]
    result = plan(recipes, policy.grid, Filters())
    assert not result["skipped"]
    in_plan = {job["recipe"] for c in result["chunks"] for job in c["compile"]["include"] + c["link"]["include"]}
    assert in_plan == set(RECIPES)
    assert sum(c["jobs"] for c in result["chunks"]) == result["total_jobs"]
    for chunk in result["chunks"]:
        assert chunk["jobs"] <= MAX_JOBS, chunk["id"]
        assert len(dumps(chunk).encode()) < MAX_BYTES, chunk["id"]
    ids = [c["id"] for c in result["chunks"]]
    assert len(ids) == len(set(ids))
    again = plan([load_recipe(key, RECIPES_DIR) for key in reversed(RECIPES)], policy.grid, Filters())
    assert dumps(again) == dumps(result)


def test_sharded_real_recipes_get_n_shards_and_a_link_per_cell():
    policy = load_policy(RECIPES_DIR)
    for key, n in (("flash_attn", 20), ("llama_cpp_python", 10), ("spconv", 10)):
        recipe = load_recipe(key, RECIPES_DIR)
        result = plan([recipe], policy.grid, Filters(platform=("linux",), cuda=("13.0",)))
        jobs = [j for c in result["chunks"] for j in c["compile"]["include"] + c["link"]["include"]]
        linux_cells = {c.id for c in cells(recipe, policy.grid) if c.lane == "linux" and c.cuda == "13.0"}
        assert {j["cell"] for j in jobs} == linux_cells
        assert len(jobs) == len(linux_cells) * (n + 1), key


def test_torch_free_recipes_refuse_a_pytorch_filter():
    for key in ("llama_cpp_python", "spconv", "lightgbm"):
        proc = _cuw("matrix", "--package", key, "--pytorch", "2.14", "--recipes", str(RECIPES_DIR))
        assert proc.returncode == 2 and "torch-free" in proc.stderr, (key, proc.stderr)


def _fetch(recipe: Recipe, tmp_path: Path) -> Path:
    if recipe.source.git:  # offline: the pinned snapshot, through the forge's git mirror
        from cuw.jobs.sources import materialize

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CUW_GIT_MIRROR", str(SHARED_SOURCES))
            return materialize(recipe, tmp_path / "src", settings=run_settings())
    assert recipe.source.pypi and recipe.source.sha256
    archive = fetch_sdist(recipe.source.pypi, recipe.source.sha256, settings=run_settings())
    size = archive.stat().st_size
    if recipe.key not in LARGE_SDISTS:
        assert size <= MAX_DEFAULT_SDIST_BYTES, (
            f"{recipe.key}: its sdist is {size} bytes; list it in LARGE_SDISTS so its test runs only with -m e2e"
        )
    return unpack(archive, tmp_path / "src")


def _context(recipe: Recipe, source: Path) -> PatchContext:
    policy = load_policy(RECIPES_DIR)
    cell = cells(recipe, policy.grid)[0]
    return PatchContext(source, cell, cell_archs(recipe, policy.archs, cell), recipe.key)


@pytest.mark.parametrize("key", _patched_pypi_recipes())
def test_patch_is_idempotent_and_fails_loudly_without_its_anchor(key, tmp_path, monkeypatch):
    recipe = load_recipe(key, RECIPES_DIR)
    source = _fetch(recipe, tmp_path)
    pristine_copy = tmp_path / "pristine"  # each file the patch anchors in, as the patch first found it
    anchors: list[tuple[str, str]] = []
    real_replace = PatchContext.replace

    def recording_replace(self, relpath, old, new, count=1):
        if self.source_dir == source:
            anchors.append((relpath, old))
            kept = pristine_copy / relpath
            if not kept.exists():
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / relpath, kept)
        return real_replace(self, relpath, old, new, count)

    monkeypatch.setattr(PatchContext, "replace", recording_replace)
    pristine = _tree_hash(source)
    ctx = _context(recipe, source)
    assert apply(recipe, ctx)
    once = _tree_hash(source)
    assert once != pristine, f"{key}: the patch changed nothing on the pinned source"
    assert apply(recipe, ctx)
    assert _tree_hash(source) == once, f"{key}: a second run of the patch changed the tree"

    # Upstream moved the text the patch anchors on: the patch must fail, naming the file.
    assert anchors, f"{key}: the patch anchors on nothing (use ctx.replace)"
    for relpath, old in anchors:
        target = pristine_copy / relpath
        target.write_text(target.read_text().replace(old, ""))
    with pytest.raises(CuwError, match=rf"{key} patch: .*anchor not found"):
        apply(recipe, replace(ctx, source_dir=pristine_copy))


_SETUP_FLAGS = """
import json, runpy, sys
import setuptools
seen = {}
setuptools.setup = lambda **kw: seen.update(kw)
sys.argv = ["setup.py", "build_ext"]
runpy.run_path("setup.py", run_name="__main__")
(ext,) = seen["ext_modules"]
print(json.dumps({"nvcc": ext.extra_compile_args["nvcc"], "include_dirs": [str(p) for p in ext.include_dirs]}))
"""


def _setup_py_nvcc_flags(source: Path, env: dict[str, str]) -> dict:
    """What causal-conv1d's own setup.py, run as a build runs it, gives its extension: the nvcc
    flags and include folders (``setup()`` itself is caught; everything before it runs)."""
    proc = subprocess.run([sys.executable, "-c", _SETUP_FLAGS], cwd=source, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gencodes(flags: list[str]) -> set[str]:
    return {f.split("=", 1)[1] for f in flags if f.startswith("-gencode=")} | {
        b for a, b in zip(flags, flags[1:]) if a == "-gencode"
    }


@pytest.mark.needs("torch")
def test_causal_conv1d_patch_compiles_for_the_cells_archs(tmp_path):
    """The patched setup.py, run in the build's environment for a cell with archs 8.0 and 9.0+PTX,
    gives nvcc exactly those targets; one of its kernel TUs, compiled with the flags it gives, holds
    SASS for sm_80 and sm_90 and PTX for compute_90 and nothing else. Upstream's own list differs."""
    from cuw.toolchain.toolkit import find_cuobjdump, find_toolkit

    recipe = load_recipe("causal_conv1d", RECIPES_DIR)
    source = _fetch(recipe, tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(source, pristine, symlinks=True)
    apply(recipe, _context(recipe, source))
    toolkit = find_toolkit(homes=run_settings().homes)
    env = build_env(recipe, toolkit.home, tmp_path / "build", 2, None, base=dict(os.environ), archs=["8.0", "9.0+PTX"])
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"

    upstream = _gencodes(_setup_py_nvcc_flags(pristine, env)["nvcc"])
    assert "arch=compute_75,code=sm_75" in upstream, "the control: unpatched, the cell's list is ignored"
    ext = _setup_py_nvcc_flags(source, env)
    wanted = {"arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"}
    assert _gencodes(ext["nvcc"]) == wanted

    import sysconfig

    obj = tmp_path / "update.o"
    includes = [f"-I{d}" for d in (*ext["include_dirs"], sysconfig.get_paths()["include"])]
    cmd = [
        str(toolkit.nvcc),
        "-c",
        "csrc/causal_conv1d_update.cu",
        "-o",
        str(obj),
        *includes,
        "-std=c++17",
        "-Xcompiler",
        "-fPIC",
        "-DTORCH_EXTENSION_NAME=causal_conv1d_cuda",
        *ext["nvcc"],
    ]
    proc = subprocess.run(cmd, cwd=source, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cuobjdump = str(find_cuobjdump(toolkit))
    elf = subprocess.run([cuobjdump, "--list-elf", str(obj)], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(obj)], capture_output=True, text=True, check=True).stdout
    assert (sorted(re.findall(r"\.(sm_\d+)\.cubin", elf)), sorted(re.findall(r"\.(sm_\d+)\.ptx", ptx))) == (
        ["sm_80", "sm_90"],
        ["sm_90"],
    ), elf + ptx


def test_recipe_env_expands_the_cells_arch_list_and_the_deps_folder():
    recipe = load_recipe("lightgbm", RECIPES_DIR)
    env = build_env(
        recipe, Path("/cuda"), Path("/build"), 1, None, base={}, archs=["9.0", "12.0+PTX"], deps_dir=Path("/job/deps")
    )
    assert "-DCMAKE_CUDA_ARCHITECTURES=90-real;120 " in env["CMAKE_ARGS"]
    assert "-DNCCL_LIBRARY=/job/deps/nvidia/nccl/lib/libnccl.so.2" in env["CMAKE_ARGS"]
    assert env["NCCL_ROOT"] == "/job/deps/nvidia/nccl"


def test_recipe_env_naming_an_unset_variable_is_a_clear_error():
    recipe = replace(load_recipe("lightgbm", RECIPES_DIR), env={"X": "${NO_SUCH_VAR}/lib"})
    with pytest.raises(CuwError, match=r"env.X refers to \$\{NO_SUCH_VAR\}, which the build environment does not set"):
        build_env(recipe, Path("/cuda"), Path("/build"), 1, None, base={})
    stray = replace(recipe, env={"X": "50$ off"})
    with pytest.raises(CuwError, match=r"write \$\$ for a literal \$"):
        build_env(stray, Path("/cuda"), Path("/build"), 1, None, base={})
    literal = replace(recipe, env={"X": "50$$"})
    assert build_env(literal, Path("/cuda"), Path("/build"), 1, None, base={})["X"] == "50$"


def test_extra_deps_cuda_is_picked_per_cuda_line(tmp_path):
    from cuw.jobs.workspace import Workspace, install_extra_deps

    ws = Workspace(tmp_path / "job", tmp_path / "job")
    ws.logs.mkdir(parents=True)
    recipe = replace(load_recipe("lightgbm", RECIPES_DIR), extra_deps_cuda={"12.8": ["cuw-no-such-package==0.0.0"]})
    with pytest.raises(CuwError, match=r"extra_deps \['cuw-no-such-package==0.0.0'\] could not be installed"):
        install_extra_deps(recipe, ws, "12.8")
    assert install_extra_deps(recipe, ws, "13.0") is None


def test_extra_deps_cuda_keys_must_be_cuda_lines(tmp_path):
    folder = tmp_path / "recipes" / "bad"
    folder.mkdir(parents=True)
    (folder / "recipe.yml").write_text(
        "name: bad\nlinks_torch: false\nsource: {path: .}\nbackend: setuptools\nextra_deps_cuda: {cu13: [x]}\n"
    )
    with pytest.raises(CuwError, match=r"extra_deps_cuda.cu13: not a CUDA line like '13.0'"):
        load_recipe("bad", tmp_path / "recipes")


def test_a_cell_of_the_real_grid_is_a_cell():
    # guards the helper above: the first cell of a torch recipe carries a torch version
    policy = load_policy(RECIPES_DIR)
    first = cells(load_recipe("flash_attn", RECIPES_DIR), policy.grid)[0]
    assert isinstance(first, Cell) and first.torch
