"""A wheel installed into a plain folder, as ``pip install --no-deps --target`` would, in this process.

The import check (cuw/wheel/verify.py) puts the wheel's files on a clean process's path. pip did that
in a process of its own (0.6 CPU s a wheel, every link job); pypa's ``installer`` writes the same files
in a few milliseconds. pip's two refusals come first, with its words: a wheel whose tags this
interpreter does not support, and one whose ``Requires-Python`` excludes it.
"""

from __future__ import annotations

import os
import platform
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

if TYPE_CHECKING:
    from installer.scripts import LauncherKind


def _launcher_kind() -> LauncherKind:
    """The console-script launcher ``installer`` writes for this machine."""
    if os.name != "nt":
        return "posix"
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return "win-arm64"
    return "win-amd64" if sys.maxsize > 2**32 else "win-ia32"


def _requires_python(metadata: str) -> str:
    """The ``Requires-Python`` of a wheel's METADATA, or ""."""
    from packaging.metadata import parse_email

    raw, _ = parse_email(metadata)
    return str(raw.get("requires_python", "") or "")


def install_into(wheel: Path, target: Path, scratch: Path) -> str:
    """The wheel's purelib and platlib files into ``target`` (its scripts, headers and data under
    ``scratch``, off the import path); why not, in one line, or ""."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.exceptions import InstallerError
    from installer.sources import WheelFile

    try:
        _, _, _, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        return f"{wheel.name} is not a wheel's file name ({exc})"
    if not tags & set(sys_tags()):
        return f"{wheel.name} is not a supported wheel on this platform (Python {platform.python_version()})"
    scheme = {
        "purelib": str(target),
        "platlib": str(target),
        "scripts": str(scratch / "bin"),
        "headers": str(scratch / "include"),
        "data": str(scratch / "data"),
    }
    try:
        with WheelFile.open(wheel) as source:
            requires = _requires_python(source.read_dist_info("METADATA"))
            try:
                if requires and not SpecifierSet(requires).contains(platform.python_version(), prereleases=True):
                    return f"{wheel.name} requires Python {requires}, this is {platform.python_version()}"
            except InvalidSpecifier:
                return f"{wheel.name}: its Requires-Python {requires!r} is not a version specifier"
            destination = SchemeDictionaryDestination(scheme, interpreter=sys.executable, script_kind=_launcher_kind())
            install(source, destination, additional_metadata={})
    except (InstallerError, OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        return f"{wheel.name} could not be installed: {exc}"
    return ""
