"""The build grid and arch resolution (recipes/defaults.yml + recipe overrides)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cuw.config.cell import Cell
from cuw.base.errors import CuwError
from cuw.config.grid import ArchException, cell_archs, cells, cmake_archs, require_in_grid, served_pythons
from cuw.config.policy import load_policy
from cuw.config.recipe import GridOverride, load_recipe


@pytest.fixture
def policy(recipes_dir):
    return load_policy(recipes_dir)


def test_torch_free_recipe_collapses_the_torch_axis(recipes_dir, policy):
    grid = policy.grid
    got = cells(load_recipe("example", recipes_dir), grid, per_python=True)  # one cell per Python: the torch axis alone
    assert all(c.torch is None for c in got)
    assert len(got) == len(grid.platforms) * len(grid.cuda) * len(grid.python)
    assert len(set(got)) == len(got)


def test_torch_recipe_multiplies_by_torch_releases(recipes_dir, policy):
    grid = policy.grid
    got = cells(load_recipe("example_torch", recipes_dir), grid)
    expected = sum(
        1
        for _ in grid.platforms
        for cuda in grid.cuda
        for py in grid.python
        for rel in grid.torch.values()
        if cuda in rel.cuda and py in rel.python
    )
    assert len(got) == expected and {c.torch for c in got} == set(grid.torch)


def test_overrides_narrow_the_grid(recipes_dir, policy):
    recipe = replace(
        load_recipe("example_torch", recipes_dir),
        grid=GridOverride(platforms=["linux"], python=["3.11"], cuda=["13.0"], min_pytorch="2.14"),
    )
    assert cells(recipe, policy.grid) == [Cell("example_torch", "linux", "3.11", "13.0", "2.14")]
    with pytest.raises(CuwError, match=r"cell example_torch-linux-py3.11-cu13.0-torch2.13 is not in .* needs torch >= 2.14"):
        require_in_grid(recipe, policy.grid, Cell("example_torch", "linux", "3.11", "13.0", "2.13"))
    with pytest.raises(CuwError, match=r"Python 3.12 is not one of its Pythons"):
        require_in_grid(recipe, policy.grid, Cell("example_torch", "linux", "3.12", "13.0", "2.14"))
    with pytest.raises(CuwError, match=r"CUDA 12.8 is not one of its CUDA lines"):
        require_in_grid(recipe, policy.grid, Cell("example_torch", "linux", "3.11", "12.8", "2.14"))


def test_arch_resolution_order(recipes_dir, policy):
    plain = replace(load_recipe("example", recipes_dir), archs={})
    x86 = Cell("example", "linux", "3.11", "13.0", None)
    arm = replace(x86, lane="linux_aarch64")
    assert cell_archs(plain, policy.archs, x86) == policy.archs.cuda["13.0"]
    assert cell_archs(plain, policy.archs, arm) == policy.archs.aarch64["13.0"]
    archs = replace(policy.archs, exceptions=[ArchException("13.0", "2.14", ["9.0", "10.0"])])
    torch_cell = Cell("example_torch", "linux", "3.11", "13.0", "2.14")
    assert cell_archs(plain, archs, torch_cell) == ["9.0", "10.0"]
    assert cell_archs(load_recipe("example", recipes_dir), archs, x86) == ["9.0"]  # the recipe wins
    with pytest.raises(CuwError, match=r"archs.cuda has no list for CUDA 11.8"):
        cell_archs(plain, policy.archs, replace(x86, cuda="11.8"))


def test_cmake_arch_spelling():
    assert cmake_archs(["9.0", "12.0+PTX"]) == "90-real;120"


def test_policy_versions_must_be_quoted(recipes_dir):
    path = recipes_dir / "defaults.yml"
    path.write_text(path.read_text().replace('python: ["3.10", "3.11"', 'python: [3.10, "3.11"'))
    with pytest.raises(CuwError, match=r"grid.python\[0\]: 3.1 must be a string"):
        load_policy(recipes_dir)


def test_a_python_independent_wheel_collapses_the_python_axis(recipes_dir, policy):
    grid = policy.grid
    example = load_recipe("example", recipes_dir)  # wheel_python: py3
    assert example.wheel_python == "py3"
    got = cells(example, grid)
    assert len(got) == len(grid.platforms) * len(grid.cuda), "one cell per lane x CUDA line"
    assert {c.python for c in got} == {min(grid.python, key=lambda v: tuple(map(int, v.split("."))))}
    per_python = cells(replace(example, wheel_python="per-interpreter"), grid)
    assert len(per_python) == len(got) * len(grid.python)
    # a local build may still name any Python the collapsed wheel serves
    require_in_grid(example, grid, Cell("example", "linux", "3.12", "13.0", None))
    assert served_pythons(example, grid, got[0]) == grid.python
    # abi3 from 3.12: the Pythons below it are no cells at all, the cell builds with 3.12
    abi3 = replace(example, wheel_python="abi3", abi3_min_python="3.12")
    assert {c.python for c in cells(abi3, grid)} == {"3.12"} and len(cells(abi3, grid)) == len(got)
    with pytest.raises(CuwError, match=r"Python 3.11 is older than its abi3_min_python 3.12"):
        require_in_grid(abi3, grid, Cell("example", "linux", "3.11", "13.0", None))


def test_a_torch_linked_abi3_recipe_keeps_the_torch_axis(recipes_dir, policy):
    grid = policy.grid
    recipe = replace(load_recipe("example_torch", recipes_dir), wheel_python="abi3", abi3_min_python="3.10")
    got = cells(recipe, grid)
    assert len(got) == len(grid.platforms) * len(grid.cuda) * len(grid.torch)
    assert {c.python for c in got} == {"3.10"} and {c.torch for c in got} == set(grid.torch)


def test_a_torch_row_pins_its_patch_and_leaves_out_its_lane_holes(recipes_dir):
    """grid.torch.<line>.patch reaches every job of the row (the workflow installs exactly it);
    holes (a release without a Windows wheel for a CUDA line) take those cells out of the grid."""
    import subprocess
    import sys
    import json as json_

    from cuw.ci.matrix import Filters, plan

    path = recipes_dir / "defaults.yml"
    text = path.read_text()
    assert 'patch: "2.14.1"' in text
    path.write_text(
        text.replace(
            '"2.13": {cuda: ["12.8", "13.0"], python: ["3.10", "3.11", "3.12", "3.13"]}',
            '"2.13": {cuda: ["12.8", "13.0"], python: ["3.10", "3.11", "3.12", "3.13"], '
            'holes: {windows: ["12.8"], linux_aarch64: ["12.8", "13.0"]}}',
        )
    )
    policy = load_policy(recipes_dir)
    recipe = load_recipe("example_torch", recipes_dir)
    found = {(c.lane, c.cuda) for c in cells(recipe, policy.grid) if c.torch == "2.13"}
    assert ("windows", "12.8") not in found and ("windows", "13.0") in found
    assert not {lane for lane, _ in found} & {"linux_aarch64"} and ("linux", "12.8") in found
    assert {(c.lane, c.cuda) for c in cells(recipe, policy.grid) if c.torch == "2.14"} >= {("linux_aarch64", "12.8")}
    jobs = [
        j
        for c in plan([recipe], policy.grid, Filters(cuda=("13.0",), python=("3.11",)))["chunks"]
        for j in c["compile"]["include"] + c["link"]["include"]
    ]
    assert {j["torch"]: j["torch_pin"] for j in jobs} == {"2.13": "", "2.14": "2.14.1"}
    for bad, message in [('patch: "2.14.1"', 'patch: "2.13.1"'), ('patch: "2.14.1"', 'patch: "2.14"')]:
        path.write_text(text.replace(bad, message))
        with pytest.raises(CuwError, match=r"grid.torch.2.14.patch .* is not a release of 2.14"):
            load_policy(recipes_dir)
    path.write_text(text.replace('patch: "2.14.1"', 'patch: "2.14.1", holes: {macos: ["13.0"]}'))
    with pytest.raises(CuwError, match="holes names lane 'macos'"):
        load_policy(recipes_dir)
    path.write_text(text.replace('patch: "2.14.1"', 'patch: "2.14.1", holes: {windows: ["11.8"]}'))
    with pytest.raises(CuwError, match=r"holes.windows: CUDA 11.8 is not a line of this release"):
        load_policy(recipes_dir)
    path.write_text(text)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "matrix",
            "--package",
            "example_torch",
            "--cuda",
            "13.0",
            "--python",
            "3.11",
            "--pytorch",
            "2.14",
            "--platform",
            "linux",
            "--recipes",
            str(recipes_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert {j["torch_pin"] for c in json_.loads(out)["chunks"] for j in c["compile"]["include"]} == {"2.14.1"}
