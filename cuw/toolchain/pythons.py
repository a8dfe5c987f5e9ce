"""Finding a CPython of a given minor version on this machine: one search order for every caller
(a cell's venv, the workflow runner's tool cache, verify's torch venvs).

The order: this interpreter when it is that version, ``pythonX.Y`` on PATH, pyenv's versions
(newest patch first, compared as numbers: 3.11.10 after 3.11.9), then ``uv python find``. Each
candidate is run once to learn what it is: a pyenv shim of a version pyenv has not selected fails
there and is passed over.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cuw.base.settings import Settings


@dataclass(frozen=True)
class Interpreter:
    path: str  # an executable that runs it
    version: str  # "3.12.1"
    where: str  # how it was found
    prefix: Optional[Path] = None  # its installation (sys.base_prefix): holds bin/python


def _probe(python: str, minor: str, where: str) -> Optional[Interpreter]:
    code = "import sys; print('.'.join(map(str, sys.version_info[:3]))); print(sys.executable); print(sys.base_prefix)"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 3 or not lines[0].startswith(minor + "."):
        return None
    return Interpreter(lines[1], lines[0], where, Path(lines[2]))


def _pyenv_root(configured: Optional[str]) -> Optional[Path]:
    """``pyenv root``, else ``configured`` (the run's ``$PYENV_ROOT``), else ``~/.pyenv``."""
    if shutil.which("pyenv"):
        try:
            out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return Path(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return Path(configured) if configured else (Path.home() / ".pyenv" if (Path.home() / ".pyenv").is_dir() else None)


def find_python(minor: str, *, settings: Settings) -> tuple[Optional[Interpreter], list[str]]:
    """CPython ``minor`` (``3.12``), and the places looked at (for an error or a skip naming them).
    ``settings``: the run's, for ``$PYENV_ROOT``."""
    looked: list[str] = []
    if f"{sys.version_info.major}.{sys.version_info.minor}" == minor:
        base = Path(sys.base_prefix) / "bin" / f"python{minor}"
        got = _probe(str(base if base.exists() else sys.executable), minor, "the forge's own Python")
        if got:
            return got, looked
    on_path = shutil.which(f"python{minor}")
    looked.append(f"python{minor} on PATH" + ("" if on_path else " (none)"))
    if on_path:
        got = _probe(on_path, minor, f"PATH {on_path}")
        if got:
            return got, looked
    root = _pyenv_root(settings.pyenv_root)
    looked.append(f"pyenv versions in {root / 'versions'}" if root else "pyenv (not installed)")
    if root and (root / "versions").is_dir():
        found = [p for p in (root / "versions").glob(f"{minor}.*") if re.fullmatch(rf"{re.escape(minor)}\.\d+", p.name)]
        for path in sorted(found, key=lambda p: int(p.name.rsplit(".", 1)[1]), reverse=True):
            got = _probe(str(path / "bin" / "python"), minor, f"pyenv {path}")
            if got:
                return got, looked
    uv = shutil.which("uv")
    looked.append("uv python find" if uv else "uv (not installed)")
    if uv:
        try:
            out = subprocess.run([uv, "python", "find", minor], capture_output=True, text=True, timeout=60)
            if out.returncode == 0 and out.stdout.strip():
                got = _probe(out.stdout.strip(), minor, f"uv {out.stdout.strip()}")
                if got:
                    return got, looked
        except (OSError, subprocess.SubprocessError):
            pass
    return None, looked
