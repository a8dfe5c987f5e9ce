"""The recipes at a glance: one line each (``cuw recipes``)."""

from __future__ import annotations

from pathlib import Path

from cuw.config.grid import cells
from cuw.config.policy import load_policy
from cuw.config.recipe import known_recipes, load_recipe


def recipes_table(recipes_dir: Path) -> str:
    """Source, backend, torch axis, sharding, the lanes that shard, and the number of cells."""
    grid = load_policy(recipes_dir).grid
    rows = [f"{'recipe':16} {'source':28} {'backend':18} {'torch':10} {'sharding':14} {'shards on':26} cells"]
    for key in known_recipes(recipes_dir):
        r = load_recipe(key, recipes_dir)
        src = r.source.path or r.source.pypi or f"{r.source.git}@{r.source.tag}"
        torch = "links" if r.links_torch else "torch-free"
        sharding = f"{r.sharding.count} ({r.sharding.filter})"
        rows.append(
            f"{key:16} {src[:28]:28} {r.backend:18} {torch:10} {sharding:14} "
            f"{','.join(r.sharding.platforms):26} {len(cells(r, grid))}"
        )
    return "\n".join(rows) + "\n"
