"""The build environment: the one place the seat, the archs and the job limits are wired."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from cuw.jobs.backends import build_env
from cuw.partition.rules import ShardSpec
from cuw.config.recipe import load_recipe


# A compiler launcher that records when each compile ran (and makes it last long enough to overlap).
_TIMED = """#!/bin/sh
start=$(date +%s.%N)
sleep 0.4
"$@"
rc=$?
echo "$start $(date +%s.%N)" >> "$CUW_TEST_INTERVALS"
exit $rc
"""


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_max_jobs_caps_parallel_compiles(recipes_dir, tmp_path, generator):
    """A real CMake build of six C TUs, configured and built in the environment build_env gives
    (``cmake --build``, as scikit-build-core runs it): with ``max_jobs: 1`` of 8 jobs, never two
    compiles at once; with ``max_jobs: 3``, more than one (so the measure can see parallelism)."""
    project = tmp_path / "project"
    project.mkdir()
    names = [f"t{i}.c" for i in range(6)]
    for name in names:
        (project / name).write_text(f"int f_{name[:-2]}(void) {{ return {len(name)}; }}\n")
    (project / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.20)\nproject(p LANGUAGES C)\nadd_library(p STATIC {' '.join(names)})\n"
    )
    launcher = tmp_path / "timed"
    launcher.write_text(_TIMED)
    launcher.chmod(0o755)
    most = {}
    for cap in (1, 3):
        recipe = replace(load_recipe("example", recipes_dir), max_jobs=cap)
        build = tmp_path / f"build-{cap}"
        record = tmp_path / f"intervals-{cap}"
        env = build_env(recipe, tmp_path / "cuda", build, 8, None, base={"PATH": os.environ["PATH"]})
        env["CUW_TEST_INTERVALS"] = str(record)
        configure = ["cmake", "-S", str(project), "-B", str(build), "-G", generator, f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}"]
        for cmd in (configure, ["cmake", "--build", str(build)]):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        intervals = [tuple(map(float, line.split())) for line in record.read_text().splitlines()]
        assert len(intervals) == len(names), "every TU compiled through the launcher"
        most[cap] = _most_at_once(intervals)
    assert most[1] == 1, f"max_jobs: 1, yet {most[1]} compiles ran at once"
    assert most[3] > 1, "max_jobs: 3 ran one compile at a time: the measure cannot see a cap"


def test_seat_is_in_every_compiler_position_and_the_source_filter_only_when_asked(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    base = {
        "PATH": "/usr/bin",
        "CCACHE_DIR": "/elsewhere",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache",
        "CUDA_WHEELS_SHARD_COUNT": "9",
    }
    env = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 2, None, base=base, archs=["9.0", "12.0+PTX"])
    seat = str(tmp_path / "cuda" / "bin" / "nvcc")
    assert env["CUDACXX"] == env["PYTORCH_NVCC"] == seat and env["CUDA_HOME"] == str(tmp_path / "cuda")
    assert env["PATH"].split(":")[0] == str(tmp_path / "cuda" / "bin")
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert env["CUDAARCHS"] == "90-real;120" and env["TORCH_CUDA_ARCH_LIST"] == "9.0;12.0+PTX"
    for gone in ("CCACHE_DIR", "CMAKE_CUDA_COMPILER_LAUNCHER", "CUDA_WHEELS_SHARD_COUNT"):
        assert gone not in env
    filtered = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 2, ShardSpec(2, 3), base=base)
    assert (filtered["CUDA_WHEELS_SHARD_INDEX"], filtered["CUDA_WHEELS_SHARD_COUNT"]) == ("2", "3")


def test_extra_deps_that_cannot_install_are_a_clear_error(recipes_dir, tmp_path):
    import pytest

    from cuw.base.errors import CuwError
    from cuw.jobs.workspace import Workspace, install_extra_deps

    ws = Workspace(tmp_path / "job", tmp_path / "job")
    ws.logs.mkdir(parents=True)
    recipe = replace(load_recipe("example", recipes_dir), extra_deps=["cuw-no-such-package==0.0.0"])
    with pytest.raises(CuwError, match=r"extra_deps \['cuw-no-such-package==0.0.0'\] could not be installed"):
        install_extra_deps(recipe, ws)
    assert install_extra_deps(replace(recipe, extra_deps=[]), ws) is None


def test_extra_deps_folder_goes_first_on_the_build_pythonpath(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    env = build_env(
        recipe,
        tmp_path / "cuda",
        tmp_path / "build",
        2,
        None,
        base={"PATH": "/usr/bin", "PYTHONPATH": "/x"},
        deps_dir=tmp_path / "deps",
    )
    assert env["PYTHONPATH"] == f"{tmp_path / 'deps'}:/x" and env["CUW_EXTRA_DEPS"] == str(tmp_path / "deps")


def test_the_host_compilers_are_the_seats_names_not_the_interpreters_own(recipes_dir, tmp_path):
    """Debian's CPython says CXX=aarch64-linux-gnu-g++ in sysconfig; scikit-build-core and setuptools
    use it when CXX is unset, and no host seat has that name. Measured: in the ARM stand-in every host
    TU went around the seat and the shard gate failed. The build names the seat's g++ and gcc."""
    recipe = load_recipe("example", recipes_dir)
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    for name in ("gcc", "g++"):
        (tmp_path / "cuda" / "bin" / name).symlink_to("/nonexistent/host-cc")
    env = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 2, None, base={"PATH": "/usr/bin"})
    assert (env["CC"], env["CXX"]) == ("gcc", "g++")
    mine = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 2, None, base={"PATH": "/usr/bin", "CXX": "clang++"})
    assert mine["CXX"] == "clang++", "a compiler the caller chose stays"
    bare = build_env(recipe, tmp_path / "none", tmp_path / "build", 2, None, base={"PATH": "/usr/bin"})
    assert "CXX" not in bare, "no seat of that name: nothing named"
