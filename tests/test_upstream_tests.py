"""A package's own tests as a verify step (``verify.tests``, cuw/wheel/upstream_tests.py).

The example declares its package/tests folder; the suite's one example build (``example_cell``)
ran it in its link's verify gate. The variants here run the same mechanism on a copy of that
wheel against changed test folders: a failing test fails verify naming it, a package folder in
the tests' tree cannot stand in for the wheel, a run over its time is stopped with its children,
a suite that collects nothing fails. The torch_scatter declaration is checked against the pinned
snapshot in ../shared/sources (its build and its 1,300 tests are the e2e tier's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import BuiltCell, recorded_example, run_cuw, run_settings, shared_sources
from cuw.base.errors import InputError
from cuw.base.records import VerifyCheck
from cuw.config.recipe import Recipe, load_recipe
from cuw.jobs.tests_source import upstream_fetch
from cuw.wheel import upstream_tests

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_TESTS = REPO / "recipes" / "example" / "package" / "tests"


# -- the example cell's verify ran its tests ------------------------------------------------------


def test_the_example_link_ran_its_own_tests_and_the_record_carries_the_counts(example_cell: BuiltCell, tmp_path: Path) -> None:
    wheel = example_cell.wheel
    report = json.loads(wheel.with_name(wheel.name + ".verify.json").read_text())
    names = [c["name"] for c in report["checks"]]
    assert names.index("tests") == names.index("import") + 1  # after the import check
    check = next(c for c in report["checks"] if c["name"] == "tests")
    assert check["ok"], check
    # 9 TUs + the dispatch order + build_info + the launch with GPUs hidden pass; the GPU launch skips.
    assert report["tests"] | {"seconds": 0} == {
        "paths": ["tests"],
        "source": "the recipe's source folder package",
        "timeout_s": 300,
        "passed": 12,
        "failed": 0,
        "errors": 0,
        "skipped": 1,
        "exit": 0,
        "seconds": 0,
    }
    assert "12 passed, 0 failed, 0 errors, 1 skipped" in check["details"][0]
    # The build record carries them.
    recorded = recorded_example(example_cell, tmp_path / "dist")
    record = json.loads(recorded.with_name(recorded.name + ".build.json").read_text())
    assert record["verify"]["tests"] == report["tests"]
    assert {"name": "tests", "ok": True} in record["verify"]["checks"]


# -- variants on a copy of the example's wheel and recipes ----------------------------------------


def _recipes_with(example_cell: BuiltCell, tmp_path: Path, tests: dict[str, str], block: str = "") -> Path:
    """A copy of the example cell's recipes whose example package's tests folder holds ``tests``
    (name -> text) besides its own, and whose verify.tests is ``block`` when given."""
    recipes = tmp_path / "recipes"
    shutil.copytree(example_cell.recipes, recipes, symlinks=True)
    folder = recipes / "example" / "package" / "tests"
    for name, text in tests.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    if block:
        path = recipes / "example" / "recipe.yml"
        text = re.sub(r"(?ms)^  tests:\n(    .*?\n)+", block, path.read_text(), count=1)
        assert block in text
        path.write_text(text)
    return recipes


def _run(example_cell: BuiltCell, recipe: Recipe, tmp_path: Path) -> tuple[VerifyCheck, dict | None]:
    fetch = upstream_fetch(recipe, run_settings())
    assert fetch is not None
    work = tmp_path / "work"
    work.mkdir()
    members = zipfile.ZipFile(example_cell.wheel).namelist()
    return upstream_tests.run_tests(example_cell.wheel, members, recipe, [], fetch, work, [])


FAILING = """
import cuw_example


def test_a_weight_the_library_does_not_have():
    assert cuw_example.tu_values()["k03"] == 3005
