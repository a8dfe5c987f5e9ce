"""natten's real sdist for the tests, fetched once through the forge's source cache."""

from __future__ import annotations

from pathlib import Path

from cuw.config.cell import Cell
from cuw.jobs.patching import PatchContext
from cuw.config.recipe import Recipe, load_recipe
from cuw.jobs.sources import fetch_sdist, unpack
from conftest import run_settings

REPO = Path(__file__).resolve().parent.parent
# The farm's CUDA 13.0 list (recipes/defaults.yml): Hopper and Blackwell kernels both generated.
CUDA13_ARCHS = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0+PTX"]


def natten_recipe() -> Recipe:
    return load_recipe("natten", REPO / "recipes")


def fresh_natten_tree(dest: Path) -> Path:
    """An unpacked, unpatched copy of the recipe's pinned sdist at ``dest``."""
    recipe = natten_recipe()
    assert recipe.source.pypi and recipe.source.sha256
    return unpack(fetch_sdist(recipe.source.pypi, recipe.source.sha256, settings=run_settings()), dest)


def natten_ctx(src: Path, archs: list[str] = CUDA13_ARCHS) -> PatchContext:
    return PatchContext(src, Cell("natten", "linux", "3.11", "13.0", "2.14"), archs, "natten")
