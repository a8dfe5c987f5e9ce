"""The build's front end (cuw/jobs/frontend.py): the backend a project names, its build_wheel hook run
in one child, and the one-line refusals. Real hooks in real children; the example's own builds run
through it in every shard and link test."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path
from typing import Mapping

import pytest

from cuw.base.errors import InputError
from cuw.jobs.frontend import LEGACY_BACKEND, BuildSystem, build_system, build_wheel

SETUP_PY = "from setuptools import setup\nsetup(name='tiny', version='1.0', py_modules=['tiny'])\n"

# An in-tree backend (backend-path): setuptools' hooks, and a mark that this module was the one run.
IN_TREE = """
import os
from setuptools import build_meta as _sb
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    open(os.path.join(wheel_directory, "in-tree-ran"), "w").close()
    return _sb.build_wheel(wheel_directory, config_settings, metadata_directory)
"""


def _project(root: Path, pyproject: str | None, extra: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "setup.py").write_text(SETUP_PY)
    (root / "tiny.py").write_text("X = 1\n")
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    for rel, text in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


class Runs:
    """A hook runner as the job's (cuw.jobs.process.build), recording each call; output to ``log``,
    the front end's own lines to ``notes``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.calls: list[tuple[list[str], str]] = []
        self.notes: list[str] = []

    def build(self, project: Path, dist: Path) -> int:
        return build_wheel(project, dist, build_system(project), self, self.notes.append)

    def __call__(self, cmd: list[str], cwd: str, hook_env: Mapping[str, str]) -> int:
        self.calls.append((cmd, cwd))
        with open(self.log, "ab") as fh:
            return subprocess.run(cmd, cwd=cwd, env={**os.environ, **hook_env}, stdout=fh, stderr=subprocess.STDOUT).returncode


def test_a_setup_py_project_builds_the_legacy_way_in_one_hook_child(tmp_path):
    """No pyproject.toml, or one without build-backend: setuptools' legacy backend (PEP 517's fallback,
    as pip builds it); one child runs build_wheel, in the project folder, and nothing else."""
    for name, pyproject in (("none", None), ("requires-only", '[build-system]\nrequires = ["setuptools"]\n')):
        project = _project(tmp_path / name, pyproject)
        system = build_system(project)
        assert system == BuildSystem(LEGACY_BACKEND, None)
        runs = Runs(tmp_path / f"{name}.log")
        assert runs.build(project, tmp_path / name / "dist") == 0, runs.log.read_text()
        assert runs.notes == []
        (wheel,) = (tmp_path / name / "dist").glob("*.whl")
        assert wheel.name == "tiny-1.0-py3-none-any.whl"
        assert "tiny.py" in zipfile.ZipFile(wheel).namelist()
        ((cmd, cwd),) = runs.calls
        assert cmd[-2] == "build_wheel" and cwd == str(project)


def test_an_in_tree_backend_on_its_backend_path_is_the_one_run(tmp_path):
    project = _project(
        tmp_path / "p",
        '[build-system]\nrequires = []\nbuild-backend = "local_backend"\nbackend-path = ["_build"]\n',
        {"_build/local_backend.py": IN_TREE},
    )
    system = build_system(project)
    assert system == BuildSystem("local_backend", ["_build"])
    dist = tmp_path / "dist"
    assert Runs(tmp_path / "log").build(project, dist) == 0
    assert (dist / "in-tree-ran").is_file() and len(list(dist.glob("*.whl"))) == 1


def test_a_backend_that_cannot_be_imported_or_has_no_build_wheel_is_named(tmp_path):
    project = _project(tmp_path / "p", '[build-system]\nbuild-backend = "no_such_backend_here"\n')
    runs = Runs(tmp_path / "log")
    assert runs.build(project, tmp_path / "dist") == 1
    assert runs.notes == [
        "the build backend 'no_such_backend_here' cannot be imported here "
        "(ModuleNotFoundError: No module named 'no_such_backend_here')"
    ]
    project = _project(
        tmp_path / "q", '[build-system]\nbuild-backend = "hollow"\nbackend-path = ["."]\n', {"hollow.py": "X = 1\n"}
    )
    runs = Runs(tmp_path / "hollow.log")
    assert runs.build(project, tmp_path / "dist") == 1 and runs.notes == []
    assert "module 'hollow' has no attribute 'build_wheel'" in runs.log.read_text()


