"""The package's own tests (``verify.tests``) run against the wheel the forge built.

After the import check, the verify gate brings the tests' source (the recipe's own, or the
pinned tree ``verify.tests.source`` names: a git tag through ``--git-mirror``, an sdist, a
folder; the jobs layer fetches it), takes out of it every top-level package the wheel installs
(so nothing can import the source instead of the wheel), makes a venv that sees the forge's
environment (its torch where the recipe links torch, its pytest), installs the wheel into it
without dependencies and without an index, then the recipe's ``import_requires`` and
``verify.tests.requires``, and runs pytest on the declared paths with the GPUs hidden
(``CUDA_VISIBLE_DEVICES=""``) from the tree's root, within ``verify.tests.timeout_s``. The counts
(passed, failed, errors, skipped) come from pytest's JUnit XML; any failure, error, a run that
collected nothing or one that ran over its time fails the check, naming the tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional

from cuw.base.errors import CuwError
from cuw.base.records import VerifyCheck
from cuw.base.settings import process_environ
from cuw.config.recipe import Recipe, UpstreamTests

CHECK = "tests"
SHOWN_FAILURES = 10
PYTEST = "pytest==9.2.0"
"""The pytest installed into the tests' venv where the forge's environment has none (a per-cell
environment of ``build --matrix`` holds the forge without its test extra)."""
Fetch = Callable[[Path], Path]
"""Puts the tests' source tree at the given (new) folder and returns its root."""


@dataclass(frozen=True)
class Counts:
    """What pytest's JUnit XML says of one run."""

    passed: int
    failed: int
    errors: int
    skipped: int
    failures: list[str]
    """The node ids of the failed and errored tests (``test/test_x.py::test_y[cpu]``)."""

    def as_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "failed": self.failed, "errors": self.errors, "skipped": self.skipped}

    @property
    def line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.errors} errors, {self.skipped} skipped"


def source_label(recipe: Recipe) -> str:
    """Where the tests come from, as the report names it."""
    src = recipe.verify.tests.source
    if src.git is not None:
        return f"{src.git} {src.tag} ({src.commit})"
    if src.pypi is not None:
        return f"sdist {src.pypi}"
    if src.path is not None:
        return f"folder {src.path}"
    own = recipe.source
    return "the recipe's source " + (
        f"sdist {own.pypi}" if own.pypi else f"{own.git} {own.tag}" if own.git else f"folder {own.path}"
    )


def wheel_top_levels(members: list[str]) -> set[str]:
    """The top-level names the wheel installs into site-packages (packages, modules, extension
    modules): what a test could otherwise import from the source tree."""
    tops = set()
    for name in members:
        first = PurePosixPath(name).parts[0] if name else ""
        if not first or first.endswith((".dist-info", ".data")):
            continue
        if "/" in name:
            tops.add(first)
        elif first.endswith(".py"):
            tops.add(first[:-3])
        elif first.endswith((".so", ".pyd")):
            tops.add(first.split(".", 1)[0])
    return tops


def _shadowing(tree: Path, tops: set[str]) -> list[Path]:
    """The entries at the tree's root named like what the wheel installs (``torch_scatter/``,
    ``foo.py``, ``foo.cpython-311-x86_64-linux-gnu.so``)."""
    found = []
    for entry in sorted(tree.iterdir()):
        stem = entry.name.split(".", 1)[0] if entry.is_file() else entry.name
        if stem in tops and (entry.is_dir() or entry.suffix in (".py", ".so", ".pyd")):
            found.append(entry)
    return found


def _site_dirs() -> list[str]:
    """The site-packages of the Python running the forge (a venv's own, or the system's, and the user's)."""
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        dirs.append(user)
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def _pip_env() -> dict[str, str]:
    """pip's environment: this process's (its index configuration), without anything that would
    point the venv's Python elsewhere."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONNOUSERSITE")
    env = {k: v for k, v in process_environ().items() if k not in drop}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _tests_env(venv: Path, home: Path) -> dict[str, str]:
    """pytest's environment: the venv first on PATH, the GPUs hidden, a home and temp folder of its own."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    return env


