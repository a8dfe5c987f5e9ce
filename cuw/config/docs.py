"""Generates docs/recipe-keys.md and docs/recipe.schema.json from the recipe dataclasses, and
docs/environment.md from the declared variables (cuw/base/settings.py).

``python -m cuw.config.docs`` rewrites them; a test fails when the committed files drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cuw
from cuw.base import files
from cuw.base.errors import CuwError
from cuw.base.settings import OTHER, VARIABLES
from cuw.config.recipe import LOADER_ONLY, Recipe
from cuw.config.schema import docs_table, json_schema

DOCS = Path(cuw.FORGE_ROOT) / "docs"


def recipe_schema() -> str:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "recipe.yml",
        **json_schema(Recipe, hidden=LOADER_ONLY),
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def recipe_keys() -> str:
    head = [
        "# recipe.yml keys",
        "",
        "Generated from `cuw/config/recipe.py` by `python -m cuw.config.docs`; do not edit by hand.",
        "Unknown keys are errors that name the closest valid key; versions are quoted strings.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + docs_table(Recipe, hidden=LOADER_ONLY)) + "\n"


def environment() -> str:
    lines = [
        "# Environment variables",
        "",
        "Generated from `cuw/base/settings.py` by `python -m cuw.config.docs`; do not edit by hand.",
        "The command line reads them once per run into one settings object and passes it down; a",
        "command-line option, where there is one, wins. Back to the [overview](index.md).",
        "",
        "| variable | meaning |",
        "|---|---|",
    ]
    lines += [f"| `{v.name}` | {v.meaning} |" for v in VARIABLES if v.read]
    lines += ["", "Set by the forge for the processes it starts (read there, never configured):", ""]
    lines += ["| variable | meaning |", "|---|---|"] + [f"| `{v.name}` | {v.meaning} |" for v in VARIABLES if not v.read]
    lines += ["", "Standard variables the forge reads:", "", "| variable | meaning |", "|---|---|"]
    lines += [f"| `{v.name}` | {v.meaning} |" for v in OTHER]
    return "\n".join(lines) + "\n"


def generated() -> dict[Path, str]:
    return {
        DOCS / "recipe-keys.md": recipe_keys(),
        DOCS / "recipe.schema.json": recipe_schema(),
        DOCS / "environment.md": environment(),
    }


def write_pages(pages: dict[Path, str]) -> int:
    """Writes generated pages (each whole or not at all); a page that cannot be written is one
    ``cuw: error:`` line and exit 2, as for a verb."""
    try:
        for path, text in pages.items():
            files.write_text(path, text, "generated page")
            print(f"wrote {path}", file=sys.stderr)
    except CuwError as exc:
        print(f"cuw: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def main() -> int:
    return write_pages(generated())


if __name__ == "__main__":
    sys.exit(main())
