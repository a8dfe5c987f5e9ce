"""Where the jobs of a cell write: job folders, shard archives, finished wheels.

A module of its own so the command line reads the defaults without importing the
build pipeline (every read-only verb starts in a fraction of the time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cuw.base.files import contained

if TYPE_CHECKING:
    from cuw.config.cell import Cell


@dataclass(frozen=True)
class Paths:
    work: Path = Path(".cuw/work")
    artifacts: Path = Path("artifacts")
    dist: Path = Path("dist")

    def __post_init__(self) -> None:
        # Absolute from here on: ccache's base dir and the seat need them.
        for name in ("work", "artifacts", "dist"):
            object.__setattr__(self, name, Path(getattr(self, name)).resolve())

    def cell_artifacts(self, cell: "Cell") -> Path:
        return contained(self.artifacts / cell.id, self.artifacts, f"cell {cell.id!r}")

    def cell_work(self, cell: "Cell") -> Path:
        return contained(self.work / cell.id, self.work, f"cell {cell.id!r}")
