"""The recipe docs and JSON schema are generated from the dataclasses and cannot drift."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from conftest import REPO
from cuw.config.docs import generated, recipe_schema


@pytest.mark.parametrize("path", sorted(generated()), ids=lambda p: p.name)
def test_committed_docs_match_the_code(path):
    assert path.read_text() == generated()[path], "run: python -m cuw.config.docs"


def _errors(instance: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [e.message for e in validator.iter_errors(instance)]


def test_every_shipped_recipe_validates_against_the_schema():
    schema = json.loads(recipe_schema())
    for path in sorted((REPO / "recipes").glob("*/recipe.yml")):
        assert _errors(yaml.safe_load(path.read_text()), schema) == [], path
    assert _errors({"name": "x", "links_torch": False, "source": {}, "backend": "cmake"}, schema)
    assert "'shardng' was unexpected" in " ".join(
        _errors({"name": "x", "links_torch": False, "source": {}, "backend": "scikit-build-core", "shardng": {}}, schema)
    )
