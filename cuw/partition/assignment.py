"""A recipe's partition: the TUs it covers, their costs and families -> an :class:`Assignment`.

Every place that asks "which shard owns this TU" (the seat, the source filter,
the link gate's miss attribution, the planner) builds its assignment here, so
they cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cuw.partition.costs import CostTable, recipe_costs
from cuw.base.errors import InputError
from cuw.partition.coverage import covered_keys, rest_keys
from cuw.partition.rules import Assignment, assign, families_of
from cuw.config.recipe import Recipe


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

    A source-filter recipe's rest (:func:`cuw.partition.coverage.rest_keys`, what its seat partitions) is assigned
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
            raise InputError(
                f"{table.path}: no TU of it is in the source any more: record it again (cuw costs {recipe.key} --from <log>)"
            )
    else:
        keys = sorted(costs)
    family = families_of(set(keys) | (set(costs) - set(rest)), sharding.source.families)
    return assign(count, sharding.rule, keys, costs, family, sharding.per_family, rest=rest)