"""


def test_a_failing_upstream_test_fails_verify_naming_it(example_cell: BuiltCell, tmp_path: Path) -> None:
    recipes = _recipes_with(example_cell, tmp_path, {"test_broken.py": FAILING})
    wheel = tmp_path / example_cell.wheel.name
    shutil.copy2(example_cell.wheel, wheel)
    proc = run_cuw("verify", str(wheel), "--recipes", str(recipes))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    named = "tests/test_broken.py::test_a_weight_the_library_does_not_have"
    verdict = [line for line in proc.stderr.splitlines() if "verify gate FAIL" in line]
    assert verdict and named in verdict[0] and verdict[0].count(": ") >= 2, proc.stderr
    report = json.loads(wheel.with_name(wheel.name + ".verify.json").read_text())
    assert not report["ok"]
    assert [c["name"] for c in report["checks"] if not c["ok"]] == ["tests"]
    assert (report["tests"]["passed"], report["tests"]["failed"], report["tests"]["skipped"]) == (12, 1, 1)


SHADOW = """
import cuw_example


def test_the_package_is_the_installed_wheel():
    assert "site-packages" in cuw_example.__file__, cuw_example.__file__
"""


def test_a_package_folder_in_the_tests_tree_cannot_stand_in_for_the_wheel(example_cell: BuiltCell, tmp_path: Path) -> None:
    # A folder named like the wheel's package at the tree's root (the cwd pytest runs in): were it
    # left there, ``import cuw_example`` would find it and fail.
    recipes = _recipes_with(example_cell, tmp_path, {"test_shadow.py": SHADOW})
    planted = recipes / "example" / "package" / "cuw_example"
    planted.mkdir()
    (planted / "__init__.py").write_text("raise ImportError('the source tree, not the wheel')\n")
    block = "  tests:\n    paths: [tests/test_shadow.py]\n    timeout_s: 300\n"
    path = recipes / "example" / "recipe.yml"
    path.write_text(re.sub(r"(?ms)^  tests:\n(    .*?\n)+", block, path.read_text(), count=1))
    check, counts = _run(example_cell, load_recipe("example", recipes), tmp_path)
    assert check.ok, check.details
    assert counts is not None and (counts["passed"], counts["failed"]) == (1, 0)
    assert upstream_tests.wheel_top_levels(zipfile.ZipFile(example_cell.wheel).namelist()) == {"cuw_example"}


SLEEPER = """
import os
import subprocess
import sys
import time


def test_that_never_ends():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["CUW_TEST_PIDS"], "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
    time.sleep(600)
