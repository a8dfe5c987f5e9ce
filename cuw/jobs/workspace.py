"""The folders of one job (a shard or the link) and how they are prepared.

A job's own files (cache, seat, logs, wheel) sit under its root; the source
copy and the build tree sit under its *tree*, which is also the cache's base
dir, so every path the cache hashes is relative to it. With ccache the tree is
the job root (shards can run side by side on one machine); with sccache every
job of a cell shares one tree path, because sccache hashes absolute paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from cuw.seat import install, native, runtime
from cuw.partition.assignment import recipe_assignment
from cuw.partition.coverage import covered_keys, rest_keys, seat_rest
from cuw.toolchain.cache import Cache, open_cache
from cuw.base.errors import CuwError, InputError
from cuw.base.settings import Settings
from cuw.partition.rules import ShardSpec
from cuw.config.recipe import Recipe
from cuw.jobs.patching import PatchContext
from cuw.jobs.patching import apply as apply_patch
from cuw.jobs.sources import materialize
from cuw.jobs.frontend import build_system
from cuw.toolchain.ninja import NINJA_WRAPPER_MARK, find_real_ninja
from cuw.toolchain.toolkit import Toolkit, make_shadow_home


@dataclass(frozen=True)
class Workspace:
    root: Path
    tree: Path

    @staticmethod
    def for_job(cell_dir: Path, name: str, shared_tree: bool) -> "Workspace":
        root = cell_dir / name
        return Workspace(root, cell_dir / "tree" if shared_tree else root)

    @property
    def src(self) -> Path:
        return self.tree / "src"

    @property
    def build(self) -> Path:
        return self.tree / "build"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def seat_dir(self) -> Path:
        return self.root / "seat"

    @property
    def cuda_home(self) -> Path:
        return self.root / "cuda"

    @property
    def wheel_dir(self) -> Path:
        return self.root / "wheel"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def seat_log(self) -> Path:
        return self.logs / "seat.jsonl"

    @property
    def build_log(self) -> Path:
        return self.logs / "build.log"

    @property
    def deps(self) -> Path:
        return self.root / "deps"

    @property
    def empty_object(self) -> Path:
        return self.seat_dir / "empty.o"


def prepare(
    ws: Workspace,
    recipe: Recipe,
    toolkit: Toolkit,
    seat_partition: Optional[ShardSpec],
    tool: str = "ccache",
    remote: Optional[str] = None,
    patch: Optional[PatchContext] = None,
    lane: str = "linux",
    *,
    settings: Settings,
    deadline: Optional[float] = None,
) -> Cache:
    """A fresh job folder: source copy (patched), empty cache, seat and shadow CUDA_HOME.
    ``settings``: the run's. ``deadline`` (Unix time): the
    seat starts no owned compile after it (:attr:`runtime.SeatConfig.deadline`)."""
    for folder in {ws.root, ws.tree}:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    materialize(recipe, ws.src, settings=settings)
    if patch is not None:
        apply_patch(recipe, replace(patch, source_dir=ws.src))
    # A pyproject.toml that names its build backend wrongly is refused here, before the job starts.
    build_system(ws.src / recipe.build_subdir)
    for folder in (ws.build, ws.wheel_dir, ws.logs, ws.seat_dir):
        folder.mkdir()
    job_cache = open_cache(tool, ws.cache_dir, ws.tree, remote, settings=settings)
    job_cache.prepare()
    install.make_empty_object(ws.empty_object, settings.cc)
    partition = partition_for_seat(recipe, seat_partition, ws.src, lane) if seat_partition else None
    config = seat_config(ws, toolkit.nvcc, job_cache, partition, nvcc_args(recipe), lane, deadline)
    script = install.install(ws.seat_dir, config)
    # A shard's foreign TUs stubbed without a Python start (no C compiler: the scripts stay).
    native.install_native(ws.seat_dir, config, note=ws.build_log, cc=settings.cc)
    make_shadow_home(toolkit, ws.cuda_home, script)
    install.link_host_seat(ws.seat_dir, ws.cuda_home / "bin", config)
    install_ninja_wrapper(ws.cuda_home / "bin", settings.path)
    return job_cache


def seat_config(
    ws: Workspace,
    nvcc: Path,
    job_cache: Cache,
    partition: Optional[runtime.SeatPartition],
    extra_args: Sequence[str] = (),
    lane: str = "linux",
    deadline: Optional[float] = None,
) -> runtime.SeatConfig:
    """The seat of the job in ``ws``: the real ``nvcc`` and host compilers behind it, the job's cache,
    its folders, its slice (``partition``; None: a pure cache pass-through), ``extra_args`` for
    every owned compile (:func:`nvcc_args`) and the ``deadline`` (Unix time) past which it starts
    no owned compile. The one place a job's inputs become a :class:`runtime.SeatConfig`."""
    return runtime.SeatConfig(
        real_nvcc=str(nvcc),
        cache_cmd=job_cache.binary(),
        cache_env=job_cache.env,
        statslog_var=job_cache.statslog_var,
        source_root=str(ws.src),
        empty_object=str(ws.empty_object),
        log=str(ws.seat_log),
        partition=partition,
        extra_args=list(extra_args),
        real_compilers=install.find_host_compilers(),
        # Windows shards keep every host source: the module-init symbol must link in each.
        partition_host=lane != "windows",
        tree=str(ws.tree),
        deadline=deadline,
    )


