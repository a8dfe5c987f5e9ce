"""What each pass-with-a-note of the gates (cuw/gates/conditions.py) lets through, shown on real builds.

Where a gate cannot run one of its checks, or counts more than it checks, it passes and says so in a
note (or in its docstrings). Each test builds the case for real (CMake with make or ninja, nvcc, g++,
ccache, the seat) and shows exactly what got through, beside the same case with the check able to
run, which fails:

* shard gate, no compile database: only CUDA sources count as the build's, so an owned host TU a
  failed build never compiled passes (with compile_commands.json the shard fails, naming it);
* shard gate, an owned TU outside the build's compile database: left out of the slice, with a note
  (the seat predicted it; the build never compiles it);
* link gate, no compile database: the seat-bypass check cannot run, so a CUDA TU compiled by an nvcc
  called around the seat passes (with compile_commands.json the link fails, naming it);
* link gate, a compile database that lists no CUDA TU: CUDA compiled by a custom command, around
  the seat, passes (CMake's compile_commands.json; ninja's own database lists it, and fails);

and one that is no longer a note but a failure:

* a remote cache: what a shard found there counts as its entries (a retried shard on a warm remote
  writes nothing), but a miss that never reached the remote (a read-only or failing remote) fails
  the shard, naming the remote, where it used to pass and leave the link to miss it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import yaml

from cuw.config.recipe import Recipe, load_recipe
from cuw.gates import compdb
from cuw.gates.conditions import LinkObservation, ShardObservation, link_gate, shard_gate
from cuw.jobs.backends import build_env
from cuw.jobs.shard import run_shard
from cuw.jobs.workspace import Workspace, prepare
from cuw.partition.assignment import recipe_assignment
from cuw.partition.rules import ShardSpec, owner
from cuw.seat import seat_log
from cuw.toolchain import cache
from cuw.toolchain.toolkit import find_toolkit
from conftest import run_settings

PYPROJECT = """[build-system]
requires = ["scikit-build-core>=0.10"]
build-backend = "scikit_build_core.build"

[project]
name = "cuw-tiny"
version = "0.1.0"

