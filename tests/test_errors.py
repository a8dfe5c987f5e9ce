"""The error kinds carry their exit codes, and docs/verbs.md's exit-code table lists them as they are."""

from __future__ import annotations

import inspect
import re

import pytest

from conftest import REPO
from cuw.base import errors
from cuw.base.errors import CuwError, InputError, OutputError, ToolError


def _table() -> dict[str, int]:
    """``class -> exit`` from the rows of the table in docs/verbs.md that name a class."""
    text = (REPO / "docs" / "verbs.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes and errors", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (?:`(\w+)`)? \|", section, re.M)
    assert rows, "no exit-code table in docs/verbs.md"
    return {name: int(code) for code, name in rows if name}


def test_the_documented_table_is_the_classes_exit_codes():
    kinds = {
        name: cls.exit_code
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if cls.__module__ == errors.__name__ and issubclass(cls, (CuwError, SystemExit))
    }
    assert _table() == kinds


def test_every_kind_is_a_cuw_error_and_output_is_an_os_error():
    assert all(issubclass(kind, CuwError) and kind.exit_code == 2 for kind in (InputError, ToolError, OutputError))
    assert issubclass(OutputError, OSError) and str(OutputError("standard output is closed")) == "standard output is closed"


def test_a_bad_option_value_is_an_input_error():
    from cuw.cli.parser import parse

    with pytest.raises(InputError, match=r"shard: argument --cache-tool: invalid choice: 'nosuch'"):
        parse(["shard", "example", "1/2", "--cache-tool", "nosuch"])
    with pytest.raises(InputError, match="matrix: unrecognized arguments: --frobnicate"):
        parse(["matrix", "--frobnicate"])


def test_a_bad_recipe_and_a_bad_policy_value_are_input_errors(tmp_path):
    from cuw.config.limits import check_count
    from cuw.config.recipe import load_recipe

    with pytest.raises(InputError, match="unknown recipe 'nosuch'"):
        load_recipe("nosuch", REPO / "recipes")
    with pytest.raises(InputError, match="1..255"):
        check_count(256, "--shards")


def test_a_toolkit_that_cannot_run_is_a_tool_error(tmp_path):
    from cuw.toolchain.toolkit import _version_of

    broken = tmp_path / "nvcc"
    broken.write_text("not a program")
    with pytest.raises(ToolError, match="cannot run"):
        _version_of(str(broken))
