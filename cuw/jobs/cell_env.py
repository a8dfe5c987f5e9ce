"""Per-cell build environments: the cell's Python in a venv of its own.

What cibuildwheel does in a container, done with venvs: for each cell, a venv
made from the cell's Python (``pythonX.Y`` on PATH, pyenv's versions, or
``uv python find``) holding the cell's torch from the CUDA line's torch index,
and the forge with its pinned cache tool and build backends. It is made once
under ``<root>/<python>-<torch>-<key>`` and reused while the key of its inputs
(the interpreter, the torch requirement and index, the forge's pinned
requirements and its own source) is the same; a venv is marked ready only
after everything installed, so an interrupted one is made again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import cuw
from cuw.base.errors import CuwError
from cuw.base.files import held

READY = ".cuw-cell-env.json"
FORGE_ROOT = Path(cuw.FORGE_ROOT)


def default_root() -> Path:
    return Path(os.environ.get("CUW_CELL_VENVS") or Path.home() / ".cache" / "cuw" / "cell-venvs")


@dataclass(frozen=True)
class Interpreter:
    path: str  # an executable that runs it
    version: str  # "3.12.1"
    where: str  # how it was found


def _probe(python: str, minor: str, where: str) -> Optional[Interpreter]:
    code = "import sys; print('.'.join(map(str, sys.version_info[:3]))); print(sys.executable)"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) < 2 or not lines[0].startswith(minor + "."):
        return None  # a pyenv shim of a version pyenv does not have selected fails here
    return Interpreter(lines[1], lines[0], where)


def _pyenv_root() -> Optional[Path]:
    if shutil.which("pyenv"):
        try:
            out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return Path(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    env = os.environ.get("PYENV_ROOT")
    return Path(env) if env else (Path.home() / ".pyenv" if (Path.home() / ".pyenv").is_dir() else None)


def find_python(minor: str) -> tuple[Optional[Interpreter], list[str]]:
    """CPython ``minor`` (``3.12``), and the places looked at (for a skip reason naming them)."""
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
    root = _pyenv_root()
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


def forge_requirements() -> list[str]:
    """The forge's pinned requirements (cache tools, build backends), read from its pyproject.toml."""
    import tomllib

    data = tomllib.loads((FORGE_ROOT / "pyproject.toml").read_text())
    return sorted(data["project"]["dependencies"])


def forge_digest() -> str:
    """A digest of the forge's own source: a changed forge makes new environments."""
    h = hashlib.sha256()
    files = [FORGE_ROOT / "pyproject.toml", *sorted((FORGE_ROOT / "cuw").rglob("*"))]
    for path in files:
        if path.is_file() and path.suffix in (".py", ".c", ".toml", ".txt", ".json", ".yml"):
            h.update(str(path.relative_to(FORGE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Spec:
    """What one cell's environment holds; its key names the venv."""

    python: Interpreter
    torch: Optional[str]  # a pip requirement (torch==2.14.1, torch==2.13.*), None for torch-free
    torch_index: Optional[str]

    def inputs(self) -> dict:
        return {
            "python": [self.python.version, self.python.path],
            "torch": self.torch,
            "torch_index": self.torch_index if self.torch else None,
            "forge_requirements": forge_requirements(),
            "forge": forge_digest(),
        }

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs(), sort_keys=True).encode()).hexdigest()[:16]

    def folder(self, root: Path) -> Path:
        minor = ".".join(self.python.version.split(".")[:2])
        torch = re.sub(r"[^0-9.]", "", self.torch.split("==", 1)[1]).rstrip(".") if self.torch else "notorch"
        return root / f"py{minor}-{'torch' + torch if self.torch else torch}-{self.key()}"


def torch_requirement(line: str) -> str:
    """The torch a cell of ``line`` (``2.14``) gets: the forge's own when it is of that line, else the newest patch."""
    from cuw.config.cell import installed_torch

    if installed_torch() == line:
        from importlib import metadata

        return f"torch=={metadata.version('torch').split('+')[0]}"
    return f"torch=={line}.*"


def _run(cmd: list[str], what: str, log) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise CuwError(f"{what} failed (exit {proc.returncode}); its output is in {log.name}")


def ensure(spec: Spec, root: Optional[Path] = None) -> tuple[Path, bool]:
    """The environment's ``bin/python`` and whether it was reused (made when its key is new)."""
    venv = spec.folder(root or default_root())
    python = venv / "bin" / "python"
    if (venv / READY).is_file() and python.exists():
        return python, True
    # A venv cannot be made elsewhere and moved (its scripts name their folder): another
    # job making the same one is waited for under a lock instead.
    with held(venv.parent / f"{venv.name}.lock"):
        if (venv / READY).is_file() and python.exists():
            return python, True
        if venv.exists():
            shutil.rmtree(venv)  # left half-made by an interrupted run
        log_path = venv.parent / f"{venv.name}.log"
        with open(log_path, "w") as log:
            _run([spec.python.path, "-m", "venv", str(venv)], f"making the venv {venv} with {spec.python.where}", log)
            pip = [str(python), "-m", "pip", "install", "--quiet"]
            if spec.torch:
                index = ["--index-url", spec.torch_index] if spec.torch_index else []
                _run([*pip, spec.torch, *index], f"installing {spec.torch} into {venv}", log)
            _run([*pip, "-e", str(FORGE_ROOT)], f"installing the forge ({FORGE_ROOT}) into {venv}", log)
        (venv / READY).write_text(json.dumps(spec.inputs(), indent=2, sort_keys=True) + "\n")
    return python, False
