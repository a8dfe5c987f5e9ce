"""The verify gate: is this wheel what its cell promises? No GPU needed.

Each check is a small function returning its findings; :func:`verify` runs
them all (one failure does not hide another) and returns a report. Exit
codes of the CLI: 0 pass, 1 the wheel failed, 2 the gate itself could not run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Collection, Optional

from packaging.tags import Tag
from packaging.utils import canonicalize_name
from packaging.metadata import parse_email
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelError, WheelFile

from cuw.config.cell import Cell
from cuw.base.errors import CuwError, ToolError
from cuw.base.records import VerifyCheck, VerifyReport, write_verify_report
from cuw.base.files import place_text
from cuw.base.settings import Settings, process_environ
from cuw.base.versions import version_key
from cuw.config import lanes
from cuw.wheel import upstream_tests
from cuw.wheel.binaries import Binary, read_binary
from cuw.wheel.finish import local_label
from cuw.wheel.target_install import install_into
from cuw.wheel.variants import parse_wheel_name, properties, read_variant
from cuw.config.grid import parse_arch
from cuw.config.policy import WheelPolicy
from cuw.config.recipe import Recipe
from cuw.toolchain.toolkit import Toolkit, find_cuobjdump

# DT_NEEDED every wheel may carry besides what the policy keeps out of it
# (wheel.exclude: the CUDA runtime and driver, torch): the C/C++ runtime.
C_RUNTIME = (
    "libc.so.*",
    "libm.so.*",
    "libdl.so.*",
    "libpthread.so.*",
    "librt.so.*",
    "ld-linux*.so.*",
    "libgcc_s.so.*",
    "libstdc++.so.*",
)


def manylinux_whitelist(platform_tag: Optional[str]) -> tuple[str, ...]:
    """The system libraries auditwheel's policy lets a wheel of this platform tag depend on
    (``manylinux_2_34_x86_64`` -> its ``lib_whitelist``: glibc's libmvec, libz, ...)."""
    if not platform_tag:
        return ()
    name = re.sub(r"_(x86_64|aarch64|i686|ppc64le|s390x|armv7l)$", "", platform_tag)
    try:
        data = json.loads(resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text())
    except (ModuleNotFoundError, FileNotFoundError, ValueError):
        return ()
    return next((tuple(p["lib_whitelist"]) for p in data if p.get("name") == name), ())


# Evidence that a library links torch.
TORCH_LIBS = ("libtorch*.so*", "libc10*.so*", "libshm.so*")

# The Windows lane's analogues, matched case-insensitively (DLL names are): what a .pyd may
# import besides the DLLs shipped in the wheel and the recipe's verify.allowed_needed.
# The OS (API sets, system DLLs), the MSVC runtime (VC++ redistributable, on every runner and
# every machine with Python), and msvcrt.dll, which mingw-w64 builds link.
WINDOWS_SYSTEM_DLLS = (
    "api-ms-win-*.dll",
    "ext-ms-win-*.dll",
    "kernel32.dll",
    "kernelbase.dll",
    "ntdll.dll",
    "user32.dll",
    "gdi32.dll",
    "advapi32.dll",
    "shell32.dll",
    "shlwapi.dll",
    "ole32.dll",
    "oleaut32.dll",
    "ws2_32.dll",
    "bcrypt.dll",
    "crypt32.dll",
    "secur32.dll",
    "version.dll",
    "winmm.dll",
    "psapi.dll",
    "dbghelp.dll",
    "iphlpapi.dll",
    "setupapi.dll",
    "rpcrt4.dll",
    "userenv.dll",
    "comctl32.dll",
    "comdlg32.dll",
    "imm32.dll",
    "ucrtbase.dll",
    "msvcrt.dll",
    "vcruntime140.dll",
    "vcruntime140_1.dll",
    "msvcp140*.dll",
    "concrt140.dll",
    "vcomp140.dll",
)
# The CUDA runtime and libraries (never shipped: the toolkit or the nvidia-* wheels provide them).
CUDA_DLLS = (
    "nvcuda.dll",
    "cudart64_*.dll",
    "cublas64_*.dll",
    "cublaslt64_*.dll",
    "cusparse64_*.dll",
    "cufft64_*.dll",
    "cufftw64_*.dll",
    "curand64_*.dll",
    "cusolver64_*.dll",
    "cusolvermg64_*.dll",
    "nvrtc64_*.dll",
    "nvrtc-builtins64_*.dll",
    "nvjitlink_*.dll",
    "nvtoolsext64_*.dll",
    "cudnn*64_*.dll",
    "nvtx*.dll",
)
TORCH_DLLS = (
    "torch.dll",
    "torch_cpu.dll",
    "torch_cuda*.dll",
    "torch_python.dll",
    "c10.dll",
    "c10_cuda.dll",
    "torch_global_deps.dll",
)


class GateCannotRun(ToolError):
    """The verify gate cannot run here (no cuobjdump, a Windows wheel's import check elsewhere): exit 2."""


Check = VerifyCheck
"""A check and what it found: the record the report carries (:mod:`cuw.base.records`)."""


class Report(VerifyReport):
    """The verify gate's result: the record written as ``<wheel>.verify.json``, and how it is shown."""

    @property
    def line(self) -> str:
        if self.ok:
            return f"verify gate PASS: {len(self.checks)} checks on {Path(self.wheel).name}"
        failed = [f"{c.name}: {c.details[0] if c.details else 'failed'}" for c in self.checks if not c.ok]
        return "verify gate FAIL: " + "; ".join(failed)

    def to_markdown(self) -> str:
        rows = [
            f"### verify {Path(self.wheel).name}: {'✅ pass' if self.ok else '❌ FAIL'}",
            "",
            "| check | | details |",
            "|---|---|---|",
        ]
        for c in self.checks:
            rows.append(f"| {c.name} | {'✅' if c.ok else '❌'} | {'; '.join(c.details)[:300]} |")
        return "\n".join(rows) + "\n"


def _allowed(soname: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatch(soname, p) for p in patterns)


def _python_dll(dll: str, python: str) -> Optional[bool]:
    """For ``python3.dll`` / ``python3X.dll``: whether it is the cell's Python (``python3.dll``
    is the stable ABI, any 3.x); None for any other DLL."""
    match = re.fullmatch(r"python(\d)(\d*)(?:_d)?\.dll", dll.lower())
    if not match:
        return None
    return match.group(2) == "" or f"{match.group(1)}.{match.group(2)}" == python


def _foreign_needed(binary: Binary, shipped: set[str], allowed: tuple[str, ...], python: str) -> list[str]:
    """The libraries a binary needs that nothing allows: not shipped, not the runtime, CUDA or
    torch, not the recipe's. PE names are matched case-insensitively, and a ``python3X.dll``
    must be the cell's Python."""
    if binary.kind == "elf":
        return [f"{binary.path}: {n}" for n in binary.needed if n not in shipped and not _allowed(n, allowed)]
    shipped_lower = {n.lower() for n in shipped}
    windows = WINDOWS_SYSTEM_DLLS + CUDA_DLLS + TORCH_DLLS + tuple(p.lower() for p in allowed)
    foreign = []
    for dll in binary.needed:
        python_ok = _python_dll(dll, python)
        if python_ok is False:
            foreign.append(f"{binary.path}: {dll} (the cell is Python {python})")
        elif python_ok is None and dll.lower() not in shipped_lower and not _allowed(dll.lower(), windows):
            foreign.append(f"{binary.path}: {dll}")
    return foreign


def _torch_needed(binary: Binary) -> list[str]:
    if binary.kind == "elf":
        return [n for n in binary.needed if _allowed(n, TORCH_LIBS)]
    return [n for n in binary.needed if _allowed(n.lower(), TORCH_DLLS)]


EXTENSION_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\.(cpython|cp|abi3|pypy)[^/]*)?\.(pyd|so)")


