"""Clean environments holding one torch patch release each, for the ABI check across patches.

A wheel built against torch 2.14.1 claims the whole 2.14 line (``torch==2.14.*``).
An ``undefined symbol`` under 2.14.0 is the failure users meet most, so verify can
import the wheel under every patch release of the line that the index offers.
Each release gets one venv, made once and reused (``<root>/torch-<version>-py<X.Y>``,
marked complete only after torch installed), from the cell's Python.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.files import held
from cuw.base.settings import Settings
from cuw.config.grid_check import wheel_names

READY = ".cuw-ready"


def patch_releases(names: list[str], line: str, python: str, platform_suffix: str) -> list[str]:
    """The releases of torch ``line`` (``2.14``) with a wheel for CPython ``python`` on the platform."""
    interpreter = f"cp{python.replace('.', '')}"
    found: set[Version] = set()
    for name in names:
        try:
            _, version, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if version.is_prerelease or f"{version.major}.{version.minor}" != line:
            continue
        if any(t.interpreter == interpreter and t.platform.endswith(platform_suffix) for t in tags):
            found.add(Version(version.public))
    return [str(v) for v in sorted(found)]


def find_python(version: str, settings: Settings) -> str:
    """An interpreter of ``version`` (``3.11``), found as every other job finds one (:mod:`cuw.toolchain.pythons`,
    with the run's settings)."""
    from cuw.toolchain import pythons

    found, looked = pythons.find_python(version, settings=settings)
    if found is None:
        raise ToolError(f"no Python {version} here (looked at this interpreter, {', '.join(looked)})")
    return found.path


def ensure(version: str, python: str, root: Path, index: Optional[str], settings: Settings) -> Path:
    """The venv's interpreter with torch ``version`` installed (made once, then reused; ``python``
    found with the run's ``settings``)."""
    venv = root / f"torch-{version}-py{python}"
    interpreter = venv / "bin" / "python"
    if (venv / READY).is_file() and interpreter.is_file():
        return interpreter
    with held(root / f"{venv.name}.lock"):  # another verify may be making the same venv
        if (venv / READY).is_file() and interpreter.is_file():
            return interpreter
        if venv.exists():
            shutil.rmtree(venv)  # a venv left half-made by an interrupted install
        made = subprocess.run([find_python(python, settings), "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise ToolError(f"could not make a venv at {venv}: {made.stderr.strip()[-300:]}")
        cmd = [str(interpreter), "-m", "pip", "install", "--quiet", f"torch=={version}"]
        if index:
            cmd += ["--index-url", index]
        installed = subprocess.run(cmd, capture_output=True, text=True)
        if installed.returncode != 0:
            raise CuwError(  # pip's reason: most often the index, out of reach
                f"could not install torch=={version} into {venv}: {installed.stderr.strip()[-300:]}"
            )
        (venv / READY).write_text(f"torch=={version}\n")
    return interpreter


def releases_on(index: str, line: str, python: str, platform_suffix: str) -> list[str]:
    versions = patch_releases(wheel_names(index), line, python, platform_suffix)
    if not versions:
        raise InputError(f"{index} offers no torch {line}.* wheel for Python {python} ({platform_suffix})")
    return versions
