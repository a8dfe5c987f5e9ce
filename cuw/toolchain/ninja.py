"""ninja on this machine: which binary to run, and its compile database (``ninja -t compdb``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional


NINJA_WRAPPER_MARK = "# cuda-wheels-forge ninja wrapper"
"""The first line a job's ninja wrapper carries (:func:`cuw.jobs.workspace.install_ninja_wrapper`)."""


def find_ninja() -> str:
    """The ninja beside this Python (the pinned PyPI wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "ninja"
    return str(beside) if beside.exists() else (shutil.which("ninja") or "ninja")


def find_real_ninja(path: str) -> Optional[str]:
    """The ninja a build would run by name (``path``, the run's PATH; then the one beside this
    Python), never a wrapper."""
    search = os.pathsep.join(p for p in (path, str(Path(sys.executable).parent)) if p)
    for folder in search.split(os.pathsep):
        candidate = Path(folder) / "ninja"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        try:
            with open(candidate, "rb") as fh:
                if NINJA_WRAPPER_MARK.encode() in fh.read(256):
                    continue  # another job's wrapper
        except OSError:
            continue
        return str(candidate)
    return None


def compdb(build_dir: Path) -> Optional[list]:
    """``ninja -t compdb`` of the build.ninja in ``build_dir``: its entries, or None when ninja
    cannot read it."""
    try:
        proc = subprocess.run(
            [find_ninja(), "-C", str(build_dir), "-t", "compdb"],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            return None
        entries = json.loads(proc.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return entries if isinstance(entries, list) else None