def loaded_libraries(binaries: list[Binary], patterns: list[str]) -> list[str]:
    """The wheel paths of ``verify.load_libraries``: libraries named like modules, loaded, not imported."""
    return [b.path for b in binaries if any(fnmatch.fnmatchcase(b.path, p) for p in patterns)]


def _pyinit_check(binaries: list[Binary], load_libraries: Optional[list[str]] = None) -> Check:
    """Every extension module (``name.pyd``, ``name.cp311-win_amd64.pyd``,
    ``name.cpython-311-x86_64-linux-gnu.so``, ``name.abi3.so``) exports ``PyInit_<name>``:
    the import check's evidence where the wheel cannot be imported (a Windows wheel here). A file
    named like a module without any ``PyInit_`` fails unless the recipe lists it in
    ``verify.load_libraries`` (a torch operator library, loaded by ``torch.ops.load_library``)."""
    problems, notes, modules = [], [], 0
    listed = set(loaded_libraries(binaries, load_libraries or []))
    for b in binaries:
        base = Path(b.path).name
        match = EXTENSION_NAME.fullmatch(base)
        if ".libs/" in b.path or not match or (base.endswith(".so") and not match.group(2)):
            continue  # a plain shared library (libfoo.so, foo.dll), not a module
        if b.exports_pyinit is None and b.path in listed:
            notes.append(f"{b.path}: no PyInit_*, loaded as a library (verify.load_libraries)")
            continue
        if b.exports_pyinit is None:
            problems.append(
                f"{b.path}: named like an extension module but exports no PyInit_{match.group(1)}: Python "
                "cannot import it; if torch.ops.load_library or ctypes loads it, list it in the recipe's "
                "verify.load_libraries"
            )
            continue
        modules += 1
        if b.exports_pyinit != match.group(1):
            found = f"PyInit_{b.exports_pyinit}" if b.exports_pyinit else "no PyInit_* export"
            problems.append(f"{b.path}: exports {found}, its name needs PyInit_{match.group(1)}")
    return Check("pyinit", not problems, problems or [f"{modules} extension module(s) export PyInit_<name>", *notes])


