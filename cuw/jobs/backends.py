"""How each build backend is driven: one environment for its ``build_wheel`` hook (:mod:`cuw.jobs.frontend`).

The environment is the only place the seat is wired in: CUDACXX (CMake),
PYTORCH_NVCC (torch's ninja path) and CUDA_HOME (torch's distutils path and
anything that runs ``$CUDA_HOME/bin/nvcc``) all lead to it, and the build
systems' own cache wrappers are switched off so nothing is cached twice.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from string import Template
from typing import Mapping, Optional

from cuw.toolchain import cache
from cuw.base.errors import InputError
from cuw.config.grid import cmake_archs
from cuw.partition.rules import ShardSpec
from cuw.config.recipe import Recipe

SOURCE_FILTER_INDEX = "CUDA_WHEELS_SHARD_INDEX"
KEEP_GOING = "CUW_KEEP_GOING"
"""Set (to 1) in a shard job's environment: the ``ninja`` wrapper in the shadow CUDA_HOME's bin
(:func:`cuw.jobs.workspace.install_ninja_wrapper`) then adds ``-k 0``."""
SOURCE_FILTER_COUNT = "CUDA_WHEELS_SHARD_COUNT"
FORCE_UNRESOLVED = "/FORCE:UNRESOLVED"
# Launchers a user's environment may carry: the seat already caches.
_LAUNCHER_VARS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")


def build_env(
    recipe: Recipe,
    shadow_home: Path,
    build_dir: Path,
    jobs: int,
    source_filter_shard: Optional[ShardSpec],
    base: Mapping[str, str],
    lane: str = "linux",
    shard: Optional[ShardSpec] = None,
    archs: Optional[list[str]] = None,
    deps_dir: Optional[Path] = None,
) -> dict[str, str]:
    """``archs`` is the cell's resolved arch list (grid.cell_archs, the one arch policy);
    without it the build system's own default applies."""
    if recipe.max_jobs:
        jobs = min(jobs, recipe.max_jobs)
    env = cache.scrub(dict(base))  # the run's child environment (Settings.child_env)
    for var in (*_LAUNCHER_VARS, SOURCE_FILTER_INDEX, SOURCE_FILTER_COUNT, "CUDACXX", "PYTORCH_NVCC"):
        env.pop(var, None)
    env.update(_toolchain_vars(env, shadow_home, build_dir, jobs))
    _seat_compilers(env, shadow_home)
    if archs:
        env["CUDAARCHS"] = cmake_archs(archs)
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
    _link_flags(env, lane, shard)
    if source_filter_shard is not None:
        # Exported only for the source filter: the seat then partitions nothing.
        env[SOURCE_FILTER_INDEX] = str(source_filter_shard.index)
        env[SOURCE_FILTER_COUNT] = str(source_filter_shard.count)
    if deps_dir is not None:
        env["CUW_EXTRA_DEPS"] = str(deps_dir)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(deps_dir), env.get("PYTHONPATH", "")) if p)
    # The shard gate reads what the build meant to compile from it (Makefiles builds too).
    env.setdefault("CMAKE_EXPORT_COMPILE_COMMANDS", "ON")
    env.update(expand_recipe_env(recipe, env))
    keep_going(env, recipe, shard is not None)
    return env


