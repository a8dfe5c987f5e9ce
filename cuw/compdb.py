"""What the build system itself compiled, read from its compile database.

The link gate compares this with what reached the seat: a CUDA TU the build
compiled but the seat never saw was compiled by an nvcc called around it.
ninja's own database (``ninja -t compdb`` of each build.ninja) comes first;
without one (CMake with Makefiles: natten's setup.py), CMake's
``compile_commands.json`` (``CMAKE_EXPORT_COMPILE_COMMANDS``, which the
forge's build environment sets). Neither: the check cannot run, and the gate
says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

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


def compile_commands_files(root: Path) -> list[Path]:
    """CMake's ``compile_commands.json`` files under ``root`` (not its probes' scratch folders)."""
    return sorted(p for p in root.rglob("compile_commands.json") if not any(part in _SKIP_PARTS for part in p.parts))


def _keys(entries: object, source_root: Path, suffix: str) -> set[str]:
    keys: set[str] = set()
    for entry in entries if isinstance(entries, list) else []:
        file = entry.get("file", "") if isinstance(entry, dict) else ""
        if not isinstance(file, str) or not file.endswith(suffix):
            continue
        path = file if os.path.isabs(file) else os.path.join(entry.get("directory", ""), file)
        keys.add(tu_key(os.path.normpath(path), str(source_root)))
    return keys


def cuda_compiles_from(root: Path, source_root: Path) -> tuple[list[str], Optional[str]]:
    """Keys of every .cu file the build under ``root`` compiles, and where that list came from:
    ``"ninja"`` (its build.ninja files), ``"compile_commands.json"`` (CMake's, when there is no
    ninja database: a Makefile generator), or None when the build left neither."""
    keys: set[str] = set()
    read = False
    for build_file in ninja_files(root):
        proc = subprocess.run(
            [_ninja(), "-C", str(build_file.parent), "-t", "compdb"], capture_output=True, text=True, timeout=120
        )
        if proc.returncode != 0:
            continue
        try:
            keys |= _keys(json.loads(proc.stdout or "[]"), source_root, ".cu")
        except ValueError:
            continue
        read = True
    if read:
        return sorted(keys), "ninja"
    for path in compile_commands_files(root):
        try:
            keys |= _keys(json.loads(path.read_text(errors="replace")), source_root, ".cu")
        except (OSError, ValueError):
            continue
        read = True
    return sorted(keys), ("compile_commands.json" if read else None)


def cuda_compiles(root: Path, source_root: Path) -> list[str]:
    """Keys of every .cu file the build under ``root`` compiles (see :func:`cuda_compiles_from`)."""
    return cuda_compiles_from(root, source_root)[0]
