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
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

import cuw
from cuw.base import tomlfile
from cuw.base.errors import CuwError
from cuw.base.files import held
from cuw.toolchain.pythons import Interpreter as Interpreter, find_python as find_python  # this module's callers name them here

READY = ".cuw-cell-env.json"
FORGE_ROOT = Path(cuw.FORGE_ROOT)


def forge_requirements() -> list[str]:
    """The forge's pinned requirements (cache tools, build backends), read from its pyproject.toml."""
    data = tomlfile.loads((FORGE_ROOT / "pyproject.toml").read_text())
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


def _run(cmd: list[str], what: str, log: IO[str]) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        # A venv or a pip install (a missing Python or an index out of reach): the log says which.
        raise CuwError(f"{what} failed (exit {proc.returncode}); its output is in {log.name}")


def ensure(spec: Spec, root: Path) -> tuple[Path, bool]:
    """The environment's ``bin/python`` under ``root`` (the run's ``$CUW_CELL_VENVS``) and whether it
    was reused (made when its key is new)."""
    venv = spec.folder(root)
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