[tool.scikit-build]
ninja.make-fallback = false
wheel.packages = ["python/cuw_tiny"]
wheel.py-api = "py3"
"""


def _named(pattern: str, shard: int) -> str:
    """The first ``pattern.format(i)`` that shard ``shard`` of 2 owns (the hash rule, the tiny recipe's)."""
    return next(k for k in (pattern.format(i) for i in range(1000)) if owner(k, 2) == shard)


# Shard 1 of 2 owns two kernels and the host TU that calls all three; the third kernel is shard 2's,
# so shard 1's library link fails on an undefined reference, as a shard's should.
OWNED = [_named("csrc/own{}.cu", 1), _named("csrc/mine{}.cu", 1)]
FOREIGN = _named("csrc/other{}.cu", 2)
HOST = _named("csrc/host{}.cpp", 1)
LATE = _named("csrc/late/late{}.cpp", 1)  # a library that links against the first one
EXTRA = _named("csrc/extra/unbuilt{}.cu", 1)  # a source no build step compiles


def _tiny_recipe(recipes: Path, env: dict[str, str], late: bool = False, extra: bool = False) -> Recipe:
    """A recipe for a tiny scikit-build-core package, sharded by the seat into 2."""
    folder = recipes / "tiny"
    package = folder / "package"
    kernels = [*OWNED, FOREIGN]
    files = {}
    for i, key in enumerate(kernels):
        files[key] = f'__global__ void k{i}(int* x) {{ x[0] = {i}; }}\nextern "C" int tiny_k{i}(void) {{ return {i}; }}\n'
    decl = "".join(f'extern "C" int tiny_k{i}(void);\n' for i in range(len(kernels)))
    files[HOST] = (
        decl + 'extern "C" int tiny_sum(void) { return ' + " + ".join(f"tiny_k{i}()" for i in range(len(kernels))) + "; }\n"
    )
    files[LATE] = 'extern "C" int tiny_sum(void);\nextern "C" int tiny_late(void) { return tiny_sum(); }\n'
    files[EXTRA] = "__global__ void unbuilt(int* x) { x[0] = 7; }\n"
    cmake = (
        "cmake_minimum_required(VERSION 3.24)\nproject(cuw_tiny LANGUAGES CXX CUDA)\n"
        f"add_library(_tiny SHARED {' '.join(kernels)} {HOST})\n"
        'set_target_properties(_tiny PROPERTIES PREFIX "" CUDA_RUNTIME_LIBRARY Static)\n'
        "target_link_options(_tiny PRIVATE -Wl,--no-undefined)\n"
        "install(TARGETS _tiny LIBRARY DESTINATION cuw_tiny)\n"
    )
    if late:
        cmake += f"add_library(late SHARED {LATE})\ntarget_link_libraries(late PRIVATE _tiny)\n"
    for rel, text in files.items():
        if (rel == LATE and not late) or (rel == EXTRA and not extra):
            continue
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    (package / "CMakeLists.txt").write_text(cmake)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "python" / "cuw_tiny").mkdir(parents=True, exist_ok=True)
    (package / "python" / "cuw_tiny" / "__init__.py").write_text("")
    (folder / "README.md").write_text("A tiny package for the gate-note tests: `archs` is one arch to keep them fast.\n")
    (folder / "recipe.yml").write_text(
        yaml.safe_dump(
            {
                "name": "cuw-tiny",
                "links_torch": False,
                "wheel_python": "py3",
                "source": {"path": "package"},
                "backend": "scikit-build-core",
                "archs": {"13.0": ["9.0"]},
                "env": env,
                "sharding": {"count": 2, "filter": "seat", "platforms": ["linux"]},
            }
        )
    )
    recipe = load_recipe("tiny", recipes)
    rule = recipe_assignment(recipe, 2)
    assert [rule.owner(k) for k in (*OWNED, FOREIGN, HOST, LATE, EXTRA)] == [1, 1, 2, 1, 1, 1]
    return recipe


def _seat_compiled(paths, shard: str) -> list[str]:
    (log,) = paths.work.glob(f"*/shard-{shard}/logs/seat.jsonl")
    return sorted(e["key"] for e in seat_log.read_log(log) if e["action"] == "compiled")


# -- the shard gate --------------------------------------------------------------------------------


def test_without_a_compile_database_a_failed_shard_passes_with_an_owned_host_tu_it_never_compiled(recipes_dir, paths, tmp_path):
    """Makefiles, compile_commands.json switched off: the first library's link fails (as a shard's
    does), make -k never builds the library that links against it, so the host TU of that library,
    which this shard owns, is never compiled. Without a compile database the gate counts only CUDA
    sources as the build's and passes, with a note naming the host TU it could not check.
    With compile_commands.json the same shard fails, naming it."""
    makefiles = {"CMAKE_GENERATOR": "Unix Makefiles"}
    recipe = _tiny_recipe(recipes_dir, {**makefiles, "CMAKE_EXPORT_COMPILE_COMMANDS": "OFF"}, late=True)
    result = run_shard(recipe, ShardSpec(1, 2), paths, progress=None, settings=run_settings())
    assert result.verdict.ok, result.verdict.line
    assert result.verdict.reasons == [
        "compiled 3 TUs; link failed on undefined references, as a shard should",
        f"note: without a compile database only CUDA TUs are checked; 1 host TUs of its slice were never seen compiled "
        f"(the link would miss any the build needs): {LATE}",
    ]
    assert result.verdict.facts["build_rc"] != 0 and result.verdict.facts["expected_owned"] == 4
    assert _seat_compiled(paths, "1of2") == sorted([*OWNED, HOST]), "the late library's TU was never compiled"
    assert result.archive is not None, "handed over without it"

    seen = replace(paths, work=tmp_path / "work-db", artifacts=tmp_path / "artifacts-db")
    recipe = _tiny_recipe(recipes_dir, makefiles, late=True)  # the forge's default: CMAKE_EXPORT_COMPILE_COMMANDS=ON
    caught = run_shard(recipe, ShardSpec(1, 2), seen, progress=None, settings=run_settings())
    assert not caught.verdict.ok and caught.archive is None
    assert caught.verdict.reasons == [
        f"1 of its 4 TUs were never compiled before the build failed (the link would miss them): {LATE}"
    ]