def _record_lines(wheel: Path) -> list[str]:
    """Problems with the lines of the wheel's RECORD (path,algorithm=digest,size), each naming its line;
    the wheel library would stop at the first one with an exception."""
    import csv
    import io

    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.lower().endswith(".dist-info/record")]
        if not names:
            return []  # WheelFile names the missing RECORD
        data = zf.read(names[0])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [f"{names[0]} is not UTF-8 text (a CSV of path,sha256=digest,size expected)"]
    problems = []
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        return [f"{names[0]}: not CSV ({exc})"]
    for n, row in enumerate(rows, 1):
        if not row:
            continue
        if len(row) != 3:
            problems.append(f"{names[0]} line {n}: {len(row)} fields, path,hash,size expected")
            continue
        digest = row[1]
        if digest:
            algorithm, eq, value = digest.partition("=")
            if not eq or not algorithm or not re.fullmatch(r"[A-Za-z0-9_-]+=*", value):
                problems.append(f"{names[0]} line {n}: hash {digest!r} is not algorithm=urlsafe-base64 digest")
    return problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10 else [])


def _metadata_problems(members: dict[str, bytes], name: str, version: Version) -> list[str]:
    """METADATA's Name and Version against the file name's (a renamed wheel says another version)."""
    meta_name = next((n for n in members if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
    fields, _unparsed = parse_email(members.get(meta_name or "", b""))
    problems = []
    try:
        same_version = Version(fields.get("version", "0")) == version
    except InvalidVersion:
        same_version = False
    if not same_version:
        problems.append(f"METADATA Version {fields.get('version')!r} != filename {version}")
    if canonicalize_name(fields.get("name", "")) != canonicalize_name(name):
        problems.append(f"METADATA Name {fields.get('name')!r} != filename {name}")
    return problems


def _unsafe_member(name: str) -> bool:
    """A member that would land outside site-packages (or on another drive) when installed."""
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or any(re.match(r"^[A-Za-z]:", p) for p in parts)


def integrity(wheel: Path) -> list[str]:
    """What a wheel must be before anyone installs it, whoever built it: a wheel file name, a
    RECORD whose every line parses and whose hashes match every member (read in full), no member
    outside the install tree, METADATA naming the file's name and version. Empty: sound."""
    try:
        name, version, _, _ = parse_wheel_name(wheel.name)
    except (ValueError, CuwError) as exc:
        return [f"not a wheel filename: {exc}"]
    try:
        problems = _record_lines(wheel)
        if problems:
            return problems
        with WheelFile(wheel) as wf:  # reading a member checks it against RECORD
            members = {i.filename: wf.read(i) for i in wf.infolist() if not i.is_dir()}
    except (WheelError, zipfile.BadZipFile, OSError, ValueError) as exc:
        return [f"RECORD or archive: {exc}"]
    unsafe = sorted(n for n in members if _unsafe_member(n))
    if unsafe:
        return [f"member {unsafe[0]!r} would be installed outside site-packages"]
    try:
        read_variant(wheel)  # a label names its variant.json and that file only it
    except CuwError as exc:
        return [str(exc)]
    return _metadata_problems(members, name, version)


def verify(
    wheel: Path,
    recipe: Recipe,
    cell: Cell,
    toolkit: Toolkit,
    policy: WheelPolicy,
    archs: list[str],
    import_check: bool = True,
    torch_patches: Optional[TorchPatches] = None,
    floor: Optional[str] = None,
    cuobjdump: Optional[str] = None,
    tests: Optional[upstream_tests.Fetch] = None,
) -> Report:
    """``torch_patches``: also import the wheel under every patch release of the cell's torch line.
    ``tests``: brings the tests' source tree (the jobs layer's fetcher): with an import check, the
    recipe's ``verify.tests`` run against the wheel after it (:mod:`cuw.wheel.upstream_tests`).
    ``floor``: the manylinux tag of the builder that made the wheel (the link job passes its own);
    the wheel's tag must be it. Without one, the wheel's own tag is what its symbols are held to.
    ``cuobjdump``: the run's ``$CUW_CUOBJDUMP``, the arch check's reader instead of the toolkit's."""
    try:
        name, version, _, tags = parse_wheel_name(wheel.name)
    except Exception as exc:  # packaging raises several types for a bad name
        return Report(str(wheel), [Check("filename", False, [f"not a wheel filename: {exc}"])])
    checks = [_filename_check(name, version, tags, recipe, cell), python_tag_check(recipe, cell, tags)]
    linux_tags = sorted({t.platform for t in tags if t.platform.startswith("manylinux_")}, key=version_key)
    members, record = _read_members(wheel)
    checks.append(record)
    if members is None:
        return Report(str(wheel), checks)
    checks.append(_size_check(wheel, members, policy.max_size_mb.get(cell.lane), cell.lane))
    problems = _metadata_problems(members, name, version)
    checks.append(Check("metadata", not problems, problems or ["Name and Version agree"]))
    with tempfile.TemporaryDirectory(prefix="cuw-verify-") as tmp:
        scratch = Path(tmp)
        elves = [e for e in (read_binary(n, d, scratch) for n, d in members.items()) if e]
        checks.append(Check("compiled", bool(elves), [e.path for e in elves] or ["no compiled code in the wheel"]))
        checks.append(_needed_check(elves, members, recipe, cell, policy, linux_tags))
        bad_rpath = [f"{e.path}: {p}" for e in elves for p in e.rpaths if not p.startswith("$ORIGIN")]
        checks.append(Check("rpath", not bad_rpath, bad_rpath or ["every RPATH starts with $ORIGIN"]))
        checks.append(glibc_check(elves, linux_tags, floor))
        checks.append(_links_torch_check(elves, recipe))
        checks.append(_pyinit_check(elves, recipe.verify.load_libraries))
        checks.append(_arch_check(elves, scratch, archs, toolkit, recipe.device_code, cuobjdump))
        checks += _variant_check(wheel, elves, scratch, cell, toolkit, cuobjdump)
    extra: dict[str, Any] = {}
    if import_check:
        checks.append(_import_check(wheel, members, elves, recipe, requires=import_requirements(recipe, cell)))
        if recipe.verify.tests.paths and tests is not None:
            checks.append(_tests_check(wheel, list(members), recipe, cell, tests, imported=checks[-1].ok, extra=extra))
    if torch_patches is not None:
        checks.append(_torch_patch_check(wheel, members, elves, recipe, cell, torch_patches))
    return Report(str(wheel), checks, extra)


def _tests_check(
    wheel: Path,
    members: list[str],
    recipe: Recipe,
    cell: Cell,
    fetch: upstream_tests.Fetch,
    imported: bool,
    extra: dict[str, Any],
) -> Check:
    """The recipe's upstream tests after the import check; their counts into ``extra["tests"]``
    (the verify report's ``tests`` field, which the build record carries)."""
    if not imported:
        return Check(upstream_tests.CHECK, False, ["upstream tests not run: the import check failed"])
    from cuw.gates import report

    tests = recipe.verify.tests
    report.say(
        f"verify: upstream tests {', '.join(tests.paths)} of {recipe.key} against {wheel.name} (at most {tests.timeout_s} s)"
    )
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cuw-tests-") as tmp:
        check, counts = upstream_tests.run_tests(wheel, members, recipe, import_requirements(recipe, cell), fetch, Path(tmp), log)
    if counts is not None:
        extra["tests"] = counts
    return check


def _filename_check(name: str, version: Version, tags: frozenset[Tag], recipe: Recipe, cell: Cell) -> Check:
    """The filename agrees with the cell: the distribution, the local label, the platform tags."""
    problems = []
    if canonicalize_name(name) != canonicalize_name(recipe.name):
        problems.append(f"distribution {name}, recipe names {recipe.name}")
    expected_label = local_label(cell)
    if version.local != expected_label:
        problems.append(f"local version label {version.local!r}, the cell needs {expected_label!r}")
    target = lanes.lane(cell.lane)
    if target.os == "linux" and not all(t.platform.endswith(target.wheel_platform) and "linux" in t.platform for t in tags):
        problems.append(f"platform tags {sorted({t.platform for t in tags})} are not {cell.lane}")
    if target.os == "windows" and not all(t.platform == target.wheel_platform for t in tags):
        problems.append(f"platform tags {sorted({t.platform for t in tags})} are not {target.wheel_platform}")
    return Check("filename", not problems, problems or [f"{name} {version} for {cell.id}"])


def _read_members(wheel: Path) -> tuple[Optional[dict[str, bytes]], Check]:
    """The wheel's files once its RECORD holds, with the record check; None when it does not."""
    try:
        record_problems: list[str] = _record_lines(wheel)
        if record_problems:
            return None, Check("record", False, record_problems)
        with WheelFile(wheel) as wf:
            members = {i.filename: wf.read(i) for i in wf.infolist() if not i.is_dir()}
    except (WheelError, zipfile.BadZipFile, OSError, ValueError) as exc:  # ValueError: a RECORD hash it cannot decode
        return None, Check("record", False, [str(exc)])
    return members, Check("record", True, [f"{len(members)} files match RECORD"])


def _needed_check(
    elves: list[Binary], members: dict[str, bytes], recipe: Recipe, cell: Cell, policy: WheelPolicy, linux_tags: list[str]
) -> Check:
    shipped = {Path(n).name for n in members}
    linux_tag = linux_tags[0] if linux_tags else None
    allowed = (
        C_RUNTIME + manylinux_whitelist(linux_tag) + TORCH_LIBS + tuple(policy.exclude) + tuple(recipe.verify.allowed_needed)
    )
    foreign = [f for e in elves for f in _foreign_needed(e, shipped, allowed, cell.python)]
    return Check("needed", not foreign, foreign or ["every DT_NEEDED / imported DLL is runtime, CUDA, torch or shipped"])


def _links_torch_check(elves: list[Binary], recipe: Recipe) -> Check:
    links = [f"{e.path}: {n}" for e in elves for n in _torch_needed(e)]
    if recipe.links_torch and not links:
        return Check("links_torch", False, ["recipe says links_torch: true, no library needs torch"])
    if not recipe.links_torch and links:
        return Check("links_torch", False, [f"recipe says links_torch: false, but {links[0]}"])
    return Check("links_torch", True, links[:3] or ["torch-free, as the recipe says"])


def glibc_check(elves: list, linux_tags: list[str], floor: Optional[str]) -> Check:
    """Every GLIBC symbol version within what the wheel's lowest manylinux tag promises (auditwheel
    adds the lowest tag the symbols allow to the one it repairs to); and, where the builder is known
    (the link job), its floor is the highest tag: no tag claims more than the image that built it."""
    newest = max((v for e in elves for v in e.glibc), key=version_key, default=None)
    if not linux_tags:
        return Check("glibc", not newest, [f"needs {newest} but has no manylinux tag" if newest else "no glibc symbols"])
    ordered = sorted(linux_tags, key=version_key)
    lowest, highest = ordered[0], ordered[-1]
    promised = version_key(lowest)[:2]
    problems = []
    if newest and version_key(newest)[:2] > promised:
        problems.append(f"needs {newest}, its tag {lowest} promises glibc {'.'.join(map(str, promised))}")
    if floor and highest != floor:
        problems.append(f"tags {', '.join(ordered)}: the highest is not its builder's floor {floor}")
    where = f"{lowest}" + (f" (built at {highest}, the builder's floor)" if floor and not problems else "")
    return Check("glibc", not problems, problems or [f"needs {newest or 'no GLIBC symbol'}, within {where}"])


def python_tag_check(recipe: Recipe, cell: Cell, tags: Collection[Tag]) -> Check:
    """The wheel's Python and ABI tags against the recipe's ``wheel_python``."""
    declared = recipe.wheel_python
    cp = "cp" + cell.python.replace(".", "")
    fits: Callable[[Tag], bool]
    if declared == "py3":
        want, fits = "py3-none", lambda t: t.interpreter.startswith("py3") and t.abi == "none"
    elif declared == "abi3":
        floor = "cp" + (recipe.abi3_min_python or "").replace(".", "")
        want, fits = f"{floor}-abi3", lambda t: t.interpreter == floor and t.abi == "abi3"
    else:
        want, fits = f"{cp}-{cp}", lambda t: t.interpreter == cp and t.abi not in ("none", "abi3")
    got = sorted({f"{t.interpreter}-{t.abi}" for t in tags})
    if all(fits(t) for t in tags):
        return Check("python_tag", True, [f"{', '.join(got)}, as wheel_python: {declared} declares"])
    actual = next(iter(got), "")
    fix = {"none": "py3", "abi3": "abi3"}.get(actual.partition("-")[2], "per-interpreter")
    return Check(
        "python_tag",
        False,
        [
            f"recipe key wheel_python: {declared} promises {want}, the wheel is {', '.join(got)}: "
            f"set wheel_python: {fix} in {recipe.folder or recipe.key}/recipe.yml, or build the wheel it declares"
        ],
    )


@dataclass(frozen=True)
class TorchPatches:
    """Where the torch releases come from, where their venvs live, and the run's settings (each
    venv's Python is found with them)."""

    index: str
    root: Path
    settings: Settings


def _torch_patch_check(
    wheel: Path, members: dict[str, bytes], elves: list[Binary], recipe: Recipe, cell: Cell, how: TorchPatches
) -> Check:
    """Imports the wheel's modules under every patch release of the cell's torch line (``2.14.0``,
    ``2.14.1``), each in its own clean venv: an ``undefined symbol`` under a release the wheel's
    ``torch==2.14.*`` admits fails here instead of on a user's machine."""
    from cuw.wheel import torch_venvs

    if not recipe.links_torch or not cell.torch:
        return Check("torch-patches", True, ["torch-free: nothing to check"])
    suffix = lanes.lane(cell.lane).wheel_platform
    versions = torch_venvs.releases_on(how.index, cell.torch, cell.python, suffix)
    details, ok = [], True
    for version in versions:
        python = torch_venvs.ensure(version, cell.python, how.root, how.index, how.settings)
        under = _import_check(wheel, members, elves, recipe, python=str(python))
        ok &= under.ok
        details.append(f"torch {version}: " + "; ".join(under.details))
    return Check("torch-patches", ok, details)


def _size_check(wheel: Path, members: dict[str, bytes], limit_mb: Optional[float], lane: str) -> Check:
    """The wheel's size and its largest members, against the lane's limit in the policy
    (``wheel.max_size_mb``: what the index the lane publishes to accepts)."""
    size_mb = wheel.stat().st_size / 2**20
    largest = sorted(members.items(), key=lambda kv: -len(kv[1]))[:3]
    shown = ", ".join(f"{n} {len(d) / 2**20:.1f} MB" for n, d in largest)
    line = f"{size_mb:.1f} MB compressed; largest members (uncompressed): {shown}"
    if limit_mb is None or size_mb <= limit_mb:
        return Check("size", True, [line + (f"; limit {limit_mb:g} MB" if limit_mb is not None else "; no limit set")])
    return Check(
        "size",
        False,
        [
            f"{size_mb:.1f} MB is over the {lane} lane's limit of {limit_mb:g} MB (wheel.max_size_mb in recipes/defaults.yml)",
            line,
            "fix: build fewer archs (the recipe's archs), ship PTX only for the oldest arch instead of SASS, "
            "or split the package by SM family",
        ],
    )


def _variant_check(
    wheel: Path, elves: list[Binary], scratch: Path, cell: Cell, toolkit: Toolkit, named_cuobjdump: Optional[str]
) -> list[Check]:
    """A variant wheel (``wheel.variants``) says what it is: its ``variant.json`` names its label and
    exactly the cell's CUDA line and the device code cuobjdump lists. Nothing for another wheel."""
    try:
        found = read_variant(wheel)
    except CuwError as exc:
        return [Check("variant", False, [str(exc)])]
    if found is None:
        return []
    label, props = found
    sass, ptx = _listed_device_code(elves, scratch, str(find_cuobjdump(toolkit, named_cuobjdump)))
    listed = properties(cell.cuda, sass, ptx)
    if props != listed:
        return [Check("variant", False, [f"variant {label} says {props}, the wheel holds {listed}"])]
    return [Check("variant", True, [f"variant {label}: {props}"])]


def _listed_device_code(elves: list[Binary], scratch: Path, cuobjdump: str) -> tuple[set[str], set[str]]:
    """The arch numbers (``"90"``) of the SASS and the PTX that cuobjdump lists in the compiled files."""
    sass: set[str] = set()
    ptx: set[str] = set()
    for elf in elves:
        lib = scratch / Path(elf.path).name
        for flag, into in (("--list-elf", sass), ("--list-ptx", ptx)):
            out = subprocess.run([cuobjdump, flag, str(lib)], capture_output=True, text=True).stdout
            into.update(re.findall(r"\bsm_(\d+)", out))
    return sass, ptx


def device_code(wheel: Path, toolkit: Toolkit, named_cuobjdump: Optional[str] = None) -> tuple[set[str], set[str]]:
    """The SASS and PTX arch numbers the arch check lists in ``wheel``, read the same way (the
    variant step names them in the wheel before verify reads it)."""
    try:
        cuobjdump = find_cuobjdump(toolkit, named_cuobjdump)
    except CuwError as exc:
        raise GateCannotRun(f"{exc}: the variant's archs cannot be listed") from None
    with WheelFile(wheel) as wf:
        members = {i.filename: wf.read(i) for i in wf.infolist() if not i.is_dir()}
    with tempfile.TemporaryDirectory(prefix="cuw-archs-") as tmp:
        elves = [e for e in (read_binary(n, d, Path(tmp)) for n, d in members.items()) if e]
        return _listed_device_code(elves, Path(tmp), str(cuobjdump))


def _arch_check(
    elves: list[Binary],
    scratch: Path,
    archs: list[str],
    toolkit: Toolkit,
    device_code: bool = True,
    named_cuobjdump: Optional[str] = None,
) -> Check:
    try:
        cuobjdump = find_cuobjdump(toolkit, named_cuobjdump)
    except CuwError as exc:
        raise GateCannotRun(f"{exc}: the arch check cannot run") from None
    sass, ptx = _listed_device_code(elves, scratch, str(cuobjdump))
    if not device_code:  # kernels compiled at run time: device code in the wheel means the recipe is wrong
        found = [f"sm_{n}" for n in sorted(sass)] + [f"compute_{n}" for n in sorted(ptx)]
        if found:
            return Check(
                "arch",
                False,
                [
                    f"recipe says device_code: false, but the wheel has device code: {', '.join(found)} "
                    "(remove device_code: false, or find what compiled it)"
                ],
            )
        return Check("arch", True, ["no device code, as device_code: false says (kernels compiled at run time)"])
    missing = []
    for arch in archs:
        number, wants_ptx = parse_arch(arch)
        if number not in sass:
            missing.append(f"no SASS for sm_{number}")
        if wants_ptx and number not in ptx:
            missing.append(f"no PTX for compute_{number}")
    listed = f"SASS {sorted(sass)}, PTX {sorted(ptx)}"
    return Check("arch", not missing, missing + [listed] if missing else [listed])


def _modules(members: dict[str, bytes], elves: list[Binary]) -> list[str]:
    """Every Python module in the wheel, and every extension module (one with PyInit_)."""
    mods = []
    for name in members:
        if ".dist-info/" in name or ".data/" in name or ".libs/" in name:
            continue
        if name.endswith(".py"):
            mod = name[:-3].replace("/", ".")
            mods.append(mod[: -len(".__init__")] if mod.endswith(".__init__") else mod)
    for elf in elves:
        if elf.exports_pyinit and ".libs/" not in elf.path:
            mods.append(str(Path(elf.path).parent / elf.exports_pyinit).replace("/", ".").lstrip("."))
    return sorted(set(mods))


def import_requirements(recipe: Recipe, cell: Cell) -> list[str]:
    """What the import check installs beside the wheel for a cell: ``verify.import_requires`` and
    the cell's CUDA line's ``verify.import_requires_cuda``."""
    return [*recipe.verify.import_requires, *recipe.verify.import_requires_cuda.get(cell.cuda, [])]


def _clean_env(target: Path, home: str) -> dict[str, str]:
    """A clean process's environment: the wheel's folder on the path, GPUs hidden, nothing else."""
    env = {"PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "HOME": home}
    if sys.platform == "win32":  # Python needs SYSTEMROOT; DLLs resolve from System32
        root = process_environ().get("SYSTEMROOT", "C:\\Windows")
        env.update(SYSTEMROOT=root, PATH=os.path.join(root, "System32"), USERPROFILE=home)
    return env


def _import_check(
    wheel: Path,
    members: dict[str, bytes],
    elves: list[Binary],
    recipe: Recipe,
    python: str = sys.executable,
    requires: Optional[list[str]] = None,
) -> Check:
    pe = [e.path for e in elves if e.kind == "pe"]
    if pe and sys.platform != "win32":
        raise GateCannotRun(
            f"the import check needs Windows for {pe[0]} (a PE file): run verify on a Windows host, or pass --no-import"
        )
    with tempfile.TemporaryDirectory(prefix="cuw-import-") as tmp:
        target = Path(tmp) / "site"
        empty = Path(tmp) / "cwd"
        empty.mkdir()
        refused = _install_for_import(wheel, target, recipe.verify.import_requires if requires is None else requires)
        if refused:
            return Check("import", False, [refused])
        failures, passed = [], 0
        for library in loaded_libraries(elves, recipe.verify.load_libraries):
            # A torch operator library registers its ops with torch when loaded; any other, through ctypes.
            how = "import torch; torch.ops.load_library(p)" if recipe.links_torch else "import ctypes; ctypes.CDLL(p)"
            failed = _in_clean_process([python, "-c", f"import sys; p = sys.argv[1]; {how}", str(target / library)], target, tmp)
            if failed:
                failures.append(f"{library} (verify.load_libraries): {failed}")
            else:
                passed += 1
        for module in _modules(members, elves):
            if module in recipe.verify.skip_import:
                continue
            failed = _in_clean_process([python, "-c", f"import {module}"], target, tmp)
            if failed:
                failures.append(f"{module}: {failed}")
            else:
                passed += 1
        return Check(
            "import", not failures, failures or [f"{passed} modules import (or libraries load) in a clean process, GPUs hidden"]
        )


def _install_for_import(wheel: Path, target: Path, requires: list[str]) -> str:
    """The wheel (without its dependencies, in this process: :mod:`cuw.wheel.target_install`) and the
    runtime dependencies the import needs, pinned in the recipe (through pip), installed into
    ``target``; why not, or ""."""
    refused = install_into(wheel, target, target.parent / "wheel-rest")
    if refused:
        return refused
    if requires:
        pip = [sys.executable, "-m", "pip", "install", "-q"]
        proc = subprocess.run([*pip, "--target", str(target), *requires], capture_output=True, text=True)
        if proc.returncode != 0:
            return f"pip could not install verify.import_requires {requires}: {proc.stderr.strip()[-300:]}"
    return ""


def _in_clean_process(argv: list[str], target: Path, tmp: str) -> str:
    """Runs ``argv`` in an empty folder with only ``target`` on the path; its last error line, or ""."""
    child = subprocess.run(argv, cwd=Path(tmp) / "cwd", env=_clean_env(target, tmp), capture_output=True, text=True, timeout=300)
    if child.returncode == 0:
        return ""
    return (child.stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]


def write_verify_reports(checked: Report, wheel_path: Path) -> tuple[Path, Path]:
    """``<wheel>.verify.json`` and ``<wheel>.verify.md`` beside the wheel."""
    as_json = wheel_path.with_name(wheel_path.name + ".verify.json")
    as_md = wheel_path.with_name(wheel_path.name + ".verify.md")
    # Through a temp file and a rename, as every report: a reader (or a second verify) never sees half.
    write_verify_report(as_json, checked)
    place_text(as_md, checked.to_markdown(), "verify report")
    return as_json, as_md
