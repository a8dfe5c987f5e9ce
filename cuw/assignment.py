"""A recipe's partition: the TUs it covers, their costs and families -> an :class:`Assignment`.

Every place that asks "which shard owns this TU" (the seat, the source filter,
the link gate's miss attribution, the planner) builds its assignment here, so
they cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .costs import CostTable, recipe_costs
from .errors import CuwError
from .partition import Assignment, assign, families_of, glob_match, tu_key
from .recipe import Recipe

REST_FAMILY = "(rest)"
"""The family name the planner gives a source-filter recipe's seat-partitioned rest."""


def source_filter_files(src_root: Path, globs: list[str], lane: str = "linux") -> list[Path]:
    """The files ``filter: source`` partitions. On Windows only CUDA sources: host
    sources (the module-init symbol among them) stay in every shard."""
    matched = sorted({p for pattern in globs for p in src_root.glob(pattern) if p.is_file()})
    if lane == "windows":
        matched = [p for p in matched if p.suffix == ".cu"]
    if not matched:
        raise CuwError(f"sharding.source.globs ({', '.join(globs)}) matched no file under {src_root}")
    return matched


def covered_keys(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """The keys a recipe's partition covers in a source tree: the source filter's files, or every .cu."""
    if recipe.sharding.filter == "source":
        return [tu_key(str(p), str(src_root)) for p in source_filter_files(src_root, recipe.sharding.source.globs, lane)]
    from .workspace import cuda_sources  # workspace builds the seat from this module

    return cuda_sources(src_root)


def filter_covers(key: str, globs: list[str]) -> bool:
    """Whether a key is the source filter's (its globs match it): the globs decide which
    mechanism owns a file, the filter (deleting it) or the seat (stubbing it), never both."""
    return any(glob_match(key, pattern) for pattern in globs)


def seat_rest(recipe: Recipe) -> bool:
    """Whether the seat partitions a source-filter recipe's rest (``sharding.source.seat_rest``)."""
    return recipe.sharding.filter == "source" and recipe.sharding.source.seat_rest


def rest_keys(recipe: Recipe, src_root: Path, lane: str = "linux") -> list[str]:
    """A source-filter recipe's rest: every source file under the root (``.cu``, ``.c``, ``.cpp``,
    ...) that neither the filter's file list nor its globs cover: the hand-written CUDA and host
    TUs the seat partitions (empty with ``seat_rest: false``, or for a seat recipe). On Windows
    only CUDA sources: the seat keeps every host source there (the module-init symbol)."""
    if not seat_rest(recipe):
        return []
    from .nvcc_args import SOURCE_SUFFIXES

    globs = recipe.sharding.source.globs
    covered = set(covered_keys(recipe, src_root, lane))
    keys = []
    for path in src_root.rglob("*"):
        suffixes = (".cu",) if lane == "windows" else SOURCE_SUFFIXES
        if path.suffix and path.name.endswith(suffixes) and path.is_file():
            key = tu_key(str(path), str(src_root))
            if key not in covered and not filter_covers(key, globs):
                keys.append(key)
    return sorted(keys)


def recipe_assignment(
    recipe: Recipe,
    count: int,
    src_root: Optional[Path] = None,
    lane: str = "linux",
    table: Optional[CostTable] = None,
) -> Assignment:
    """The recipe's assignment at N. The known set is the source filter's files in
    ``src_root`` (``filter: source``), else the cost table's keys; ``table``
    replaces the recipe's committed one (the planner's ``--costs``).

    A source-filter recipe's rest (:func:`rest_keys`, what its seat partitions) is assigned
    by the same call after the filter's files, continuing the rule where they left off:
    the filter's files keep the owners they have without it."""
    sharding = recipe.sharding
    table = table or recipe_costs(recipe)
    costs = table.costs if table else {}
    rest: list[str] = []
    if sharding.filter == "source" and src_root is not None:
        keys = covered_keys(recipe, src_root, lane)
        rest = rest_keys(recipe, src_root, lane)
        # A TU the table names but the source no longer has would take a shard's place.
        costs = {k: v for k, v in costs.items() if k in set(keys) | set(rest)}
        if table and not any(k in costs for k in keys):
            raise CuwError(
                f"{table.path}: no TU of it is in the source any more: record it again (cuw costs {recipe.key} --from <log>)"
            )
    else:
        keys = sorted(costs)
    family = families_of(set(keys) | (set(costs) - set(rest)), sharding.source.families)
    return assign(count, sharding.rule, keys, costs, family, sharding.per_family, rest=rest)
