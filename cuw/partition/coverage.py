"""Which TUs a partition covers: the one definition every job, gate and the planner reads.

- A **seat recipe** partitions every source file the seat sees: CUDA and host TUs on Linux (the
  host seat stubs host compiles too), CUDA TUs only on Windows (host sources keep the
  module-init symbol in every shard). Its ``sharding.source.globs``, when set, name the build's
  TUs among the tree's sources: what is counted and planned.
- A **source-filter recipe** partitions the files its globs match (CUDA only on Windows), and,
  with ``seat_rest``, its seat partitions the rest: every other source file. The globs decide
  which mechanism owns a file, so no file is ever seen by both.
- A **cost table** keeps the keys of source files inside the tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from cuw.base.errors import InputError
from cuw.config.recipe import Recipe
from cuw.partition.globs import glob_match, glob_paths
from cuw.partition.rules import tu_key
from cuw.toolchain.nvcc_args import SOURCE_SUFFIXES

CUDA_SUFFIXES = (".cu",)

REST_FAMILY = "(rest)"
"""The family name the planner gives a source-filter recipe's seat-partitioned rest."""


def partitioned_suffixes(lane: str) -> tuple[str, ...]:
    """The source suffixes the seat partitions on a lane (the rest it compiles in every shard)."""
    return CUDA_SUFFIXES if lane == "windows" else SOURCE_SUFFIXES


def is_cuda(key: str) -> bool:
    return key.endswith(CUDA_SUFFIXES)


def is_source(name: str, lane: str = "linux") -> bool:
    """Whether the seat partitions a file of this name on the lane."""
    return name.endswith(partitioned_suffixes(lane)) and name not in SOURCE_SUFFIXES  # ".c" alone names no TU


def costed(key: str) -> bool:
    """Whether a measured TU belongs in a cost table: a source file inside the tree."""
    return key.endswith(SOURCE_SUFFIXES) and not key.startswith("../")


def cost_keeps(recipe: Recipe) -> Callable[[str], bool]:
    """Which measured TUs a recipe's cost table keeps: the source filter's files (its globs), or
    (the seat partitions every source it compiles, host ones too) every :func:`costed` key."""
    if recipe.sharding.filter == "source":
        globs = recipe.sharding.source.globs
        return lambda key: filter_covers(key, globs)
    return costed


def source_keys(src_root: Path, lane: str = "linux") -> list[str]:
    """Every file under the tree the seat partitions on the lane, as keys."""
    return sorted(tu_key(str(p), str(src_root)) for p in src_root.rglob("*") if is_source(p.name, lane) and p.is_file())


def cuda_sources(root: Path) -> list[str]:
    """Every .cu file under a source tree, as partition keys."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.cu") if p.is_file())


def source_filter_files(src_root: Path, globs: list[str], lane: str = "linux") -> list[Path]:
    """The files ``filter: source`` partitions. On Windows only CUDA sources: host
    sources (the module-init symbol among them) stay in every shard."""
    matched = glob_paths(src_root, globs)
    # The filter deletes what it matches from every shard but the owner: a build file, a header
    # or a script matched there breaks every other shard's build, not just its compiles.
    not_tus = [p for p in matched if not p.name.endswith(SOURCE_SUFFIXES)]
    if not_tus:
        shown = ", ".join(str(p.relative_to(src_root)) for p in not_tus[:3]) + (", ..." if len(not_tus) > 3 else "")
        raise InputError(
            f"sharding.source.globs ({', '.join(globs)}) match {len(not_tus)} file(s) that are not translation "
            f"units ({shown}): the filter would delete them from every shard but one and the others could not "
            "build; narrow the globs to the sources it partitions (for example csrc/kernels/*.cu)"
        )
    if lane == "windows":
        matched = [p for p in matched if p.suffix in CUDA_SUFFIXES]
    if not matched:
        raise InputError(f"sharding.source.globs ({', '.join(globs)}) matched no file under {src_root}")
    return matched


def covered_keys(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """The keys a recipe's partition covers in a source tree: the source filter's files, or
    (a seat recipe) every source file the seat partitions on the lane."""
    if recipe.sharding.filter == "source":
        return [tu_key(str(p), str(src_root)) for p in source_filter_files(src_root, recipe.sharding.source.globs, lane)]
    globs = recipe.sharding.source.globs  # a seat recipe's globs name the build's TUs among the tree's sources
    keys = source_keys(src_root, lane)
    return [k for k in keys if filter_covers(k, globs)] if globs else keys


def filter_covers(key: str, globs: list[str]) -> bool:
    """Whether a key is the source filter's (its globs match it): the globs decide which
    mechanism owns a file, the filter (deleting it) or the seat (stubbing it), never both."""
    return any(glob_match(key, pattern) for pattern in globs)


def seat_rest(recipe: Recipe) -> bool:
    """Whether the seat partitions a source-filter recipe's rest (``sharding.source.seat_rest``)."""
    return recipe.sharding.filter == "source" and recipe.sharding.source.seat_rest


def unfiltered_keys(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """A source-filter recipe's rest, whether or not its seat partitions it: every source file
    (``.cu``, ``.c``, ``.cpp``, ...; CUDA only on Windows) that neither the filter's file list
    nor its globs cover."""
    if recipe.sharding.filter != "source":
        return []
    globs = recipe.sharding.source.globs
    covered = set(covered_keys(recipe, src_root, lane))
    return [k for k in source_keys(src_root, lane) if k not in covered and not filter_covers(k, globs)]


def rest_keys(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """The rest the seat partitions: :func:`unfiltered_keys` with ``seat_rest``, else none."""
    return unfiltered_keys(recipe, src_root, lane) if seat_rest(recipe) else []
