"""A build cell: one package x lane x Python x CUDA x torch, and its names."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Optional

from packaging.version import Version

from cuw.base.errors import InputError, ToolError
from cuw.config.lanes import local_lane
from cuw.config.recipe import Recipe
from cuw.toolchain.toolkit import Toolkit


@dataclass(frozen=True)
class Cell:
    recipe: str
    lane: str
    python: str  # "3.11"
    cuda: str  # "13.0"
    torch: Optional[str]  # "2.14", or None for a torch-free package

    @property
    def id(self) -> str:
        """Names everything of this cell: ``example-linux-py3.11-cu13.0-torch2.14``."""
        torch = f"torch{self.torch}" if self.torch else "notorch"
        return f"{self.recipe}-{self.lane}-py{self.python}-cu{self.cuda}-{torch}"

    def to_dict(self) -> dict[str, Optional[str]]:
        return asdict(self)


def installed_torch() -> Optional[str]:
    """major.minor of the installed torch, read without importing it."""
    from importlib import metadata  # here, not at the top: its import costs every verb ~20 ms

    try:
        version = Version(metadata.version("torch"))
    except metadata.PackageNotFoundError:
        return None
    return f"{version.major}.{version.minor}"


def local_cell(recipe: Recipe, toolkit: Toolkit, lane: Optional[str] = None) -> Cell:
    """The cell this machine builds for ``recipe`` (``lane``: a build image's, where it differs)."""
    torch: Optional[str] = None
    if recipe.links_torch:
        torch = installed_torch()
        if torch is None:
            raise ToolError(
                f"recipe {recipe.key!r} links torch, but torch is not installed here "
                f"(pip install torch built for CUDA {toolkit.version})"
            )
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Cell(recipe.key, lane or local_lane(), python, toolkit.version, torch)


def parse_cell(recipe: Recipe, text: str) -> Cell:
    """``LANE/PY/CUDA[/TORCH]`` (``linux/3.11/13.0/2.14``) as a cell of ``recipe``."""
    parts = text.split("/")
    if len(parts) not in (3, 4) or not all(parts):
        raise InputError(f"--cell {text!r} is not LANE/PY/CUDA[/TORCH] (for example linux/3.11/13.0/2.14)")
    return Cell(recipe.key, parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else None)
