"""The build grid: which cells a recipe has, and which GPU archs each cell compiles.

Farm-wide axes live in ``recipes/defaults.yml`` (``grid`` and ``archs``); a
recipe may narrow them (``grid``) or replace a CUDA line's arch list
(``archs``), and must say why in its README. A torch-free recipe collapses the
torch axis: one cell per lane x Python x CUDA line. A recipe whose wheel does
not depend on the interpreter (``wheel_python: py3`` or ``abi3``) collapses
the Python axis the same way: one cell per lane x CUDA line (x torch), built
with the lowest Python it serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from packaging.version import Version

from cuw.config.cell import Cell
from cuw.base.errors import InputError
from cuw.config.recipe import Recipe


@dataclass(frozen=True)
class TorchRelease:
    cuda: list[str]
    python: list[str]
    patch: Optional[str] = None
    """The exact release every job of this row installs (``2.14.1``): without it a job takes the
    newest patch of the line at the time it runs, and one grid's jobs can differ."""
    holes: dict[str, list[str]] = field(default_factory=dict)
    """Per lane, the CUDA lines this release ships no wheel for there (torch publishes no Windows
    or ARM wheel for some lines): their cells are left out of the grid."""


@dataclass(frozen=True)
class ArchException:
    cuda: str
    torch: str
    archs: list[str]


@dataclass(frozen=True)
class Grid:
    platforms: list[str] = field(default_factory=list)
    python: list[str] = field(default_factory=list)
    cuda: list[str] = field(default_factory=list)
    torch: dict[str, TorchRelease] = field(default_factory=dict)
    """The observed torch releases: version -> the CUDA lines and Pythons it ships for."""


@dataclass(frozen=True)
class Archs:
    cuda: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line: compute capabilities, '9.0' (SASS) or '12.0+PTX' (SASS and PTX)."""
    aarch64: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line for linux_aarch64, where it differs."""
    exceptions: list[ArchException] = field(default_factory=list)
    """Per (CUDA, torch) pairs whose list differs (a torch build that lacks an arch)."""


def _v(text: str) -> Version:
    return Version(text)


def collapses_python(recipe: Recipe) -> bool:
    """Whether the recipe's wheel serves every Python of a cell (``wheel_python: py3`` or ``abi3``)."""
    return getattr(recipe, "wheel_python", "per-interpreter") != "per-interpreter"


def collapse(recipe: Recipe, per_python: list[Cell]) -> list[Cell]:
    """One cell per lane x CUDA x torch, with the lowest Python of its group (order kept);
    the identity for a per-interpreter recipe."""
    if not collapses_python(recipe):
        return per_python
    out: dict[tuple, Cell] = {}
    for cell in per_python:
        key = (cell.lane, cell.cuda, cell.torch)
        if key not in out or _v(cell.python) < _v(out[key].python):
            out[key] = cell
    order = {cell: i for i, cell in enumerate(per_python)}
    return sorted(out.values(), key=lambda c: order[c])


def served_pythons(recipe: Recipe, grid: Grid, cell: Cell) -> list[str]:
    """The Pythons one cell's wheel serves: its own, or every Python of its collapsed group."""
    if not collapses_python(recipe):
        return [cell.python]
    return [
        c.python for c in cells(recipe, grid, per_python=True) if (c.lane, c.cuda, c.torch) == (cell.lane, cell.cuda, cell.torch)
    ]


def cells(recipe: Recipe, grid: Grid, per_python: bool = False) -> list[Cell]:
    """Every cell of a recipe, in a stable order; ``per_python`` keeps one cell per Python
    even where the wheel serves them all (the cells a local build may name)."""
    if not per_python and collapses_python(recipe):
        return collapse(recipe, cells(recipe, grid, per_python=True))
    over = recipe.grid
    lanes = [lane for lane in grid.platforms if lane in (over.platforms or grid.platforms)]
    pythons = [p for p in grid.python if p in (over.python or grid.python)]
    if getattr(recipe, "wheel_python", None) == "abi3" and recipe.abi3_min_python:
        pythons = [p for p in pythons if _v(p) >= _v(recipe.abi3_min_python)]
    cudas = [c for c in grid.cuda if c in (over.cuda or grid.cuda)]
    out: list[Cell] = []
    for lane in lanes:
        for cuda in cudas:
            for python in pythons:
                if not recipe.links_torch:
                    out.append(Cell(recipe.key, lane, python, cuda, None))
                    continue
                for torch, release in sorted(grid.torch.items(), key=lambda kv: _v(kv[0])):
                    if over.min_pytorch and _v(torch) < _v(over.min_pytorch):
                        continue
                    if cuda in release.cuda and python in release.python and cuda not in release.holes.get(lane, []):
                        out.append(Cell(recipe.key, lane, python, cuda, torch))
    return out


