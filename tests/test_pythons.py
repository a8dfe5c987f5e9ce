"""Every Python the forge claims: the workflow's own steps, run with each interpreter of the grid.

build.yml's compile and link jobs set up the cell's Python (``matrix.python``), install the forge into
it (``install-forge.sh``) and run ``nox -s shard``. The tier (``nox -s pythons``, marker ``pythons``)
runs the text of those steps with each Python of the grid as the runner would: a copy of the
checkout, the interpreter first on PATH, the install step, the compile step with the real nox; then
the cell's other shards through invoke and cuw and its link through nox, to a verified wheel. The
default tier holds the cheap half: every Python a workflow installs the forge into is one
``requires-python`` admits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import REPO, need

WORKFLOWS = REPO / ".github" / "workflows"
GRID_PYTHONS: list[str] = yaml.safe_load((REPO / "recipes" / "defaults.yml").read_text())["grid"]["python"]


def _requires_python() -> SpecifierSet:
    text = (REPO / "pyproject.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return SpecifierSet(tomllib.loads(text)["project"]["requires-python"])


def _jobs_installing_the_forge() -> list[tuple[str, str, dict[str, Any]]]:
    """(workflow, job, its setup-python step) for every job that runs install-forge.sh."""
    found = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in (yaml.safe_load(path.read_text()).get("jobs") or {}).items():
            steps = job.get("steps") or []
            if any("install-forge.sh" in str(s.get("run", "")) for s in steps):
                setup = [s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python@")]
                found += [(path.name, name, s) for s in setup]
    return found


def test_every_python_a_workflow_installs_the_forge_into_is_one_it_supports():
    """A pinned python-version must be admitted by requires-python; ``matrix.python`` comes from the
    grid, so each Python of the grid must be too (and requires-python's floor is one of them)."""
    claimed = _requires_python()
    jobs = _jobs_installing_the_forge()
    assert len(jobs) >= 4, jobs  # the plan, compile, link and publish jobs at least
    for workflow, job, step in jobs:
        version = str(step.get("with", {}).get("python-version", ""))
        if version == "${{ matrix.python }}":
            continue
        assert re.fullmatch(r"3\.\d+", version), f"{workflow} {job}: python-version {version!r}"
        assert Version(version) in claimed, f"{workflow} {job} installs the forge into Python {version}, outside {claimed}"
    assert all(Version(v) in claimed for v in GRID_PYTHONS), (GRID_PYTHONS, str(claimed))
    assert min(GRID_PYTHONS, key=Version) == min((s.version for s in claimed if s.operator == ">="), key=Version)


def _checkout(into: Path) -> Path:
    """What actions/checkout gives a job: the repository's files (tracked and new, as this tree has them)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _step(workflow: str, job: str, name: str) -> str:
    steps = yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"][job]["steps"]
    return next(s["run"] for s in steps if s.get("name") == name)


def _bash(script: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.pythons
@pytest.mark.parametrize("minor", GRID_PYTHONS)
def test_the_workflow_installs_the_forge_and_builds_the_example_with_each_python(minor, tmp_path):
    interpreter = need(f"python{minor}")
    workspace = _checkout(tmp_path / "checkout")
    github_path, github_env = tmp_path / "github_path", tmp_path / "github_env"
    github_path.touch()
    github_env.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("CUW_")}
    # actions/setup-python: the cell's interpreter first on PATH, this forge's venv nowhere on it.
    env["PATH"] = os.pathsep.join([str(Path(interpreter.path).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    env |= {"GITHUB_WORKSPACE": str(workspace), "GITHUB_PATH": str(github_path), "GITHUB_ENV": str(github_env)}

    install = _bash(_step("build.yml", "compile", "Install the forge and its pinned cache tools"), workspace, env)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    assert f"(Python {minor}." in install.stdout, install.stdout

    # The later steps see what the install step appended to $GITHUB_PATH and $GITHUB_ENV.
    env["PATH"] = os.pathsep.join([*github_path.read_text().split(), env["PATH"]])
    env |= dict(line.split("=", 1) for line in github_env.read_text().splitlines() if "=" in line)
    venv_python = Path(env["VIRTUAL_ENV"]) / "bin" / "python"
    version = subprocess.run([str(venv_python), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith(f"Python {minor}."), version

    cell = f"example-linux-py{minor}-cu13.0-notorch"
    compile_env = env | {"RECIPE": "example", "SHARD": "1/4", "CELL": cell, "FAIL_SHARD": "", "DEADLINE_S": "3600"}
    compile_env |= {"RESUME": "", "PART": "1"}
    shard = _bash(_step("build.yml", "compile", "Compile shard"), workspace, compile_env)
    assert shard.returncode == 0, shard.stdout[-2000:] + shard.stderr[-3000:]
    assert "nox > Session shard was successful" in shard.stderr, shard.stderr[-2000:]

    # The rest of the cell through the other front ends: invoke, then cuw (an ISO-8601 deadline,
    # which Python 3.10's datetime cannot read without help), then the link through nox.
    for command in (
        ["invoke", "shard", "example", "2/4"],
        ["cuw", "shard", "example", "3/4", "--deadline", "2099-12-31T00:00:00Z"],
        ["cuw", "shard", "example", "4/4"],
        ["nox", "-s", "link", "--", "example"],
    ):
        done = subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, done.stderr
    wheels = sorted((workspace / "dist").glob("*.whl"))
    assert len(wheels) == 1 and "-py3-none-" in wheels[0].name, wheels
    verified = json.loads((workspace / "dist" / f"{wheels[0].name}.verify.json").read_text())
    assert verified["ok"] is True, verified

    # The per-cell environments read the forge's pinned requirements from pyproject.toml.
    pins = subprocess.run(
        [str(venv_python), "-c", "from cuw.jobs.cell_env import forge_requirements as f; print(len(f()))"],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
    )
    assert pins.returncode == 0 and int(pins.stdout) > 10, pins.stderr


@pytest.mark.pythons
def test_the_extras_resolve_on_each_python():
    """``pip install -e '.[test,torch,farm,docs]'`` resolves on every Python of the grid (a dry run:
    what it would install, read from the index's metadata; the four side by side, as each mostly waits
    on the index)."""
    interpreters = [need(f"python{minor}") for minor in GRID_PYTHONS]
    runs = [
        subprocess.Popen(
            [i.path, "-m", "pip", "install", "--dry-run", "--quiet", "-e", f"{REPO}[test,torch,farm,docs]"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in interpreters
    ]
    for minor, run in zip(GRID_PYTHONS, runs):
        _, err = run.communicate(timeout=1200)
        assert run.returncode == 0, f"Python {minor}: {err[-3000:]}"
