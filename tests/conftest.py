"""Shared helpers: copies of the recipes, job folders, and wheel inspection."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuw.config.paths import Paths
from cuw.config.recipe import Recipe, load_recipe

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_KERNELS = REPO / "recipes" / "example" / "package" / "csrc" / "kernels"
EXAMPLE_CUDA_TUS = 9
# Host TUs under the source root go through the host seat and the cache too:
# dispatch.cpp and registry.cpp (and torch_link.cpp in the torch flavour).
EXAMPLE_HOST_TUS = {"example": 2, "example_torch": 3}


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
