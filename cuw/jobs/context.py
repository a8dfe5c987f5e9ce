"""What every job of a cell settles first: its archs (refusing a cell outside the grid), its
cache tool and remote, whether its lane shards.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from cuw.config.cell import Cell
from cuw.base.errors import InputError
from cuw.base.settings import Settings
from cuw.partition.rules import ShardSpec
from cuw.config.grid import cell_archs, require_in_grid
from cuw.config.policy import CacheChoice, Policy, cache_choice, load_policy
from cuw.config.recipe import Recipe
from cuw.base.files import only_one
from cuw.config.paths import Paths
from cuw.toolchain.cache import Cache, tool_class


Progress = Callable[[str], None]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def describe_cache(job_cache: Cache) -> str:
    return f"{job_cache.tool} {job_cache.version()}" + (f", remote {job_cache.remote}" if job_cache.remote else "")


def policy_for(recipe: Recipe) -> Policy:
    return load_policy(Path(recipe.folder).parent)


def cell_archs_in_grid(recipe: Recipe, cell: Cell) -> list[str]:
    """Refuses a cell outside the recipe's grid; returns the archs it compiles."""
    policy = policy_for(recipe)
    require_in_grid(recipe, policy.grid, cell)
    return cell_archs(recipe, policy.archs, cell)


def check_floor(recipe: Recipe, cell: Cell, settings: Settings) -> None:
    """In the lane's own build image, the floor the image computes must be the one the policy
    names (images.<lane>.floor): a policy that says 2_28 over an image that yields 2_31 is refused."""
    from cuw.toolchain.builder import current_builder

    builder = current_builder(settings)
    image = policy_for(recipe).images.get(cell.lane)
    if image is None or builder.image is None or builder.image.rsplit("@", 1)[0] != image.ref:
        return
    if builder.floor != image.floor:
        raise InputError(
            f"recipes/defaults.yml: images.{cell.lane}.floor is {image.floor}, but {image.ref} "
            f"has glibc {builder.glibc}, whose floor is {builder.floor}: correct the policy"
        )


def resolve_cache(recipe: Recipe, cell: Cell, choice: Optional[CacheChoice], settings: Settings) -> CacheChoice:
    """The cell's cache tool and remote: given, or the run's ``$CUW_CACHE_*`` over the policy beside the recipes."""
    if choice is not None:
        return choice
    return cache_choice(policy_for(recipe), cell.lane, settings)


@contextmanager
def alone(
    recipe: Recipe, cell: Cell, paths: Paths, job: str, what: str, cache: Optional[CacheChoice], settings: Settings
) -> Iterator[None]:
    """The job runs alone here: no second run of it, and with a cache tool whose jobs share the
    cell's build tree (sccache), no other job of the cell either. Refused at once, never waited for."""
    cell_work = paths.cell_work(cell)
    with ExitStack() as held:
        held.enter_context(only_one(cell_work / f".{job}.lock", what))
        tool = resolve_cache(recipe, cell, cache, settings).tool
        if tool_class(tool).shared_tree:
            held.enter_context(only_one(cell_work / ".tree.lock", f"another job of {cell.id} on its shared build tree ({tool})"))
        yield


def check_lane(recipe: Recipe, cell: Cell, spec: ShardSpec) -> None:
    if spec.count > 1 and cell.lane not in recipe.sharding.platforms:
        lanes = ", ".join(recipe.sharding.platforms)
        raise InputError(f"recipe {recipe.key!r} does not shard on lane {cell.lane} (sharding.platforms: {lanes}); use 1/1")
