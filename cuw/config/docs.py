"""Generates docs/recipe-keys.md and docs/recipe.schema.json from the recipe dataclasses.

``python -m cuw.config.docs`` rewrites them; a test fails when the committed files drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cuw
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


def generated() -> dict[Path, str]:
    return {DOCS / "recipe-keys.md": recipe_keys(), DOCS / "recipe.schema.json": recipe_schema()}


def main() -> int:
    DOCS.mkdir(exist_ok=True)
    for path, text in generated().items():
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