"""


def test_a_run_over_its_time_is_stopped_with_its_children(example_cell: BuiltCell, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    sleeper = SLEEPER.replace('os.environ["CUW_TEST_PIDS"]', repr(str(pids)))  # pytest's environment is its own
    block = "  tests:\n    paths: [tests/test_sleeper.py]\n    timeout_s: 15\n"
    recipes = _recipes_with(example_cell, tmp_path, {"test_sleeper.py": sleeper}, block)
    started = time.monotonic()
    check, counts = _run(example_cell, load_recipe("example", recipes), tmp_path)
    assert time.monotonic() - started < 120
    assert not check.ok and counts is None
    assert "verify.tests.timeout_s" in check.details[0], check.details
    if pids.is_file():  # pytest got as far as the test: it and the test's own child were killed
        for pid in map(int, pids.read_text().split()):
            for _ in range(50):
                if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"process {pid} of the stopped test run is still running")


def test_a_suite_that_collects_nothing_fails(example_cell: BuiltCell, tmp_path: Path) -> None:
    block = "  tests:\n    paths: [tests/empty]\n    timeout_s: 300\n"
    recipes = _recipes_with(example_cell, tmp_path, {"empty/README.md": "no tests here\n"}, block)
    check, counts = _run(example_cell, load_recipe("example", recipes), tmp_path)
    assert not check.ok
    assert counts is not None and counts["passed"] == 0
    assert any("collected no tests" in d for d in check.details), check.details


def test_an_environment_without_pytest_gets_the_forges_pin(
    example_cell: BuiltCell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A per-cell environment holds the forge without its test extra. Here the venv is told it has
    # no pytest (this interpreter's own site has one): the forge's pin is installed into the venv
    # itself, from the index, and the tests run with it.
    probes: list[Path] = []
    real = upstream_tests._probe

    def no_pytest_at_first(python: Path) -> Any:
        probes.append(python)
        if len(probes) == 1:
            return subprocess.CompletedProcess([str(python)], 1, "", "ModuleNotFoundError: No module named 'pytest'")
        return real(python)

    monkeypatch.setattr(upstream_tests, "_probe", no_pytest_at_first)
    check, counts = _run(example_cell, load_recipe("example", example_cell.recipes), tmp_path)
    assert check.ok, check.details
    assert counts is not None and counts["pytest"] == upstream_tests.PYTEST and counts["passed"] == 12
    version = upstream_tests.PYTEST.split("==")[1]
    assert list((tmp_path / "work" / "venv").glob(f"lib/python3*/site-packages/pytest-{version}.dist-info")), "not in the venv"


def test_tests_whose_source_cannot_be_had_fail_the_check_naming_why(example_cell: BuiltCell, tmp_path: Path) -> None:
    recipe = load_recipe("example", example_cell.recipes)

    def unreachable(dest: Path) -> Path:
        raise InputError("git mirror /nowhere: no such file or folder")

    members = zipfile.ZipFile(example_cell.wheel).namelist()
    check, counts = upstream_tests.run_tests(example_cell.wheel, members, recipe, [], unreachable, tmp_path, [])
    assert not check.ok and counts is None
    assert "not run: the tests' source could not be had: git mirror /nowhere" in check.details[0]


# -- the recipe key --------------------------------------------------------------------------------


def _load_with(tmp_path: Path, block: str) -> Recipe:
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    path = recipes / "example" / "recipe.yml"
    text = re.sub(r"(?ms)^  tests:\n(    .*?\n)+", block, path.read_text(), count=1)
    assert block in text
    path.write_text(text)
    return load_recipe("example", recipes)


GIT = (
    "    source:\n      git: https://github.com/rusty1s/pytorch_scatter.git\n      tag: '2.1.2'\n"
    "      commit: 140d3ad677aae615767412873b90982cbf97d35d\n"
)


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ("  tests:\n    timeout_s: 60\n", "verify.tests.paths names no tests"),
        ("  tests:\n    paths: [../other]\n", "verify.tests.paths: '../other' is not a path inside the tests' source"),
        ("  tests:\n    paths: [/abs/tests]\n", "verify.tests.paths: '/abs/tests' is not a path inside"),
        ("  tests:\n    paths: [nowhere]\n", "verify.tests.paths: 'nowhere' is not in"),
        ("  tests:\n    paths: [tests]\n    requires: [numpy]\n", "verify.tests.requires 'numpy' is not pinned"),
        ("  tests:\n    paths: [tests]\n    requires: ['numpy>=1']\n", "verify.tests.requires 'numpy>=1' is not pinned"),
        ("  tests:\n    paths: [tests]\n    timeout_s: 0\n", "verify.tests.timeout_s must be from 1 to 21600"),
        ("  tests:\n    paths: [tests]\n    deselect: ['../x.py::t']\n", "verify.tests.deselect: '../x.py' is not a path"),
        ("  tests:\n    paths: [tests]\n    sources: {}\n", "unknown key 'sources'; did you mean 'source'?"),
        (
            "  tests:\n    paths: [test]\n" + GIT.replace("      commit: 140d3ad677aae615767412873b90982cbf97d35d\n", ""),
            "verify.tests.source.commit None must be the commit verify.tests.source.tag names",
        ),
        (
            "  tests:\n    paths: [test]\n" + GIT.replace("https://github.com/rusty1s/pytorch_scatter.git", "--upload-pack=x"),
            "verify.tests.source.git '--upload-pack=x' is not a repository URL",
        ),
        (
            "  tests:\n    paths: [test]\n" + GIT + "      archive_sha256: abc\n",
            "verify.tests.source.archive_sha256 'abc' is not a sha256",
        ),
        ("  tests:\n    paths: [tests]\n    source: {path: ../../..}\n", "verify.tests.source.path '../../..' leads outside"),
    ],
)
def test_a_wrong_verify_tests_key_is_refused_naming_it(tmp_path: Path, block: str, said: str) -> None:
    with pytest.raises(Exception) as caught:
        _load_with(tmp_path, block)
    message = str(caught.value)
    assert said in message and "recipe.yml" in message, message


def test_a_wrong_key_is_one_line_and_exit_2_on_the_command_line(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    path = recipes / "example" / "recipe.yml"
    path.write_text(path.read_text().replace("    paths: [tests]\n", "    paths: [tests]\n    requires: [pytest]\n", 1))
    proc = run_cuw("show", "example", "--recipes", str(recipes))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuw: error: ") and "verify.tests.requires 'pytest' is not pinned" in lines[0]


def test_a_declared_source_of_tests_loads_and_a_folder_of_them_is_checked(tmp_path: Path) -> None:
    recipe = _load_with(tmp_path, "  tests:\n    paths: [test]\n" + GIT + "      archive_sha256: '" + "0" * 64 + "'\n")
    assert recipe.verify.tests.source.tag == "2.1.2" and recipe.source.path == "package"  # the build's source stays
    assert upstream_tests.source_label(recipe).startswith("https://github.com/rusty1s/pytorch_scatter.git 2.1.2")
    assert upstream_fetch(load_recipe("example_torch", REPO / "recipes"), run_settings()) is None  # declares none


# -- pytest's report read --------------------------------------------------------------------------


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="6">
<testcase classname="test.test_scatter" name="test_forward[cpu-sum]" file="test/test_scatter.py" line="3"/>
<testcase classname="test.test_scatter" name="test_backward[cpu]" file="test/test_scatter.py" line="9">
  <failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="test.composite.test_std.TestStd" name="test_std" file="test/composite/test_std.py" line="4">
  <error message="fixture 'x' not found">trace</error></testcase>
<testcase classname="test.test_multi_gpu" name="test_multi_gpu[cuda]" file="test/test_multi_gpu.py" line="1">
  <skipped type="pytest.skip" message="no GPU">skip</skipped></testcase>
<testcase classname="test.test_x" name="test_xfail" file="test/test_x.py" line="1">
  <skipped type="pytest.xfail" message="known">xfail</skipped></testcase>
<testcase classname="test.test_x" name="test_ok" file="test/test_x.py" line="2"/>
</testsuite></testsuites>
"""


