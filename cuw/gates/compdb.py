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
from pathlib import Path
from typing import Optional

from cuw.partition.coverage import CUDA_SUFFIXES
from cuw.partition.rules import tu_key
from cuw.toolchain import ninja

_SKIP_PARTS = ("CMakeFiles", "CMakeScratch", "CMakeTmp")


def ninja_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("build.ninja"):
        if not any(part in _SKIP_PARTS for part in path.parts):
            found.append(path)
    return sorted(found)


def compile_commands_files(root: Path) -> list[Path]:
    """CMake's ``compile_commands.json`` files under ``root`` (not its probes' scratch folders)."""
    return sorted(p for p in root.rglob("compile_commands.json") if not any(part in _SKIP_PARTS for part in p.parts))


def _keys(entries: object, source_root: Path, suffix: tuple[str, ...] = ("",)) -> set[str]:
    keys: set[str] = set()
    for entry in entries if isinstance(entries, list) else []:
        file = entry.get("file", "") if isinstance(entry, dict) else ""
        if not isinstance(file, str) or not file or not file.endswith(suffix):
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
        entries = ninja.compdb(build_file.parent)
        if entries is None:
            continue
        keys |= _keys(entries, source_root, CUDA_SUFFIXES)
        read = True
    if read:
        return sorted(keys), "ninja"
    for path in compile_commands_files(root):
        try:
            keys |= _keys(json.loads(path.read_text(errors="replace")), source_root, CUDA_SUFFIXES)
        except (OSError, ValueError):
            continue
        read = True
    return sorted(keys), ("compile_commands.json" if read else None)


def cuda_compiles(root: Path, source_root: Path) -> list[str]:
    """Keys of every .cu file the build under ``root`` compiles (see :func:`cuda_compiles_from`)."""
    return cuda_compiles_from(root, source_root)[0]


def compiled_sources(root: Path, source_root: Path) -> Optional[list[str]]:
    """Keys of every source the build system meant to compile, from every compile database it
    left under ``root`` (``ninja -t compdb`` of each build.ninja, and every
    compile_commands.json: CMake writes one for Makefiles too, CMAKE_EXPORT_COMPILE_COMMANDS
    being set in the build environment). None when there is none (a setuptools build)."""
    databases: list[list] = [e for e in (ninja.compdb(f.parent) for f in ninja_files(root)) if e is not None]
    for path in compile_commands_files(root):
        try:
            databases.append(json.loads(path.read_text(errors="replace")))
        except (OSError, ValueError):
            continue
    if not databases:
        return None
    return sorted(set().union(*(_keys(entries, source_root) for entries in databases)))
