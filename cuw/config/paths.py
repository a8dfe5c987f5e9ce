"""Where the jobs of a cell write: job folders, shard archives, finished wheels.

A module of its own so the command line reads the defaults without importing the
build pipeline (every read-only verb starts in a fraction of the time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cuw.base.errors import InputError
from cuw.base.files import check_apart, contained

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


ROOM_FOR_JOBS = 1024
"""What a cell's job folders and its source tree add under ``--work`` (cell id, job, src/...): a
path that leaves less is refused before anything is made, not found out by a gate hours later."""


def _inside(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_job_folders(folders: dict[str, Path], source: Path) -> None:
    """``--work``, ``--artifacts`` and ``--dist`` (option -> folder): none inside the recipe's source
    (its copy into the work folder would recurse into itself) nor inside another, and each short
    enough for what goes under it. Checked before anything is written."""
    check_apart(list(folders.items()))
    resolved = {option: Path(folder).resolve() for option, folder in folders.items()}
    src = source.resolve()
    for option, folder in resolved.items():
        if _inside(folder, src):
            raise InputError(
                f"{option} {folder} is inside the recipe's source {src}: the job copies that source into "
                f"its work folder, which would copy itself; pick a folder outside it"
            )
        try:
            existing = next(p for p in (folder, *folder.parents) if p.exists())
            path_max, name_max = os.pathconf(existing, "PC_PATH_MAX"), os.pathconf(existing, "PC_NAME_MAX")
        except (OSError, ValueError, StopIteration):
            path_max, name_max = 4096, 255
        long_name = next((part for part in folder.parts if len(os.fsencode(part)) > name_max), None)
        if long_name is not None:
            raise InputError(
                f"{option}: the folder name {long_name[:40]}... is over {name_max} bytes, more than the "
                "file system takes; pick a shorter path"
            )
        if len(os.fsencode(str(folder))) > path_max - ROOM_FOR_JOBS:
            raise InputError(
                f"{option} is {len(str(folder))} characters long: the job folders and the source tree under it "
                f"need about {ROOM_FOR_JOBS} more within the file system's {path_max}; pick a shorter path"
            )