def test_junit_counts_and_failed_node_ids(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    counts = upstream_tests.parse_junit(path)
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == (2, 1, 1, 2)
    assert counts.failures == ["test/test_scatter.py::test_backward[cpu]", "test/composite/test_std.py::TestStd::test_std"]


# -- torch_scatter's tests: the pinned snapshot of its tag ----------------------------------------


@pytest.mark.needs("shared-sources")
def test_torch_scatter_tests_come_from_the_pinned_snapshot_through_the_git_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = load_recipe("torch_scatter", REPO / "recipes")
    tests = recipe.verify.tests
    assert tests.paths == ["test"] and tests.source.tag == "2.1.2"
    assert tests.source.commit == "140d3ad677aae615767412873b90982cbf97d35d"
    assert recipe.source.pypi == "torch-scatter==2.1.2"  # the build's own source stays the sdist
    monkeypatch.setenv("CUW_GIT_MIRROR", str(shared_sources()))
    fetch = upstream_fetch(recipe, run_settings())
    assert fetch is not None
    tree = fetch(tmp_path / "src")
    found = sorted(p.relative_to(tree).as_posix() for p in (tree / "test").rglob("test_*.py"))
    assert "test/test_scatter.py" in found and "test/composite/test_softmax.py" in found and len(found) == 9
    # The tree's torch_scatter/ (the sdist's package, without its compiled modules) is what the run takes out.
    assert upstream_tests._shadowing(tree, {"torch_scatter"}) == [tree / "torch_scatter"]
    # Another tarball under the snapshot's name is refused by its pin.
    other = tmp_path / "mirror"
    other.mkdir()
    (other / "pytorch_scatter-2.1.2.tar.gz").write_bytes(b"\x1f\x8b not the snapshot")
    monkeypatch.setenv("CUW_GIT_MIRROR", str(other))
    refetch = upstream_fetch(recipe, run_settings())
    assert refetch is not None
    with pytest.raises(InputError, match="pins verify.tests.source.archive_sha256"):
        refetch(tmp_path / "src2")


def test_pytest_runs_with_the_gpus_hidden_and_a_home_of_its_own(tmp_path: Path) -> None:
    env = upstream_tests._tests_env(tmp_path / "venv", tmp_path / "home")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["PATH"].startswith(str(tmp_path / "venv" / "bin"))
    assert "PYTHONPATH" not in env and env["HOME"] == str(tmp_path / "home") and os.path.isdir(env["TMPDIR"])