class _Refused(Exception):
    """A step before pytest could not be done: its one line."""


def _run(cmd: list[str], what: str, log: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1.0), **kwargs)
    except subprocess.TimeoutExpired:
        raise _Refused(f"{what} ran past verify.tests.timeout_s, the time the whole run may take") from None
    log.append(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise _Refused(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc


def make_env(folder: Path, log: list[str], timeout: float) -> Path:
    """A venv without pip that sees the forge's site-packages after its own (its torch, its pytest,
    its pip); its Python."""
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder)], "making the venv", log, timeout)
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = _run([str(python), "-c", where], "the venv's Python", log, timeout, env=_pip_env()).stdout.strip()
    Path(purelib, "_cuw_forge_site.pth").write_text("".join(f"{d}\n" for d in _site_dirs()))
    return python


def parse_junit(path: Path) -> Counts:
    """The counts and the failed tests' node ids of a pytest JUnit XML (xunit1: each case names its file)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    passed = failed = errors = skipped = 0
    failures = []
    for suite in suites:
        for case in suite.iter("testcase"):
            kinds = {child.tag for child in case}
            if "failure" in kinds:
                failed += 1
            if "error" in kinds:
                errors += 1
            if "skipped" in kinds:
                skipped += 1
            if kinds & {"failure", "error"}:
                failures.append(_node_id(case))
            elif not kinds & {"skipped"}:
                passed += 1
    return Counts(passed, failed, errors, skipped, failures)


def _node_id(case: ET.Element) -> str:
    name, classname, file = case.get("name", "?"), case.get("classname", ""), case.get("file")
    if not file:
        return f"{classname}::{name}" if classname else name
    owner = classname.rsplit(".", 1)[-1] if classname else ""
    inner = f"{owner}::" if owner and owner != PurePosixPath(file).stem else ""
    return f"{file}::{inner}{name}"


PYTEST_EXIT = {
    2: "interrupted (a collection error?)",
    3: "pytest's internal error",
    4: "pytest's usage error",
    5: "collected no tests",
}

_RUNNER = "import sys\nimport pytest\n\nsys.exit(pytest.main(sys.argv[1:]))\n"


def _pytest(
    python: Path, tree: Path, tests: UpstreamTests, work: Path, deadline: float, log: list[str]
) -> tuple[int, Optional[Path]]:
    """pytest over the declared paths from the tree's root, its own process group, killed at the
    deadline: its exit code (None past the deadline) and the JUnit XML it wrote."""
    runner = work / "runner"
    runner.mkdir()
    # pytest looks for its configuration up from the tests: a tree without one stops here, at an
    # empty one, never at a pytest.ini some other run left in a folder above.
    (work / "pytest.ini").write_text("[pytest]\n")
    (runner / "cuw_run_pytest.py").write_text(_RUNNER)  # sys.path[0] is this folder, not the tree
    junit = work / "junit.xml"
    cmd = [str(python), str(runner / "cuw_run_pytest.py"), *tests.paths, "-p", "no:cacheprovider", "-q", "-rfE"]
    cmd += [f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    for node in tests.deselect:
        cmd += ["--deselect", node]
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env=_tests_env(python.parent.parent, work / "home"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its children (a DataLoader's workers) are stopped with it
    )
    try:
        out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        log.append(f"$ {' '.join(cmd)}\n{out}")
        return -1, None
    log.append(f"$ {' '.join(cmd)}\n{out}")
    return proc.returncode, junit if junit.is_file() else None


def _test_env(wheel: Path, extra: list[str], work: Path, deadline: float, log: list[str], summary: dict[str, Any]) -> Path:
    """A venv under ``work`` with ``wheel`` installed, then ``extra``, and pytest (the forge's pin, from
    the index, where the environment has none); its Python."""
    python = make_env(work / "venv", log, deadline - time.monotonic())
    pip = [str(python), "-m", "pip", "install", "-q", "--no-compile"]
    wheel_cmd = [*pip, "--no-deps", "--no-index", "--ignore-installed", str(wheel)]
    _run(wheel_cmd, f"installing {wheel.name}", log, deadline - time.monotonic(), env=_pip_env())
    if extra:
        _run([*pip, *extra], f"installing {' '.join(extra)}", log, deadline - time.monotonic(), env=_pip_env())
    if _probe(python).returncode != 0:  # the environment has no pytest: the forge's pin, from the index
        said = f"installing {PYTEST} (the environment has no pytest)"
        _run([*pip, "--ignore-installed", PYTEST], said, log, deadline - time.monotonic(), env=_pip_env())
        summary["pytest"] = PYTEST
    return python


def run_tests(
    wheel: Path,
    members: list[str],
    recipe: Recipe,
    requires: list[str],
    fetch: Fetch,
    work: Path,
    log: list[str],
) -> tuple[VerifyCheck, Optional[dict[str, Any]]]:
    """The recipe's upstream tests against ``wheel`` (its member names: what it installs), in
    ``work`` (an empty folder); ``requires``: the import check's requirements, installed first.
    The check and the counts the verify report carries (None when pytest did not report)."""
    tests = recipe.verify.tests
    started = time.monotonic()
    deadline = started + tests.timeout_s
    where = f"{', '.join(tests.paths)} from {source_label(recipe)}"
    summary: dict[str, Any] = {"paths": list(tests.paths), "source": source_label(recipe), "timeout_s": tests.timeout_s}
    try:
        try:
            tree = fetch(work / "src")
        except CuwError as exc:
            raise _Refused(f"the tests' source could not be had: {exc}") from None
        missing = [p for p in tests.paths if not (tree / p).exists()]
        if missing:
            raise _Refused(f"verify.tests.paths {', '.join(missing)} not in {source_label(recipe)}: name what is there")
        for entry in _shadowing(tree, wheel_top_levels(members)):  # tests import the wheel, never the source
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        python = _test_env(wheel, [*requires, *tests.requires], work, deadline, log, summary)
        rc, junit = _pytest(python, tree, tests, work, deadline, log)
    except _Refused as exc:
        return VerifyCheck(CHECK, False, [f"upstream tests ({where}) not run: {exc}"]), None
    seconds = round(time.monotonic() - started, 1)
    if rc == -1:
        said = f"ran over verify.tests.timeout_s ({tests.timeout_s} s) and was stopped"
        return VerifyCheck(CHECK, False, [f"upstream tests ({where}) {said}", *_tail(log)]), None
    if junit is None:
        return VerifyCheck(CHECK, False, [f"upstream tests ({where}): pytest wrote no report (exit {rc})", *_tail(log)]), None
    counts = parse_junit(junit)
    summary.update(counts.as_json(), seconds=seconds, exit=rc)
    line = f"upstream tests ({where}): {counts.line} in {seconds:g} s"
    if rc == 0 and counts.passed and not counts.failures:
        return VerifyCheck(CHECK, True, [line]), summary
    why = [line]
    if counts.failures:  # first: the line the verify gate's verdict shows names them
        shown = counts.failures[:SHOWN_FAILURES]
        more = len(counts.failures) - len(shown)
        why.insert(0, f"upstream tests failed: {', '.join(shown)}" + (f" and {more} more" if more else ""))
    if rc in PYTEST_EXIT:
        why.append(f"pytest: {PYTEST_EXIT[rc]}")
        why += _tail(log)
    elif not counts.passed and not counts.failures:
        why.append("no test passed: a suite that runs nothing proves nothing (check verify.tests.paths and deselect)")
    return VerifyCheck(CHECK, False, why), summary


def _probe(python: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", "import pytest"], capture_output=True, text=True, env=_pip_env(), timeout=120)


def _tail(log: list[str], lines: int = 6) -> list[str]:
    """The last lines pytest printed: where a collection error or a crash says what it was."""
    last = [line.strip() for line in (log[-1] if log else "").splitlines() if line.strip()]
    return last[-lines:]