def nvcc_args(recipe: Recipe) -> list[str]:
    """What the seat appends to every owned compile: the recipe's nvcc_flags and ``--threads N``."""
    return [*recipe.nvcc_flags, *([f"--threads={recipe.nvcc_threads}"] if recipe.nvcc_threads else [])]


_NINJA_WRAPPER = """#!/bin/sh
{mark}: a shard job's build keeps going (see cuw/jobs/backends.py keep_going).
if [ "${{{var}:-}}" = 1 ]; then
  for arg in "$@"; do
    case "$arg" in -t|-t*|--version|-h|--help) exec {real} "$@" ;; esac
  done
  exec {real} -k 0 "$@"
fi
exec {real} "$@"
"""


def install_ninja_wrapper(bin_dir: Path, path: str) -> Optional[Path]:
    """``bin_dir/ninja``: the real ninja, with ``-k 0`` added when the job's environment has
    CUW_KEEP_GOING=1 (shard jobs only). The shadow bin is first on the build's PATH, so every
    ``ninja`` run by name (torch's ninja path, ccimport, CMake's own lookup) reaches it.
    None (and no wrapper) where there is no ninja or no POSIX shell. ``path``: the run's PATH."""
    import shlex

    from cuw.jobs.backends import KEEP_GOING

    real = find_real_ninja(path)
    if real is None or os.name != "posix":
        return None
    wrapper = bin_dir / "ninja"
    wrapper.write_text(_NINJA_WRAPPER.format(mark=NINJA_WRAPPER_MARK, var=KEEP_GOING, real=shlex.quote(real)))
    wrapper.chmod(0o755)
    return wrapper


def partition_for_seat(
    recipe: Recipe, spec: ShardSpec, src_root: Optional[Path] = None, lane: str = "linux"
) -> runtime.SeatPartition:
    """The seat's slice with the recipe's rule; a seat recipe's seat knows the full set only from
    the cost table. Under ``filter: source`` (``seat_rest``, the default) the seat partitions the
    rest of the prepared tree ``src_root``: it carries the filter's globs and files, which it never
    partitions, and the joint assignment's owners of the rest (cuw.partition.assignment)."""
    if recipe.sharding.filter != "source":
        return runtime.SeatPartition(spec.index, spec.count, dict(recipe_assignment(recipe, spec.count).table))
    if src_root is None or not seat_rest(recipe):
        raise InputError(
            f"recipe {recipe.key!r}: the seat partitions a source-filter recipe's rest only "
            "with seat_rest and a prepared source tree"
        )
    rest = set(rest_keys(recipe, src_root, lane))
    table = recipe_assignment(recipe, spec.count, src_root, lane).table
    return runtime.SeatPartition(
        spec.index,
        spec.count,
        {k: v for k, v in table.items() if k in rest},
        filter_globs=list(recipe.sharding.source.globs),
        filter_keys=covered_keys(recipe, src_root, lane),
    )


def real_objects(ws: Workspace) -> int:
    """Object files (``*.o``, and MSVC's ``*.obj``) under the job's tree that are not the
    seat's empty stub, nor a build system's probe (CMake's compiler identification leaves
    ``CompilerIdCUDA/…/a_dlink.o`` behind in every configured tree: counted, a build that compiled
    nothing of its own would still look like one that did)."""
    stub = ws.empty_object.read_bytes() if ws.empty_object.exists() else b""
    count = 0
    # gcc/nvcc write .o on Linux; MSVC (cl, and nvcc's host side) writes .obj on Windows.
    for path in (p for suffix in (".o", ".obj") for p in ws.tree.rglob("*" + suffix)):
        folders = path.relative_to(ws.tree).parts[:-1]  # within the tree: the job folder's own name never counts
        if any(marker in part for part in folders for marker in runtime.PROBE_MARKERS):
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if size > 1 and not (size == len(stub) and path.read_bytes() == stub):
            count += 1
    return count


def default_jobs(parallel_builds: int = 1) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, parallel_builds))


def install_extra_deps(recipe: Recipe, ws: Workspace, cuda: Optional[str] = None) -> Optional[Path]:
    """The recipe's extra_deps (and those of the cell's CUDA line), installed into the job's
    own folder (never into the forge's environment)."""
    requirements = [*recipe.extra_deps, *recipe.extra_deps_cuda.get(cuda or "", [])]
    if not requirements:
        return None
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(ws.deps), *requirements]
    with open(ws.build_log, "ab") as fh:
        fh.write(("$ (extra_deps) " + " ".join(cmd) + "\n").encode())
        fh.flush()
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        # pip's reason, in the build log: a bad requirement or an index out of reach.
        raise CuwError(f"recipe {recipe.key!r}: extra_deps {requirements} could not be installed (see {ws.build_log})")
    return ws.deps
