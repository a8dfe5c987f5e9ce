"""The package's architecture, held by import-linter's contracts in pyproject.toml.

``cuw/`` is layered (cli > tools > ci > jobs > wheel > gates > seat > partition > config >
toolchain > base): a layer imports only the layers below it, and no two modules of a layer
import each other in a cycle. The seat's per-call runtime stays import-light.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contract can fail: a copy of the package where the base imports the CLI breaks it."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "cuw", copy / "cuw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    with open(copy / "cuw" / "base" / "files.py", "a") as fh:
        fh.write("\nimport cuw.cli.main  # noqa: E402\n")
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=copy,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cuw.base is not allowed to import cuw.cli" in proc.stdout


def test_the_seat_runtime_imports_only_the_standard_library_and_its_layers():
    """Every compile starts a Python on the seat: its runtime must not pull yaml, packaging or
    the jobs in (``python -IS``, no site-packages, as the seat script runs)."""
    code = (
        "import sys; sys.path.insert(0, %r); import cuw.seat.runtime; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('cuw'))))" % str(REPO)
    )
    proc = subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    allowed = {
        "cuw",
        "cuw.base",
        "cuw.base.errors",
        "cuw.base.shard_spec",
        "cuw.config",
        "cuw.config.limits",
        "cuw.partition",
        "cuw.partition.globs",
        "cuw.partition.rules",
        "cuw.seat",
        "cuw.seat.runtime",
        "cuw.toolchain",
        "cuw.toolchain.nvcc_args",
    }
    assert loaded <= allowed, sorted(loaded - allowed)


def test_every_module_says_what_it_owns():
    import ast

    missing = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "cuw").rglob("*.py"))
        if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert missing == [], f"modules without a docstring: {missing}"


def test_the_code_lints_clean():
    """ruff's rules in pyproject.toml ([tool.ruff.lint]) over the package, the tests and the front ends."""
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run(
        [str(ruff), "check", "--no-cache", "cuw", "tests", "noxfile.py", "tasks.py"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_lint_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ndef f(x=[]):\n    return undefined_name\n")
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run(
        [str(ruff), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"), str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 1 and all(code in proc.stdout for code in ("F401", "B006", "F821")), proc.stdout


def test_the_layout_page_names_every_module_in_its_layers_row():
    """docs/layout.md's map names each module of cuw/ in the row of its folder, and no module that is
    not there (it once missed 27 of 92, the newest first)."""
    import re

    text = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `cuw/(\w+)/` \| (.*?) \| .*? \|$", text, re.M))
    layers = {p.name for p in (REPO / "cuw").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert set(rows) == layers, (sorted(rows), sorted(layers))
    for layer, owns in rows.items():
        named = set(re.findall(r"`(\w+\.(?:py|c))`", owns))
        actual = {p.name for p in (REPO / "cuw" / layer).iterdir() if p.suffix in (".py", ".c") and p.name != "__init__.py"}
        assert named == actual, f"cuw/{layer}/: the page lacks {sorted(actual - named)}, names {sorted(named - actual)} not there"
    assert "`cuw/__main__.py`" in text
