"""The folders of one job (a shard or the link) and how they are prepared.

All of a job's paths sit under one root, so CCACHE_BASEDIR=<root> makes every
path ccache hashes relative, and a compile in one job's folder hits in another's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import cache, seat
from .partition import ShardSpec
from .recipe import Recipe
from .toolkit import Toolkit, make_shadow_home


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def cache_dir(self) -> Path:
        return self.root / "ccache"

    @property
    def seat_dir(self) -> Path:
        return self.root / "seat"

    @property
    def cuda_home(self) -> Path:
        return self.root / "cuda"

    @property
    def wheel_dir(self) -> Path:
        return self.root / "wheel"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def seat_log(self) -> Path:
        return self.logs / "seat.jsonl"

    @property
    def build_log(self) -> Path:
        return self.logs / "build.log"

    @property
    def empty_object(self) -> Path:
        return self.seat_dir / "empty.o"


def prepare(ws: Workspace, recipe: Recipe, toolkit: Toolkit, seat_partition: Optional[ShardSpec]) -> None:
    """A fresh job folder: source copy, empty cache, seat and shadow CUDA_HOME."""
    if ws.root.exists():
        shutil.rmtree(ws.root)
    ws.root.mkdir(parents=True)
    shutil.copytree(recipe.source_dir, ws.src, symlinks=True)
    for folder in (ws.build, ws.wheel_dir, ws.logs):
        folder.mkdir()
    cache.prepare(ws.cache_dir)
    ws.seat_dir.mkdir()
    seat.make_empty_object(ws.empty_object)
    config = seat.SeatConfig(
        real_nvcc=str(toolkit.nvcc),
        ccache=cache.binary(),
        cache_env=cache.environment(ws.cache_dir, ws.root),
        source_root=str(ws.src),
        empty_object=str(ws.empty_object),
        log=str(ws.seat_log),
        partition=seat.SeatPartition(seat_partition.index, seat_partition.count) if seat_partition else None,
    )
    script = seat.install(ws.seat_dir, config)
    make_shadow_home(toolkit, ws.cuda_home, script)


def real_objects(ws: Workspace) -> int:
    """Object files under the job that are not the seat's empty stub."""
    stub = ws.empty_object.read_bytes() if ws.empty_object.exists() else b""
    count = 0
    for folder in (ws.build, ws.src):
        for path in folder.rglob("*.o"):
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size > 1 and not (size == len(stub) and path.read_bytes() == stub):
                count += 1
    return count


def run_logged(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> int:
    """Runs a build with all its output in ``log``."""
    with open(log, "ab") as fh:
        fh.write(("$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc.returncode


def cuda_sources(root: Path) -> list[str]:
    """Every .cu file under a source tree, as partition keys."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.cu") if p.is_file())


def default_jobs(parallel_builds: int = 1) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, parallel_builds))
