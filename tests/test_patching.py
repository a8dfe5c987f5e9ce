"""The patch.py contract: every recipe's patch is idempotent and anchored."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from conftest import run_settings
from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.jobs.patching import PatchContext, apply, patch_file
from cuw.config.recipe import known_recipes, load_recipe
from cuw.jobs.sources import materialize


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def _ctx(recipe, src: Path) -> PatchContext:
    return PatchContext(src, Cell(recipe.key, "linux", "3.11", "13.0", None), ["9.0"], recipe.key)


def test_every_recipe_patch_runs_twice_without_changing_anything_the_second_time(recipes_dir, tmp_path):
    """The recipes built from a source of their own (the example). A recipe from PyPI or git is held
    to the same contract, and to failing loudly without its anchors, on its pinned upstream source by
    tests/test_recipes_real.py (test_patch_is_idempotent_and_fails_loudly_without_its_anchor): each
    recipe's patch is checked once, by one of the two."""
    from test_recipes_real import LARGE_SDISTS, _patched_pypi_recipes

    patched = [k for k in known_recipes(recipes_dir) if patch_file(load_recipe(k, recipes_dir))]
    upstream = {param.values[0] for param in _patched_pypi_recipes()} - set(LARGE_SDISTS)
    own = [key for key in patched if key not in upstream]
    assert "example" in own and upstream, (own, upstream)
    for key in own:
        recipe = load_recipe(key, recipes_dir)
        src = materialize(recipe, tmp_path / key / "src", settings=run_settings())
        pristine = _digest(src)
        assert apply(recipe, _ctx(recipe, src))
        once = _digest(src)
        assert once != pristine, f"{key}: the patch changed nothing"
        apply(recipe, _ctx(recipe, src))
        assert _digest(src) == once, f"{key}: the patch is not idempotent"


def test_a_moved_anchor_fails_loudly(recipes_dir, tmp_path):
    recipe = load_recipe("example", recipes_dir)
    src = materialize(recipe, tmp_path / "src", settings=run_settings())
    registry = src / "csrc" / "registry.cpp"
    registry.write_text(registry.read_text().replace("CUW_EXAMPLE_FLAVOUR;", "CUW_EXAMPLE_FLAVOUR ;"))
    with pytest.raises(InputError, match=r"example patch: csrc/registry.cpp: anchor not found"):
        apply(recipe, _ctx(recipe, src))
    with pytest.raises(CuwError, match=r"does not exist in the source"):
        _ctx(recipe, src).replace("nope.cpp", "a", "b")


def test_a_patch_without_a_patch_function(recipes_dir, tmp_path):
    (recipes_dir / "example" / "patch.py").write_text("X = 1\n")
    recipe = load_recipe("example", recipes_dir)
    with pytest.raises(InputError, match=r"defines no patch\(ctx\) function"):
        apply(recipe, _ctx(recipe, tmp_path))


def test_an_insertion_that_keeps_its_anchor_is_idempotent(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("project(x)\nadd_library(x a.c)\n")
    ctx = PatchContext(tmp_path, Cell("x", "linux", "3.11", "13.0", None), ["9.0"], "x")
    inserted = "add_library(x a.c)\nif(TARGET y)\n  add_dependencies(x y)\nendif()\n"
    assert ctx.replace("CMakeLists.txt", "add_library(x a.c)\n", inserted)
    assert not ctx.replace("CMakeLists.txt", "add_library(x a.c)\n", inserted)
    assert (tmp_path / "CMakeLists.txt").read_text() == "project(x)\n" + inserted