def _toolchain_vars(env: dict[str, str], shadow_home: Path, build_dir: Path, jobs: int) -> dict[str, str]:
    """The shadow CUDA home's nvcc for every build system, the job count, no prompts."""
    nvcc = str(shadow_home / "bin" / "nvcc")
    return {
        "CUDA_HOME": str(shadow_home),
        "CUDA_PATH": str(shadow_home),
        "CUDACXX": nvcc,
        "PYTORCH_NVCC": nvcc,
        "PATH": os.pathsep.join([str(shadow_home / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")]),
        "TORCH_NO_COMPILER_WRAPPER": "1",  # torch would prepend ccache to both compilers
        "MAX_JOBS": str(jobs),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        "SKBUILD_BUILD_DIR": str(build_dir),
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def _seat_compilers(env: dict[str, str], shadow_home: Path) -> None:
    for var, name in (("CC", "gcc"), ("CXX", "g++")):
        # Unset, scikit-build-core and setuptools take the compiler the interpreter was built with
        # (sysconfig): Debian's own CPython names aarch64-linux-gnu-g++, a name the host seat does
        # not stand in for, so every host compile would go around it. The seat's own name instead.
        if not env.get(var) and os.path.lexists(shadow_home / "bin" / name):
            env[var] = name


def _link_flags(env: dict[str, str], lane: str, shard: Optional[ShardSpec]) -> None:
    link_flags = [f for f in env.pop("LINK", "").split() if f.upper() != FORCE_UNRESOLVED]
    if lane == "windows" and shard is not None and shard.count > 1:
        # MSVC's link.exe reads LINK: a shard links past its missing kernels.
        # The link job never gets it: there an unresolved symbol is an error.
        link_flags.append(FORCE_UNRESOLVED)
    if link_flags:
        env["LINK"] = " ".join(link_flags)


def _cmake_generator(env: dict[str, str]) -> str:
    """The CMake generator named in the environment (CMAKE_GENERATOR, or ``-G`` in CMAKE_ARGS /
    SKBUILD_CMAKE_ARGS), or "" when the build system picks (scikit-build-core: Ninja)."""
    import shlex

    found = env.get("CMAKE_GENERATOR", "")
    for var in ("CMAKE_ARGS", "SKBUILD_CMAKE_ARGS"):
        try:
            words = shlex.split(env.get(var, "").replace(";", " "))
        except ValueError:
            continue
        for i, word in enumerate(words):
            if word == "-G" and i + 1 < len(words):
                found = words[i + 1]
            elif word.startswith("-G") and len(word) > 2:
                found = word[2:]
    return found


def keep_going(env: dict[str, str], recipe: Recipe, shard: bool) -> dict[str, str]:
    """A shard's build keeps going after a failed edge, so every TU of its slice compiles even
    when a library link fails first (ninja stops scheduling after its first failure, make after
    its first error). The link job never keeps going: there a failure is the answer.

    - ninja, however it is reached by name (torch's ninja path, ccimport, CMake run from a
      setup.py): the wrapper in the shadow bin adds ``-k 0`` when ``CUW_KEEP_GOING=1``;
    - scikit-build-core runs the ninja of the ``ninja`` package by path, so it gets ``-k 0``
      through ``build.tool-args`` (``SKBUILD_BUILD_TOOL_ARGS``), unless a Makefiles
      generator is named;
    - make (natten's setup.py drives Unix Makefiles): ``-k`` in MAKEFLAGS.
    """
    env.pop(KEEP_GOING, None)
    make_words = [w for w in env.get("MAKEFLAGS", "").split() if w not in ("-k", "--keep-going")]
    if make_words:
        env["MAKEFLAGS"] = " ".join(make_words)
    else:
        env.pop("MAKEFLAGS", None)
    if not shard:
        return env
    env[KEEP_GOING] = "1"
    if make_words and not make_words[0].startswith("-") and "=" not in make_words[0]:
        env["MAKEFLAGS"] = " ".join(["k" + make_words[0], *make_words[1:]])  # make's letters-only form ("j8")
    else:
        env["MAKEFLAGS"] = " ".join(["-k", *make_words])
    if recipe.backend == "scikit-build-core" and "Makefiles" not in _cmake_generator(env):
        tool_args = [a for a in env.get("SKBUILD_BUILD_TOOL_ARGS", "").split(";") if a]
        env["SKBUILD_BUILD_TOOL_ARGS"] = ";".join([*tool_args, "-k", "0"])
    return env


def expand_recipe_env(recipe: Recipe, env: dict[str, str]) -> dict[str, str]:
    """The recipe's env with ``${NAME}`` taken from the build environment, so a recipe can pass
    the cell's arch list or the extra_deps folder to an upstream knob (CMAKE_ARGS, NCCL_ROOT)."""
    out: dict[str, str] = {}
    for key, value in recipe.env.items():
        try:
            out[key] = Template(value).substitute(env)
        except KeyError as exc:
            known = ", ".join(v for v in ("CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "CUW_EXTRA_DEPS", "CUDA_HOME") if v in env)
            raise InputError(
                f"recipe {recipe.key!r}: env.{key} refers to ${{{exc.args[0]}}}, which the build environment "
                f"does not set here (set: {known or 'none of CUDAARCHS, CUW_EXTRA_DEPS'})"
            ) from None
        except ValueError:
            raise InputError(f"recipe {recipe.key!r}: env.{key}: a '$' must start ${{NAME}} (write $$ for a literal $)") from None
    return out
