"""Shared helpers: copies of the recipes, job folders, and wheel inspection."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from dataclasses import dataclass

import pytest

from cuw.base.files import held
from cuw.config.paths import Paths
from cuw.config.recipe import Recipe, load_recipe

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_KERNELS = REPO / "recipes" / "example" / "package" / "csrc" / "kernels"
EXAMPLE_CUDA_TUS = 9
# Host TUs under the source root go through the host seat and the cache too:
# dispatch.cpp and registry.cpp (and torch_link.cpp in the torch flavour).
EXAMPLE_HOST_TUS = {"example": 2, "example_torch": 3}


def engine_or_skip():
    """The container engine that answers, or a skip saying why there is none."""
    from cuw.base.errors import CuwError
    from cuw.toolchain.engine import find_engine

    try:
        return find_engine()
    except CuwError as exc:
        pytest.skip(f"no container engine: {exc}")


def run_cuw(*args: str, cwd: Path = REPO, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``python -m cuw <args>`` as a user runs it: its own process, no stdin, output captured."""
    return subprocess.run([sys.executable, "-m", "cuw", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def expected_tu_values() -> dict[str, int]:
    """What each example TU's host function must return: id * 1000 + weight."""
    values = {}
    for path in sorted(EXAMPLE_KERNELS.glob("*.cu")):
        text = path.read_text()
        name = re.search(r"#define CUW_TU_NAME (\w+)", text).group(1)
        tu_id = int(re.search(r"#define CUW_TU_ID (\d+)", text).group(1))
        weight = int(re.search(r"#define CUW_TU_WEIGHT (\d+)", text).group(1))
        values[name] = tu_id * 1000 + weight
    return values


def wheel_tu_values(wheel: Path, module: str, where: Path) -> dict[str, int]:
    """Installs the wheel into a fresh folder and calls every TU's host function
    in a clean child process (no GPU needed)."""
    target = where / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    code = f"import json, {module} as m; print(json.dumps(m.tu_values()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=where,
        env={"PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def recipes_dir(tmp_path: Path) -> Path:
    """A private copy of the recipes, free to edit."""
    dest = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", dest, symlinks=True)
    return dest


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(work=tmp_path / "work", artifacts=tmp_path / "artifacts", dist=tmp_path / "dist")


@dataclass(frozen=True)
class BuiltCell:
    """The example cell as one cold run left it: N shard archives and reports, the link's
    work folder and the finished wheel with its reports. Shared by every test that starts
    from a built cell: tests read it and change only copies."""

    root: Path
    count: int
    outcomes: tuple[bool, ...]

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def paths(self) -> Paths:
        return Paths(work=self.root / "work", artifacts=self.root / "artifacts", dist=self.root / "dist")

    @property
    def cell_artifacts(self) -> Path:
        (folder,) = self.paths.artifacts.iterdir()
        return folder

    @property
    def wheel(self) -> Path:
        (wheel,) = self.paths.dist.glob("*.whl")
        return wheel

    def link_report(self) -> dict:
        return json.loads(self.wheel.with_name(self.wheel.name + ".link.json").read_text())


EXAMPLE_CELL_SHARDS = 3


@pytest.fixture(scope="session")
def example_cell(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> BuiltCell:
    """The example built once per test run: 3 cold shards, then the link, finish and verify.

    Every xdist worker of a run shares the one build (the first to ask makes it under a lock):
    a cold cell is the costliest thing the suite does, and half a dozen files start from one.
    """
    from cuw.jobs.local import run_build

    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        base = base.parent  # the run's folder, above each worker's own
    root = base / "example-cell"
    done = root / "built.json"
    with held(base / "example-cell.lock"):
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(REPO / "recipes", root / "recipes", symlinks=True)
            built = BuiltCell(root, EXAMPLE_CELL_SHARDS, ())
            outcomes, _ = run_build(
                load_recipe("example", built.recipes), built.paths, count=EXAMPLE_CELL_SHARDS,
                recipes_dir=built.recipes, progress=lambda _: None,
            )  # fmt: skip
            done.write_text(json.dumps({"outcomes": outcomes}))
    return BuiltCell(root, EXAMPLE_CELL_SHARDS, tuple(json.loads(done.read_text())["outcomes"]))


def recipe(key: str, recipes_dir: Path) -> Recipe:
    return load_recipe(key, recipes_dir)


def torch_cuda_available() -> bool:
    try:
        from importlib import metadata

        version = metadata.version("torch")
    except Exception:
        return False
    return "+cpu" not in version


requires_torch = pytest.mark.skipif(
    not torch_cuda_available(), reason="needs the CUDA build of torch (pip install torch==2.14.1)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--e2e-recipe", action="append", default=[], help="end-to-end tier: only this recipe (repeatable)"
    )
    parser.addoption(
        "--e2e-image", default=None, help="end-to-end tier: every job in a container of this build image (cuw image)"
    )
