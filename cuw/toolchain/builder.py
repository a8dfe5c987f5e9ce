"""Who builds a wheel: the image a job runs in (or the host), its glibc, libstdc++ and host
compiler, and the manylinux floor that follows from them.

The floor is computed, never chosen: a wheel built against glibc 2.31 can claim
``manylinux_2_31`` and no lower, whatever a policy file says. A shard records its builder in
its archive and the link refuses archives from another builder (a compile cached in another
image would be linked into a wheel whose floor it does not meet).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Optional

from cuw.base.errors import InputError
from cuw.base.settings import Settings
from cuw.base.versions import version_key

IMAGE_VAR = "CUW_BUILD_IMAGE"
"""Set by the container launcher (:mod:`cuw.jobs.container`) inside a job's container:
``<reference>@<image id>``. Absent on the host."""


@dataclass(frozen=True)
class Builder:
    image: Optional[str]  # "<ref>@sha256:…", None for the host
    arch: str  # x86_64, aarch64
    glibc: Optional[str]  # "2.31"; None off glibc (Windows, musl)
    glibcxx: Optional[str]  # the newest GLIBCXX_ version the C++ runtime defines, "3.4.28"
    compiler: str  # the host C++ compiler's first --version line

    @property
    def where(self) -> str:
        return f"in image {self.image}" if self.image else "on the host"

    @property
    def floor(self) -> Optional[str]:
        """``manylinux_2_31_x86_64``: the lowest manylinux policy whose glibc is the builder's."""
        return floor_for(self.glibc, self.arch) if self.glibc else None

    def describe(self) -> str:
        return f"{self.where} (glibc {self.glibc or 'none'}, {self.compiler or 'no C++ compiler'})"

    def to_dict(self) -> dict:
        return {**asdict(self), "floor": self.floor}

    @classmethod
    def from_dict(cls, data: object, what: str) -> "Builder":
        keys = ("image", "arch", "glibc", "glibcxx", "compiler")
        if not isinstance(data, dict) or not all(k in data for k in keys):
            raise InputError(f"{what}: its builder record is missing or malformed (needs {', '.join(keys)})")
        values = {k: data[k] for k in keys}
        if not all(v is None or isinstance(v, str) for v in values.values()) or not values["arch"]:
            raise InputError(f"{what}: its builder record is malformed")
        return cls(**values)

    def same_as(self, other: "Builder") -> bool:
        """Whether caches made by ``other`` are fit for this builder: one image (by id), or the
        same host toolchain (glibc and compiler) when neither ran in an image."""
        if (self.image is None) != (other.image is None):
            return False
        if self.image is not None:
            return self.image.rsplit("@", 1)[-1] == (other.image or "").rsplit("@", 1)[-1]
        return (self.arch, self.glibc, self.compiler) == (other.arch, other.glibc, other.compiler)


@lru_cache(maxsize=None)
def _manylinux_policies(arch: str) -> tuple[str, ...]:
    """auditwheel's manylinux policies for ``arch`` (``manylinux_2_31``), oldest first."""
    data = json.loads(resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text())
    names = [p["name"] for p in data if re.fullmatch(r"manylinux_\d+_\d+", p["name"]) and arch in p.get("symbol_versions", {})]
    return tuple(sorted(names, key=version_key))


def floor_for(glibc: str, arch: str) -> str:
    """The manylinux tag a wheel built against ``glibc`` can claim (PEP 600 names tags by glibc):
    ``manylinux_2_31_x86_64``; where auditwheel has no policy of that name, its next one up."""
    wanted = version_key(glibc)[:2]
    known = [name for name in _manylinux_policies(arch) if version_key(name)[:2] >= wanted]
    name = known[0] if known else f"manylinux_{wanted[0]}_{wanted[1] if len(wanted) > 1 else 0}"
    return f"{name}_{arch}"


def _glibcxx(compiler: Optional[str]) -> Optional[str]:
    """The newest GLIBCXX_ version of the libstdc++ ``compiler`` links against."""
    if not compiler:
        return None
    try:
        out = subprocess.run([compiler, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True, timeout=60)
        path = Path(out.stdout.strip()).resolve()
        data = path.read_bytes() if out.returncode == 0 and path.is_file() else b""
    except (OSError, subprocess.SubprocessError):
        return None
    found = {m.decode() for m in re.findall(rb"GLIBCXX_(\d+\.\d+(?:\.\d+)?)\x00", data)}
    return max(found, key=version_key) if found else None


def _compiler(cxx: str) -> tuple[Optional[str], str]:
    """The host C++ compiler a build uses (``cxx``, the run's ``$CXX``, else ``c++``/``g++`` on PATH)
    and its first line."""
    named = cxx.split()
    for candidate in ([named[0]] if named else []) + ["c++", "g++"]:
        path = shutil.which(candidate)
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, errors="replace", timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0 and out.stdout.strip():
                return path, out.stdout.strip().splitlines()[0].strip()
    return None, ""


# Linux's machine names and the ones Debian and the container engines give the same machines.
PLATFORM_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def linux_machine(name: Optional[str] = None) -> str:
    """A machine as Linux names it (``aarch64``), from an engine's or Debian's name (``arm64``);
    without a name, this machine."""
    name = name or platform.machine()
    return {v: k for k, v in PLATFORM_ARCH.items()}.get(name.lower(), name)


def current_builder(settings: Settings) -> Builder:
    """This process's builder: the image named by the run's ``$CUW_BUILD_IMAGE`` (set by the launcher),
    or the host (``settings``: the run's)."""
    return _builder(settings.build_image, settings.cxx)


@lru_cache(maxsize=None)
def _builder(image: Optional[str], cxx: str) -> Builder:
    glibc = None
    try:
        glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1]  # "glibc 2.31"
    except (AttributeError, ValueError, OSError, IndexError):
        pass
    path, line = _compiler(cxx)
    return Builder(image, linux_machine(), glibc, _glibcxx(path), line)
