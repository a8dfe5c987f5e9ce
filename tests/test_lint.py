"""`nox -s lint`'s checks in the default tests: mypy's settings catch a type error ([tool.mypy]; mypy over
the whole of cuw/ is the lint session's, about 25 s cold), shellcheck over every shell script the session
finds, codespell ([tool.codespell]). ruff's rules are held by tests/test_layers.py; CI runs the whole
session (.ci/run, ci.yml)."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@functools.cache
def _noxfile() -> ModuleType:
    """The noxfile, whose lint session says what is linted (loaded by path: it is not a package;
    once: loading it again registers its sessions again)."""
    spec = importlib.util.spec_from_file_location("cuw_noxfile", REPO / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mypy(*args: str) -> subprocess.CompletedProcess:
    # The checkout's .mypy_cache, as `nox -s lint` leaves it: incremental mode re-checks what changed
    # (by hash), so a warm cache answers the same as a cold one, in seconds instead of a minute.
    return subprocess.run([str(BIN / "mypy"), *args], cwd=REPO, capture_output=True, text=True)


def test_a_type_error_is_caught(tmp_path):
    """mypy under the project's settings fails on a wrong type and on an unannotated function."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n\n\ndef g(y):\n    return y\n")
    proc = _mypy(str(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[return-value]" in proc.stdout and "[no-untyped-def]" in proc.stdout, proc.stdout


def test_the_shell_scripts_pass_shellcheck():
    scripts = _noxfile().shell_scripts()
    assert {".ci/run", ".github/scripts/install-cuda.sh"} <= set(scripts), scripts
    proc = subprocess.run([str(BIN / "shellcheck"), *scripts], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_can_fail(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/build\n")
    proc = subprocess.run([str(BIN / "shellcheck"), str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "SC2086" in proc.stdout, proc.stdout


def test_the_spelling_is_clean():
    proc = subprocess.run([str(BIN / "codespell"), *_noxfile().SPELLED_PATHS], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
