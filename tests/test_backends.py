"""The build environment: the one place the seat, the archs and the job limits are wired."""

from __future__ import annotations

from dataclasses import replace

from cuw.jobs.backends import build_env
from cuw.partition.rules import ShardSpec
from cuw.config.recipe import load_recipe


def test_max_jobs_caps_parallel_compiles(recipes_dir, tmp_path):
    recipe = replace(load_recipe("example", recipes_dir), max_jobs=1)
    env = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 8, None, base={"PATH": "/usr/bin"})
    assert env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"] == "1"


def test_seat_is_in_every_compiler_position_and_the_source_filter_only_when_asked(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    base = {"PATH": "/usr/bin", "CCACHE_DIR": "/elsewhere", "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache",
            "CUDA_WHEELS_SHARD_COUNT": "9"}  # fmt: skip
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
    env = build_env(recipe, tmp_path / "cuda", tmp_path / "build", 2, None,
                    base={"PATH": "/usr/bin", "PYTHONPATH": "/x"}, deps_dir=tmp_path / "deps")  # fmt: skip
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
