"""The wheel imported under every patch release of its torch line (``verify --torch-patches``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import requires_torch, run_settings
from cuw.wheel.torch_venvs import patch_releases


def test_patch_releases_are_the_lines_releases_for_the_cells_python_and_platform():
    names = [
        "torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl",
        "torch-2.14.2-cp312-cp312-manylinux_2_28_x86_64.whl",  # another Python only
        "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # another line
        "torch-2.14.3rc1-cp311-cp311-manylinux_2_28_x86_64.whl",  # a pre-release
        "torch-2.14.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # a local build of 2.14.1: the same release
    ]
    assert patch_releases(names, "2.14", "3.11", "x86_64") == ["2.14.0", "2.14.1"]
    assert patch_releases(names, "2.14", "3.11", "aarch64") == ["2.14.1"]


def test_torch_index_without_torch_patches_is_refused(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "verify", str(tmp_path / "x.whl"), "--torch-index", "http://x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.e2e
@requires_torch
def test_a_torch_wheel_imports_under_every_patch_release_of_its_line(recipes_dir, paths):
    """Slow tier: one clean venv per torch 2.14 release from the index (made once, then reused)."""
    from cuw.jobs.local import run_build
    from cuw.config.recipe import load_recipe

    outcomes, link = run_build(
        load_recipe("example_torch", recipes_dir), paths, count=1, recipes_dir=recipes_dir, settings=run_settings()
    )
    assert link.ok and link.wheel is not None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "verify",
            str(link.wheel),
            "--recipe",
            "example_torch",
            "--recipes",
            str(recipes_dir),
            "--torch-patches",
        ],
        capture_output=True,
        text=True,
    )
    line = next(line for line in proc.stdout.splitlines() if "torch-patches" in line)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for release in ("2.14.0", "2.14.1"):
        assert f"torch {release}: " in line and "modules import" in line.split(f"torch {release}: ")[1]