def test_an_owned_tu_outside_the_builds_compile_database_is_left_out_of_the_slice_with_a_note(recipes_dir, paths):
    """The seat predicts every source under the root, the build compiles what its CMakeLists names:
    an owned .cu file no build step compiles is not compiled, and the shard passes with a note."""
    recipe = _tiny_recipe(recipes_dir, {}, extra=True)
    result = run_shard(recipe, ShardSpec(1, 2), paths, progress=None, settings=run_settings())
    assert result.verdict.ok, result.verdict.line
    assert result.verdict.facts["expected_owned"] == 4 and EXTRA not in _seat_compiled(paths, "1of2")
    assert result.verdict.reasons == [
        "compiled 3 TUs; link failed on undefined references, as a shard should",
        f"note: 1 TUs of its slice are not in the build's compile database: {EXTRA}",
    ]


# -- the link gate ---------------------------------------------------------------------------------

# nvcc by absolute path, around the seat: a compiler launcher that drops the compiler CMake names.
AROUND = """#!/bin/sh
shift
exec {nvcc} "$@"
"""


def _link_job(recipes: Path, tmp_path: Path, project: dict[str, str]) -> tuple[Workspace, cache.Cache, dict[str, str]]:
    """A link job's folder (seat without partition, its cache, the shadow CUDA_HOME) for a small
    CMake project, and the build environment the forge gives a link."""
    folder = recipes / "project"
    for rel, text in project.items():
        (folder / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "src" / rel).write_text(text)
    (folder / "recipe.yml").write_text(
        yaml.safe_dump({"name": "project", "links_torch": False, "source": {"path": "src"}, "backend": "scikit-build-core"})
    )
    recipe = load_recipe("project", recipes)
    ws = Workspace(tmp_path / "link", tmp_path / "link")
    job_cache = prepare(ws, recipe, find_toolkit(homes=run_settings().homes), None, "ccache", settings=run_settings())
    env = build_env(recipe, ws.cuda_home, ws.build, 2, None, base=dict(os.environ), archs=["9.0"])
    return ws, job_cache, env


def _build_twice(ws: Workspace, job_cache: cache.Cache, env: dict[str, str], *configure: str) -> cache.Stats:
    """Configure and build (the misses stand in for the shards' caches), zero the counters, build
    everything again: what the link's cache saw."""
    subprocess.run(["cmake", "-S", str(ws.src), "-B", str(ws.build), *configure], env=env, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(ws.build)], env=env, check=True, capture_output=True)
    job_cache.zero()
    subprocess.run(["cmake", "--build", str(ws.build), "--clean-first"], env=env, check=True, capture_output=True)
    return job_cache.stats()


def _observation(ws: Workspace, stats: cache.Stats, wheel: str) -> LinkObservation:
    in_build, compile_db = compdb.cuda_compiles_from(ws.tree, ws.src)
    keys = sorted({e["key"] for e in seat_log.read_log(ws.seat_log) if e["action"] == "compiled"})
    return LinkObservation(
        build_rc=0,
        wheel=wheel,
        hits=stats.hits,
        misses=stats.misses,
        uncacheable=stats.uncacheable,
        total=stats.total,
        stats_zeroed_at=stats.zeroed_at,
        merged_at=0,
        cuda_tus_in_build=in_build,
        compile_db=compile_db,
        seat_keys=keys,
        misses_by_key=[],
        uncacheable_by_key=[],
        shard_count=1,
        missing_shards=[],
    )


