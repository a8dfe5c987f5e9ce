"""The recipe docs and JSON schema are generated from the dataclasses, the CLI reference from the parser:
none can drift."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from conftest import REPO
from cuw.cli import reference
from cuw.config.docs import generated, recipe_schema


@pytest.mark.parametrize("path", sorted(generated()), ids=lambda p: p.name)
def test_committed_docs_match_the_code(path):
    assert path.read_text() == generated()[path], "run: python -m cuw.config.docs"


def test_the_cli_reference_matches_the_parser():
    assert reference.CLI_MD.read_text() == reference.reference(), "run: python -m cuw.cli.reference"


def test_the_cli_reference_names_every_verb_option_and_choice():
    """What the reference is for: a reader finds each verb's every flag, its choices and its default."""
    text = reference.reference()
    verbs, _ = reference._verbs(reference.parser())
    for verb, p in verbs.items():
        section = text.split(f"\n## cuw {verb}\n", 1)[1].split("\n## ", 1)[0]
        for action in p._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in section, (verb, flag)
            for choice in action.choices or ():
                assert f"`{choice}`" in section, (verb, action.dest, choice)
    assert "| `--work` | `WORK` | `.cuw/work` |" in text
    assert "&lt;name&gt;.git" in text and "<name>" not in text, "angle brackets stay visible"


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
