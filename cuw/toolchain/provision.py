"""A CUDA toolkit provisioned from NVIDIA's pinned PyPI wheels (CUDA 13 lines).

``nvidia-cuda-nvcc``, ``-runtime``, ``-cccl``, ``-crt`` and ``nvidia-nvvm`` of one CUDA 13
release, installed with ``pip install --target``, form an ``nvidia/cu13`` tree holding
``bin/nvcc``, ``nvvm/bin/cicc``, ``include`` and ``lib``. It becomes a toolkit of the usual
shape with two links: ``lib64 -> lib`` (nvcc.profile links from ``lib64``) and
``libcudart.so`` (the wheel ships only ``libcudart.so.13``). NVIDIA's CUDA 12 wheels ship
``ptxas`` but no ``nvcc`` driver, so a 12.x line cannot be provisioned this way.

The pins come from the farm policy (``toolkit_wheels`` in ``recipes/defaults.yml``); the
tree is made once under ``<root>/cuda<line>-<key>`` (the key: the pins and the platform),
in a staging folder renamed into place only after the install finished and its nvcc
answered ``--version`` with the line, so an interrupted install is never taken as ready.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cuw.base.errors import CuwError, InputError
from cuw.base.files import held
from cuw.toolchain.toolkit import Toolkit, _version_of

READY = ".cuw-toolkit.json"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!-]*$")
NO_NVCC_WHEEL = "NVIDIA's CUDA {major} wheels ship ptxas but no nvcc driver, so a {line} line needs a system toolkit"


def check_pins(line: str, pins: list[str], where: str) -> None:
    """Exact ``name==version`` pins for a line that has an nvcc wheel (CUDA 13 and later)."""
    major = line.split(".")[0]
    if not major.isdigit() or int(major) < 13:
        raise InputError(
            f"{where}: {NO_NVCC_WHEEL.format(major=major, line=line)}; remove the entry "
            f"(and use system or a toolkit path for {line})"
        )
    if not pins:
        raise InputError(f"{where}: no pins; list the wheels, e.g. [nvidia-cuda-nvcc==13.0.88, nvidia-nvvm==13.0.88, …]")
    for pin in pins:
        if not isinstance(pin, str) or not PIN.match(pin):
            raise InputError(f"{where}: {pin!r} is not an exact pin (name==version, e.g. nvidia-cuda-nvcc==13.0.88)")
    if not any(p.lower().startswith(("nvidia-cuda-nvcc==", "nvidia_cuda_nvcc==")) for p in pins):
        raise InputError(f"{where}: no nvidia-cuda-nvcc pin: the toolkit's nvcc comes from it")


@dataclass(frozen=True)
class WheelToolkit:
    """One CUDA line's toolkit from pinned wheels, and where it lives."""

    line: str  # "13.0"
    pins: tuple[str, ...]

    def inputs(self) -> dict:
        return {"line": self.line, "pins": sorted(self.pins), "platform": f"{sys.platform}-{host.machine()}"}

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs(), sort_keys=True).encode()).hexdigest()[:16]

    def folder(self, root: Path) -> Path:
        return root / f"cuda{self.line}-{self.key()}"

    def home(self, root: Path) -> Path:
        return self.folder(root) / "site" / "nvidia" / f"cu{self.line.split('.')[0]}"


@dataclass(frozen=True)
class Provisioned:
    toolkit: Toolkit
    reused: bool
    seconds: float
    size_mb: float


def _ready(spec: WheelToolkit, root: Path) -> Optional[Toolkit]:
    folder = spec.folder(root)
    home = spec.home(root)
    if (folder / READY).is_file() and (home / "bin" / "nvcc").is_file():
        return Toolkit(home, spec.line, windows=False)
    return None


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def ensure(spec: WheelToolkit, root: Path, python: str = sys.executable) -> Provisioned:
    """The line's toolkit from its pinned wheels under ``root`` (the run's ``$CUW_TOOLKITS``): reused
    when ready, else installed (once, under a lock)."""
    if sys.platform.startswith("win"):
        raise InputError(
            f"toolkits.{spec.line} = wheels: the wheel toolkit is provisioned on Linux only; "
            f"use system (.github/scripts/install-cuda.ps1) or a toolkit path on Windows"
        )
    check_pins(spec.line, list(spec.pins), f"toolkit_wheels.{spec.line}")
    start = time.monotonic()
    found = _ready(spec, root)
    if found:
        return Provisioned(found, True, time.monotonic() - start, _recorded_size(spec.folder(root)))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # A shared cache folder, not a result: a full or read-only disk, whoever chose the folder.
        raise CuwError(f"cannot make the toolkit cache {root}: {exc.strerror}; set CUW_TOOLKITS to a writable folder") from None
    with held(root / f"{spec.folder(root).name}.lock"):  # another job on this machine may be installing the same pins
        found = _ready(spec, root)
        if found:
            return Provisioned(found, True, time.monotonic() - start, _recorded_size(spec.folder(root)))
        folder = spec.folder(root)
        stage = root / f".{folder.name}.stage-{os.getpid()}"
        for half_made in (folder, stage):
            if half_made.exists():
                shutil.rmtree(half_made)  # left by an interrupted install
        stage.mkdir()
        log_path = root / f"{folder.name}.log"
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(stage / "site"),
            *spec.pins,
        ]
        with open(log_path, "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            shutil.rmtree(stage, ignore_errors=True)
            raise CuwError(  # pip's reason, in its log: most often the index, out of reach
                f"installing the CUDA {spec.line} toolkit wheels ({' '.join(spec.pins)}) failed "
                f"(exit {proc.returncode}); pip's output is in {log_path}"
            )
        staged_home = stage / spec.home(root).relative_to(folder)
        _complete(staged_home, spec)
        ready = {**spec.inputs(), "size_mb": round(_size_mb(stage), 1), "install_s": round(time.monotonic() - start, 1)}
        (stage / READY).write_text(json.dumps(ready, indent=2, sort_keys=True) + "\n")
        stage.rename(folder)
    toolkit = _ready(spec, root)
    assert toolkit is not None
    return Provisioned(toolkit, False, time.monotonic() - start, _recorded_size(folder))


def _recorded_size(folder: Path) -> float:
    try:
        return float(json.loads((folder / READY).read_text()).get("size_mb", 0.0))
    except (OSError, ValueError):
        return 0.0


def _complete(home: Path, spec: WheelToolkit) -> None:
    """The links a system toolkit has and the wheels lack; then nvcc must report the line."""
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise InputError(
            f"toolkit_wheels.{spec.line}: the pinned wheels installed no {nvcc.relative_to(home.parents[2])}; "
            "pin nvidia-cuda-nvcc of that line"
        )
    if (home / "lib").is_dir() and not (home / "lib64").exists():
        (home / "lib64").symlink_to("lib")
    for versioned in sorted((home / "lib").glob("libcudart.so.*")):
        plain = home / "lib" / "libcudart.so"
        if not plain.exists():
            plain.symlink_to(versioned.name)
    if not (home / "nvvm" / "bin" / "cicc").is_file():
        raise InputError(
            f"toolkit_wheels.{spec.line}: no nvvm/bin/cicc in the installed wheels; pin nvidia-nvvm=={spec.line}.*'s release"
        )
    version = _version_of(str(nvcc))
    if version != spec.line:
        raise InputError(
            f"toolkit_wheels.{spec.line}: the pinned nvcc reports CUDA {version}, not {spec.line}; "
            f"pin the {spec.line} release of every wheel"
        )