def test_a_backend_that_fails_gives_its_exit_code_and_its_traceback_to_the_log(tmp_path):
    project = _project(
        tmp_path / "p",
        '[build-system]\nbuild-backend = "broken"\nbackend-path = ["."]\n',
        {
            "broken.py": "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
            "    raise SystemExit('broken: the compiler said no')\n"
        },  # fmt: skip
    )
    runs = Runs(tmp_path / "log")
    assert runs.build(project, tmp_path / "dist") == 1 and runs.notes == []
    assert "broken: the compiler said no" in runs.log.read_text()
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_the_backends_warnings_are_noted_for_the_log_not_shown(tmp_path, recwarn):
    """The hook caller hands a backend's warnings back to the front end: they go to ``note`` (the job's
    build log), not to the job's terminal (torch warns about NumPy on every import without it)."""
    backend = (
        "import warnings\nfrom setuptools import build_meta as _sb\n"
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
        "    warnings.warn('numpy is missing', UserWarning)\n"
        "    return _sb.build_wheel(wheel_directory, config_settings, metadata_directory)\n"
    )
    project = _project(
        tmp_path / "p", '[build-system]\nbuild-backend = "warns"\nbackend-path = ["_b"]\n', {"_b/warns.py": backend}
    )
    runs = Runs(tmp_path / "log")
    assert runs.build(project, tmp_path / "dist") == 0
    (line,) = runs.notes
    assert line.startswith("warning from the build backend: ") and line.endswith("warns.py:4: numpy is missing")
    assert not [w for w in recwarn.list if "numpy is missing" in str(w.message)]


@pytest.mark.parametrize(
    "text, says",
    [
        ("[build-system\n", "not valid TOML"),
        ("build-system = 3\n", "build-system is a int, not a table"),
        ("[build-system]\nbuild-backend = 7\n", "build-system.build-backend must name a module"),
        ('[build-system]\nbuild-backend = "  "\n', "build-system.build-backend must name a module"),
        ('[build-system]\nbuild-backend = "b"\nbackend-path = "."\n', "build-system.backend-path must be a list"),
        ('[build-system]\nbuild-backend = "b"\nbackend-path = [""]\n', "build-system.backend-path must be a list"),
        ('[build-system]\nbuild-backend = "b"\nbackend-path = ["../.."]\n', "backend-path '../..' is outside the project"),
        ('[build-system]\nbuild-backend = "b"\nbackend-path = ["/usr/lib"]\n', "backend-path '/usr/lib' is outside the project"),
        (
            '[build-system]\nbuild-backend = "b"\nbackend-path = ["sub/../.."]\n',
            "backend-path 'sub/../..' is outside the project",
        ),
    ],
)
def test_a_pyproject_that_names_no_backend_rightly_is_refused_naming_the_file(tmp_path, text, says):
    project = _project(tmp_path / "p", text)
    with pytest.raises(InputError) as err:
        build_system(project)
    assert str(err.value).startswith(f"{project / 'pyproject.toml'}: ") and says in str(err.value)


def test_a_pyproject_that_is_no_text_file_is_refused(tmp_path):
    project = _project(tmp_path / "p", None)
    (project / "pyproject.toml").write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(InputError, match="not UTF-8 text"):
        build_system(project)
    (project / "pyproject.toml").unlink()
    (project / "pyproject.toml").mkdir()
    with pytest.raises(InputError, match="is a folder, not a regular file"):
        build_system(project)
    (project / "pyproject.toml").rmdir()
    os.mkfifo(project / "pyproject.toml")
    with pytest.raises(InputError, match="a FIFO"):
        build_system(project)
