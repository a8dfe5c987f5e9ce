"""The build's front end: the project's PEP 517 backend, its ``build_wheel`` hook called by the job.

A job builds in the forge's environment, as ``pip wheel --no-build-isolation --no-deps`` did: the
backend, torch and the pinned cache tool are the ones installed here, nothing is resolved or
installed. The hook runs in one child (``pyproject_hooks``, the hook caller pip and ``build`` use),
which the job starts, watches and stops like any build. pip started an interpreter of its own and
a second backend process for metadata no job reads (about 1 CPU s a job; with torch's setup.py a
second import of torch), and a user's pip configuration (a constraint file, config settings) could
change what a shard built.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from pyproject_hooks import BackendUnavailable, BuildBackendHookCaller

from cuw.base import tomlfile
from cuw.base.errors import InputError
from cuw.base.reading import read_text

# PEP 517: a source tree without pyproject.toml, or without build-system.build-backend, is built the
# legacy way, which front ends do through setuptools' legacy backend (pip does).
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"

Run = Callable[[list[str], str, Mapping[str, str]], int]
"""Runs one hook child (argv, its folder, the variables the hook caller adds) and returns its exit code."""


@dataclass(frozen=True)
class BuildSystem:
    backend: str
    """``module`` or ``module:object``: PEP 517's ``build-backend``."""
    backend_path: Optional[list[str]]
    """In-tree backend folders, relative to the project (``backend-path``)."""


def build_system(project: Path) -> BuildSystem:
    """The backend ``project/pyproject.toml`` names; a file that names none builds the legacy way.
    A file that cannot be read, is not TOML or names a backend wrongly is refused in one line."""
    path = project / "pyproject.toml"
    try:
        text = read_text(path, "project's pyproject.toml")
    except FileNotFoundError:
        return BuildSystem(LEGACY_BACKEND, None)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; a pyproject.toml is UTF-8 TOML") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = tomlfile.loads(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    table = data.get("build-system", {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: build-system is a {type(table).__name__}, not a table ([build-system])")
    backend = table.get("build-backend", LEGACY_BACKEND)
    if not isinstance(backend, str) or not backend.strip():
        raise InputError(f"{path}: build-system.build-backend must name a module (module or module:object), not {backend!r}")
    backend_path = table.get("backend-path")
    if backend_path is not None and (
        not isinstance(backend_path, list) or not all(isinstance(p, str) and p for p in backend_path)
    ):
        raise InputError(f"{path}: build-system.backend-path must be a list of folders in the project, not {backend_path!r}")
    root = project.resolve()
    for folder in backend_path or ():
        where = (project / folder).resolve()
        if os.path.isabs(folder) or (where != root and root not in where.parents):
            raise InputError(
                f"{path}: build-system.backend-path {folder!r} is outside the project; PEP 517 wants folders inside it"
            )
    return BuildSystem(backend.strip(), backend_path)


class _HookExited(Exception):
    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


def build_wheel(project: Path, wheel_dir: Path, system: BuildSystem, run: Run, note: Callable[[str], None]) -> int:
    """Builds ``project`` into ``wheel_dir`` through ``system``'s backend; the hook child's exit code
    (a backend without ``build_wheel`` fails there, its traceback in the log). ``note`` gets what is
    not the child's own output, a line each: the backend's warnings (the hook caller hands them back
    for the front end to show: the build log, not the terminal) and why a child that exited cleanly
    built nothing (the backend cannot be imported)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)

    def runner(cmd: Sequence[str], cwd: Optional[str] = None, extra_environ: Optional[Mapping[str, str]] = None) -> None:
        rc = run(list(cmd), cwd or str(project), dict(extra_environ or {}))
        if rc != 0:
            raise _HookExited(rc)

    hooks = BuildBackendHookCaller(
        str(project), system.backend, system.backend_path, runner=runner, python_executable=sys.executable
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            hooks.build_wheel(str(wheel_dir.resolve()))
            rc = 0
        except _HookExited as exc:
            rc = exc.rc
        except BackendUnavailable as exc:
            lines = [line.strip() for line in (exc.traceback or str(exc)).splitlines() if line.strip()]
            note(f"the build backend {system.backend!r} cannot be imported here ({lines[-1] if lines else 'no reason given'})")
            rc = 1
        except (OSError, ValueError) as exc:  # the hook exited 0 and left no answer
            note(f"the build backend {system.backend!r} exited without an answer ({exc})")
            rc = 1
    for warning in caught:
        note(f"warning from the build backend: {warning.filename}:{warning.lineno}: {warning.message}")
    return rc