def cell_archs(recipe: Recipe, archs: Archs, cell: Cell) -> list[str]:
    """The arch list one cell compiles: recipe override, then (CUDA, torch)
    exception, then the aarch64 table, then the CUDA line's list."""
    if cell.cuda in recipe.archs:
        return list(recipe.archs[cell.cuda])
    for exc in archs.exceptions:
        if exc.cuda == cell.cuda and exc.torch == cell.torch:
            return list(exc.archs)
    if cell.lane == "linux_aarch64" and cell.cuda in archs.aarch64:
        return list(archs.aarch64[cell.cuda])
    if cell.cuda in archs.cuda:
        return list(archs.cuda[cell.cuda])
    raise InputError(f"recipes/defaults.yml: archs.cuda has no list for CUDA {cell.cuda} (cell {cell.id})")


def require_in_grid(recipe: Recipe, grid: Grid, cell: Cell) -> None:
    """A local build of a cell the recipe's grid does not have is refused, with the reason."""
    if not grid.platforms:
        return  # no grid configured: local builds are unconstrained
    if cell in cells(recipe, grid, per_python=True):
        return  # a collapsed recipe's cell may be built with any Python its wheel serves
    over = recipe.grid
    if cell.lane not in grid.platforms or (over.platforms and cell.lane not in over.platforms):
        why = f"lane {cell.lane} is not in its platforms"
    elif cell.cuda not in grid.cuda or (over.cuda and cell.cuda not in over.cuda):
        why = f"CUDA {cell.cuda} is not one of its CUDA lines"
    elif cell.python not in grid.python or (over.python and cell.python not in over.python):
        why = f"Python {cell.python} is not one of its Pythons"
    elif recipe.wheel_python == "abi3" and recipe.abi3_min_python and _v(cell.python) < _v(recipe.abi3_min_python):
        why = f"Python {cell.python} is older than its abi3_min_python {recipe.abi3_min_python}"
    elif over.min_pytorch and cell.torch and _v(cell.torch) < _v(over.min_pytorch):
        why = f"it needs torch >= {over.min_pytorch}"
    else:
        why = f"torch {cell.torch} does not ship for CUDA {cell.cuda} and Python {cell.python}"
    raise InputError(f"cell {cell.id} is not in {recipe.key}'s grid: {why}")


def parse_arch(arch: str) -> tuple[str, bool]:
    """'12.0+PTX' -> ('120', True)."""
    base, _, suffix = arch.partition("+")
    return base.replace(".", ""), suffix.upper() == "PTX"


def cmake_archs(archs: list[str]) -> str:
    """CMake's CUDA_ARCHITECTURES: '90-real' for SASS only, '120' for SASS + PTX."""
    out = []
    for arch in archs:
        number, ptx = parse_arch(arch)
        out.append(number if ptx else f"{number}-real")
    return ";".join(out)


def torch_pin(grid: Grid, torch: Optional[str]) -> str:
    """The exact torch a cell of release ``torch`` installs (``2.14.1``), or "" where the grid pins none."""
    release = grid.torch.get(torch or "")
    return release.patch or "" if release else ""


def check_torch_rows(grid: Grid, source: str) -> None:
    """A row's patch is a release of its line; its holes name lanes of the grid and CUDA lines of the row."""
    import re

    for version, release in grid.torch.items():
        if release.patch is not None and not re.fullmatch(rf"{re.escape(version)}\.\d+", release.patch):
            raise InputError(
                f"{source}: grid.torch.{version}.patch {release.patch!r} is not a release of {version} (for example {version}.1)"
            )
        for lane, lines in release.holes.items():
            if lane not in grid.platforms:
                raise InputError(f"{source}: grid.torch.{version}.holes names lane {lane!r}, not one of grid.platforms")
            unknown = [line for line in lines if line not in release.cuda]
            if unknown:
                raise InputError(
                    f"{source}: grid.torch.{version}.holes.{lane}: CUDA {', '.join(unknown)} is not a line of "
                    f"this release ({', '.join(release.cuda)})"
                )
