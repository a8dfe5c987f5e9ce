"""What the build system itself compiled, read from ninja's compile database.

The link gate compares this with what reached the seat: a CUDA TU the build
compiled but the seat never saw was compiled by an nvcc called around it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .partition import tu_key

_SKIP_PARTS = ("CMakeFiles", "CMakeScratch", "CMakeTmp")


def _ninja() -> str:
    beside = Path(sys.executable).parent / "ninja"
    return str(beside) if beside.exists() else (shutil.which("ninja") or "ninja")


def ninja_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("build.ninja"):
        if not any(part in _SKIP_PARTS for part in path.parts):
            found.append(path)
    return sorted(found)


def cuda_compiles(root: Path, source_root: Path) -> list[str]:
    """Keys of every .cu file that a build.ninja under ``root`` compiles."""
    keys: set[str] = set()
    for build_file in ninja_files(root):
        proc = subprocess.run(
            [_ninja(), "-C", str(build_file.parent), "-t", "compdb"], capture_output=True, text=True, timeout=120
        )
        if proc.returncode != 0:
            continue
        for entry in json.loads(proc.stdout or "[]"):
            file = entry.get("file", "")
            if not file.endswith(".cu"):
                continue
            path = file if os.path.isabs(file) else os.path.join(entry.get("directory", ""), file)
            keys.add(tu_key(os.path.normpath(path), str(source_root)))
    return sorted(keys)
