"""The ``patch.py`` contract of a recipe.

``recipes/<name>/patch.py`` defines ``patch(ctx: PatchContext) -> None``. It
runs on a fresh source copy before every build (shards and link alike), must
be idempotent (a second run changes nothing; the test suite runs every
recipe's patch twice) and must fail loudly when upstream moved the text it
anchors on: :meth:`PatchContext.replace` does both.
"""

from __future__ import annotations

import importlib.util
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.config.recipe import Recipe


@dataclass(frozen=True)
class PatchContext:
    source_dir: Path
    cell: Cell
    archs: list[str]
    recipe: str
    # No shard here: a patch that knew its job could make a shard's source differ from the link's,
    # and the link would then replay compiles no shard made.

    def replace(self, relpath: str, old: str, new: str, count: int = 1) -> bool:
        """Replaces ``old`` by ``new`` in one file; True if it changed anything.

        Already patched (``new`` present, ``old`` gone) is a no-op; neither
        present means upstream changed and is an error naming the file.
        """
        path = self.source_dir / relpath
        if not path.is_file():
            raise InputError(f"{self.recipe} patch: {relpath} does not exist in the source")
        text = path.read_text()
        if old in new and new in text:
            return False  # an insertion keeps its anchor: present ``new`` means patched
        if old in text:
            found = text.count(old)
            if found != count:
                raise InputError(f"{self.recipe} patch: {relpath}: expected {count} copy of the anchor, found {found}")
            path.write_text(text.replace(old, new))
            return True
        if new in text:
            return False
        raise InputError(f"{self.recipe} patch: {relpath}: anchor not found (upstream changed?): {old.splitlines()[0]!r}")


def patch_file(recipe: Recipe) -> Optional[Path]:
    path = Path(recipe.folder) / "patch.py"
    return path if path.is_file() else None


def _recipe_code_error(recipe: Recipe, path: Path, exc: BaseException) -> InputError:
    """One line naming the recipe, the file and the line where its own code failed."""
    if isinstance(exc, SyntaxError):
        return InputError(f"recipe {recipe.key!r}: {path}:{exc.lineno}: syntax error: {exc.msg}")
    if isinstance(exc, SystemExit):
        return InputError(
            f"recipe {recipe.key!r}: {path} called sys.exit({exc.code!r}); a patch reports failure by raising "
            "an exception (a patch that exits could make a job look done)"
        )
    line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == str(path)), None)
    where = f"{path}:{line}" if line else str(path)
    return InputError(f"recipe {recipe.key!r}: {where}: {type(exc).__name__}: {exc}")


def apply(recipe: Recipe, ctx: PatchContext) -> bool:
    """Runs the recipe's patch, if it has one; returns whether one ran.

    Anything the recipe's code raises (or a ``sys.exit`` in it) becomes one CuwError
    naming the recipe and the file, never a traceback or a silent stop."""
    path = patch_file(recipe)
    if path is None:
        return False
    spec = importlib.util.spec_from_file_location(f"cuw_recipe_patch_{recipe.key}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        if not callable(getattr(module, "patch", None)):
            raise InputError(f"{path}: defines no patch(ctx) function")
        module.patch(ctx)
    except (CuwError, KeyboardInterrupt):
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recipe code: report it as the recipe's error
        raise _recipe_code_error(recipe, path, exc) from None
    return True