def test_without_a_compile_database_the_link_gate_cannot_see_a_tu_compiled_around_the_seat_and_says_so(recipes_dir, tmp_path):
    """Makefiles without compile_commands.json: one CUDA target's compiles go through a launcher that
    runs the real nvcc by path. The seat and the cache never see that TU, and the link gate passes
    with its note; the same tree with compile_commands.json written fails, naming the TU."""
    toolkit = find_toolkit(homes=run_settings().homes)
    launcher = tmp_path / "around-the-seat"
    launcher.write_text(AROUND.format(nvcc=toolkit.nvcc))
    launcher.chmod(0o755)
    cmake = (
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CUDA)\n"
        "add_library(seated SHARED csrc/seated.cu)\nadd_library(around SHARED csrc/around.cu)\n"
        f"set_target_properties(around PROPERTIES CUDA_COMPILER_LAUNCHER {launcher})\n"
    )
    kernel = "__global__ void k(int* x) {{ x[0] = {}; }}\n"
    ws, job_cache, env = _link_job(
        recipes_dir, tmp_path, {"CMakeLists.txt": cmake, "csrc/seated.cu": kernel.format(1), "csrc/around.cu": kernel.format(2)}
    )
    stats = _build_twice(ws, job_cache, env, "-G", "Unix Makefiles", "-DCMAKE_EXPORT_COMPILE_COMMANDS=OFF")
    assert (stats.hits, stats.misses, stats.total) == (1, 0, 1), "the cache saw the seated TU only"
    around = ws.build / "CMakeFiles" / "around.dir" / "csrc" / "around.cu.o"
    assert b"nv_fatbin" in around.read_bytes(), "the TU around the seat was compiled, device code and all"
    obs = _observation(ws, stats, str(ws.build / "libaround.so"))
    assert (obs.cuda_tus_in_build, obs.compile_db, obs.seat_keys) == ([], None, ["csrc/seated.cu"])

    verdict = link_gate(obs)
    assert verdict.ok, verdict.line
    assert verdict.reasons[-1] == (
        "note: the build left no compile database (neither ninja's nor CMake's "
        "compile_commands.json), so the seat-bypass check could not run"
    )

    subprocess.run(
        ["cmake", "-S", str(ws.src), "-B", str(ws.build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
        env=env,
        check=True,
        capture_output=True,
    )
    seen = _observation(ws, stats, obs.wheel or "")
    assert (seen.cuda_tus_in_build, seen.compile_db) == (["csrc/around.cu", "csrc/seated.cu"], "compile_commands.json")
    caught = link_gate(seen)
    assert not caught.ok
    assert "1 of 2 CUDA TUs bypassed the seat (nvcc called by path?): csrc/around.cu" in caught.reasons


def test_a_compile_database_without_cuda_tus_lets_cuda_compiled_by_a_custom_command_through_and_says_so(recipes_dir, tmp_path):
    """Makefiles: CMake's compile_commands.json lists the C++ TU only, while the kernel is compiled by a
    custom command running the real nvcc by path and linked in. The seat never sees it; the gate
    passes with its note. ninja's own database lists a custom command's inputs: there it fails."""
    toolkit = find_toolkit(homes=run_settings().homes)
    cmake = (
        "cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES CXX)\n"
        "add_custom_command(OUTPUT k.o DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/csrc/k.cu\n"
        f"  COMMAND {toolkit.nvcc} -arch=sm_90 -Xcompiler -fPIC -c ${{CMAKE_CURRENT_SOURCE_DIR}}/csrc/k.cu -o k.o)\n"
        "add_library(p SHARED csrc/host.cpp ${CMAKE_CURRENT_BINARY_DIR}/k.o)\n"
    )
    ws, job_cache, env = _link_job(
        recipes_dir,
        tmp_path,
        {
            "CMakeLists.txt": cmake,
            "csrc/host.cpp": "int host() { return 1; }\n",
            "csrc/k.cu": "__global__ void k(int* x) { x[0] = 3; }\n",
        },
    )
    stats = _build_twice(ws, job_cache, env, "-G", "Unix Makefiles")
    assert (stats.hits, stats.misses, stats.total) == (1, 0, 1), "the cache saw the host TU only"
    lib = ws.build / "libp.so"
    assert b"nv_fatbin" in lib.read_bytes(), "the library holds device code the seat never compiled"
    obs = _observation(ws, stats, str(lib))
    assert (obs.cuda_tus_in_build, obs.compile_db, obs.seat_keys) == ([], "compile_commands.json", ["csrc/host.cpp"])
    assert not [e for e in seat_log.read_log(ws.seat_log) if e.get("key", "").endswith(".cu")]

    verdict = link_gate(obs)
    assert verdict.ok, verdict.line
    assert verdict.reasons[-1] == (
        "note: the build's compile database (compile_commands.json) lists no CUDA TU, so "
        "the seat-bypass check had nothing to compare"
    )

    subprocess.run(
        ["cmake", "-S", str(ws.src), "-B", str(ws.tree / "build-ninja"), "-G", "Ninja"], env=env, check=True, capture_output=True
    )
    seen = _observation(ws, stats, str(lib))
    assert (seen.cuda_tus_in_build, seen.compile_db) == (["csrc/k.cu"], "ninja")
    assert "1 of 1 CUDA TUs bypassed the seat (nvcc called by path?): csrc/k.cu" in link_gate(seen).reasons


# -- a remote cache --------------------------------------------------------------------------------


def test_with_a_remote_a_shard_whose_misses_never_reached_it_fails(tmp_path):
    """A shard on a read-only remote: one TU is found there, the other is a miss the remote never
    gets. The found entries count as the shard's (a retried shard on a warm remote writes nothing and
    is still a good handoff), but the miss that never reached the remote fails the gate: a link job on
    the same remote misses that TU. On a writable remote the same shard passes."""
    remote = tmp_path / "remote"
    remote.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "found.cu").write_text("__global__ void found(int* x) { x[0] = 1; }\n")
    (src / "missed.cu").write_text("__global__ void missed(int* x) { x[0] = 2; }\n")
    nvcc = str(find_toolkit(homes=run_settings().homes).nvcc)

    def job(name: str, url: str, *tus: str) -> cache.Cache:
        job_cache = cache.open_cache("ccache", tmp_path / name / "cache", src, url, settings=run_settings())
        job_cache.prepare()
        env = {**cache.scrub(dict(os.environ)), **job_cache.env}
        for tu in tus:
            subprocess.run(
                [job_cache.binary(), nvcc, "-arch=sm_90", "-c", tu, "-o", f"{name}-{tu}.o"], cwd=src, env=env, check=True
            )
        return job_cache

    job("earlier-shard", f"file:{remote}", "found.cu")
    entries = sorted(p for p in remote.rglob("*") if p.is_file())
    shard = job("shard", f"file:{remote}|read-only", "found.cu", "missed.cu").stats()
    assert (shard.hits, shard.misses, shard.unstored) == (1, 1, 1) and shard.files > 0
    assert sorted(p for p in remote.rglob("*") if p.is_file()) == entries, "the shard's miss never reached the remote"

    obs = ShardObservation(
        build_rc=0,
        log="",
        real_objects=2,
        seat_compiles_seen=2,
        compiled=["found.cu", "missed.cu"],
        failed=[],
        expected_owned=["found.cu", "missed.cu"],
        cache_files=shard.files,
        build_tus=["found.cu", "missed.cu"],
        unstored_misses=shard.unstored,
    )
    verdict = shard_gate(obs)
    assert not verdict.ok and any("1 of its compiles missed the cache and never reached the remote" in r for r in verdict.reasons)
    written = replace(obs, cache_files=0)  # what it wrote to the remote: nothing
    assert "the cache is empty after compiling: nothing to hand over" in shard_gate(written).reasons

    link = job("link", f"file:{remote}", "found.cu", "missed.cu").stats()
    assert (link.hits, link.misses) == (1, 1), "the link misses what the shard compiled"

    (tmp_path / "writable").mkdir()
    writable = job("writable-shard", f"file:{tmp_path / 'writable'}", "found.cu", "missed.cu").stats()
    assert (writable.misses, writable.unstored) == (2, 0)
    passing = shard_gate(replace(obs, cache_files=writable.files, unstored_misses=writable.unstored))
    assert passing.ok and passing.reasons == ["compiled 2 TUs; build succeeded"]
