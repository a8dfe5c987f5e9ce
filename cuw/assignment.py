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
from .partition import Assignment, assign, families_of, tu_key
from .recipe import Recipe


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


def recipe_assignment(
    recipe: Recipe,
    count: int,
    src_root: Optional[Path] = None,
    lane: str = "linux",
    table: Optional[CostTable] = None,
) -> Assignment:
    """The recipe's assignment at N. The known set is the source filter's files in
    ``src_root`` (``filter: source``), else the cost table's keys; ``table``
    replaces the recipe's committed one (the planner's ``--costs``)."""
    sharding = recipe.sharding
    table = table or recipe_costs(recipe)
    costs = table.costs if table else {}
    if sharding.filter == "source" and src_root is not None:
        keys = covered_keys(recipe, src_root, lane)
        # A TU the table names but the source no longer has would take a shard's place.
        costs = {k: v for k, v in costs.items() if k in set(keys)}
        if table and not costs:
            raise CuwError(
                f"{table.path}: no TU of it is in the source any more: record it again (cuw costs {recipe.key} --from <log>)"
            )
    else:
        keys = sorted(costs)
    family = families_of(set(keys) | set(costs), sharding.source.families)
    return assign(count, sharding.rule, keys, costs, family, sharding.per_family)
