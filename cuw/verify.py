"""The verify gate: is this wheel what its cell promises? No GPU needed.

Each check is a small function returning its findings; :func:`verify` runs
them all (one failure does not hide another) and returns a report. Exit
codes of the CLI: 0 pass, 1 the wheel failed, 2 the gate itself could not run.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelError, WheelFile

from .cell import Cell
from .errors import CuwError
from .finish import local_label
from .grid import parse_arch
from .policy import WheelPolicy
from .recipe import Recipe
from .toolkit import Toolkit, find_cuobjdump

# DT_NEEDED every wheel may carry besides what the policy keeps out of it
# (wheel.exclude: the CUDA runtime and driver, torch): the C/C++ runtime.
C_RUNTIME = (
    "libc.so.*", "libm.so.*", "libdl.so.*", "libpthread.so.*", "librt.so.*", "ld-linux*.so.*",
    "libgcc_s.so.*", "libstdc++.so.*",
)  # fmt: skip


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


class GateCannotRun(CuwError):
    exit_code = 2


@dataclass
class Check:
    name: str
    ok: bool
    details: list[str] = field(default_factory=list)


@dataclass
class Report:
    wheel: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def line(self) -> str:
        if self.ok:
            return f"verify gate PASS: {len(self.checks)} checks on {Path(self.wheel).name}"
        failed = [f"{c.name}: {c.details[0] if c.details else 'failed'}" for c in self.checks if not c.ok]
        return "verify gate FAIL: " + "; ".join(failed)

    def to_json(self) -> str:
        return json.dumps(
            {"wheel": self.wheel, "ok": self.ok, "checks": [c.__dict__ for c in self.checks]}, indent=2, sort_keys=True
        )

    def to_markdown(self) -> str:
        rows = [f"### verify {Path(self.wheel).name}: {'✅ pass' if self.ok else '❌ FAIL'}", "", "| check | | details |", "|---|---|---|"]
        for c in self.checks:
            rows.append(f"| {c.name} | {'✅' if c.ok else '❌'} | {'; '.join(c.details)[:300]} |")
        return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class Elf:
    path: str  # inside the wheel
    needed: list[str]
    rpaths: list[str]
    glibc: list[str]
    exports_pyinit: Optional[str]


def _read_elf(name: str, data: bytes, scratch: Path) -> Optional[Elf]:
    if not data.startswith(b"\x7fELF"):
        return None
    path = scratch / Path(name).name
    path.write_bytes(data)
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            needed, rpaths, versions, pyinit = [], [], [], None
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)
                        elif tag.entry.d_tag == "DT_RPATH":
                            rpaths.append(tag.rpath)
                        elif tag.entry.d_tag == "DT_RUNPATH":
                            rpaths.append(tag.runpath)
                elif isinstance(section, GNUVerNeedSection):
                    for _, aux in section.iter_versions():
                        versions.extend(a.name for a in aux)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is not None:
                for sym in dynsym.iter_symbols():
                    if sym.name.startswith("PyInit_") and sym["st_shndx"] != "SHN_UNDEF":
                        pyinit = sym.name[len("PyInit_") :]
    except ELFError:
        return None
    rp = [p for entry in rpaths for p in entry.split(":") if p]
    return Elf(name, needed, rp, sorted({v for v in versions if v.startswith("GLIBC_")}), pyinit)


def _allowed(soname: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatch(soname, p) for p in patterns)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def verify(
    wheel: Path,
    recipe: Recipe,
    cell: Cell,
    toolkit: Toolkit,
    policy: WheelPolicy,
    archs: list[str],
    import_check: bool = True,
) -> Report:
    checks: list[Check] = []
    try:
        name, version, _, tags = parse_wheel_filename(wheel.name)
    except Exception as exc:  # packaging raises several types for a bad name
        return Report(str(wheel), [Check("filename", False, [f"not a wheel filename: {exc}"])])

    # filename agrees with the cell
    problems = []
    if canonicalize_name(name) != canonicalize_name(recipe.name):
        problems.append(f"distribution {name}, recipe names {recipe.name}")
    expected_label = local_label(cell)
    if version.local != expected_label:
        problems.append(f"local version label {version.local!r}, the cell needs {expected_label!r}")
    machine = "aarch64" if cell.lane == "linux_aarch64" else "x86_64"
    if cell.lane.startswith("linux") and not all(t.platform.endswith(machine) and "linux" in t.platform for t in tags):
        problems.append(f"platform tags {sorted({t.platform for t in tags})} are not {cell.lane}")
    checks.append(Check("filename", not problems, problems or [f"{name} {version} for {cell.id}"]))

    try:
        with WheelFile(wheel) as wf:
            members = {i.filename: wf.read(i) for i in wf.infolist() if not i.is_dir()}
            record_problems: list[str] = []
    except (WheelError, zipfile.BadZipFile, OSError) as exc:
        checks.append(Check("record", False, [str(exc)]))
        return Report(str(wheel), checks)
    checks.append(Check("record", not record_problems, record_problems or [f"{len(members)} files match RECORD"]))

    # METADATA agrees with the filename
    meta_name = next((n for n in members if n.endswith(".dist-info/METADATA")), None)
    meta = members.get(meta_name or "", b"").decode("utf-8", "replace")
    head = meta.partition("\n\n")[0]
    fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
    problems = []
    if Version(fields.get("Version", "0")) != version:
        problems.append(f"METADATA Version {fields.get('Version')!r} != filename {version}")
    if canonicalize_name(fields.get("Name", "")) != canonicalize_name(name):
        problems.append(f"METADATA Name {fields.get('Name')!r} != filename {name}")
    checks.append(Check("metadata", not problems, problems or ["Name and Version agree"]))

    with tempfile.TemporaryDirectory(prefix="cuw-verify-") as tmp:
        scratch = Path(tmp)
        elves = [e for e in (_read_elf(n, d, scratch) for n, d in members.items()) if e]
        shipped = {Path(n).name for n in members}

        checks.append(Check("compiled", bool(elves), [e.path for e in elves] or ["no compiled code in the wheel"]))

        allowed = (
            C_RUNTIME + manylinux_whitelist(policy.manylinux.get(cell.lane)) + TORCH_LIBS
            + tuple(policy.exclude) + tuple(recipe.verify.allowed_needed)
        )  # fmt: skip
        foreign = [f"{e.path}: {n}" for e in elves for n in e.needed if n not in shipped and not _allowed(n, allowed)]
        checks.append(Check("needed", not foreign, foreign or ["every DT_NEEDED is runtime, CUDA, torch or shipped"]))

        bad_rpath = [f"{e.path}: {p}" for e in elves for p in e.rpaths if not p.startswith("$ORIGIN")]
        checks.append(Check("rpath", not bad_rpath, bad_rpath or ["every RPATH starts with $ORIGIN"]))

        newest = max((v for e in elves for v in e.glibc), key=_version_tuple, default="GLIBC_0")
        max_glibc = policy.max_glibc
        too_new = bool(max_glibc) and _version_tuple(newest) > _version_tuple(max_glibc or "0")
        checks.append(Check("glibc", not too_new, [f"needs {newest}, policy allows {max_glibc or 'any'}"]))

        links = [f"{e.path}: {n}" for e in elves for n in e.needed if _allowed(n, TORCH_LIBS)]
        if recipe.links_torch and not links:
            checks.append(Check("links_torch", False, ["recipe says links_torch: true, no library needs torch"]))
        elif not recipe.links_torch and links:
            checks.append(Check("links_torch", False, [f"recipe says links_torch: false, but {links[0]}"]))
        else:
            checks.append(Check("links_torch", True, links[:3] or ["torch-free, as the recipe says"]))

        checks.append(_arch_check(elves, scratch, archs, toolkit))

    if import_check:
        checks.append(_import_check(wheel, members, elves, recipe))
    return Report(str(wheel), checks)


def _arch_check(elves: list[Elf], scratch: Path, archs: list[str], toolkit: Toolkit) -> Check:
    try:
        cuobjdump = find_cuobjdump(toolkit)
    except CuwError as exc:
        raise GateCannotRun(f"{exc}: the arch check cannot run") from None
    sass: set[str] = set()
    ptx: set[str] = set()
    for elf in elves:
        lib = scratch / Path(elf.path).name
        for flag, into in (("--list-elf", sass), ("--list-ptx", ptx)):
            out = subprocess.run([str(cuobjdump), flag, str(lib)], capture_output=True, text=True).stdout
            into.update(re.findall(r"\bsm_(\d+)", out))
    missing = []
    for arch in archs:
        number, wants_ptx = parse_arch(arch)
        if number not in sass:
            missing.append(f"no SASS for sm_{number}")
        if wants_ptx and number not in ptx:
            missing.append(f"no PTX for compute_{number}")
    found = f"SASS {sorted(sass)}, PTX {sorted(ptx)}"
    return Check("arch", not missing, missing + [found] if missing else [found])


def _modules(members: dict[str, bytes], elves: list[Elf]) -> list[str]:
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


def _import_check(wheel: Path, members: dict[str, bytes], elves: list[Elf], recipe: Recipe) -> Check:
    with tempfile.TemporaryDirectory(prefix="cuw-import-") as tmp:
        target = Path(tmp) / "site"
        empty = Path(tmp) / "cwd"
        empty.mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            return Check("import", False, [f"pip could not install the wheel: {proc.stderr.strip()[-300:]}"])
        failures, passed = [], 0
        for module in _modules(members, elves):
            if module in recipe.verify.skip_import:
                continue
            env = {"PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "HOME": tmp}
            child = subprocess.run(
                [sys.executable, "-c", f"import {module}"], cwd=empty, env=env, capture_output=True, text=True, timeout=300
            )
            if child.returncode != 0:
                last = (child.stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]
                failures.append(f"{module}: {last}")
            else:
                passed += 1
        return Check("import", not failures, failures or [f"{passed} modules import in a clean process, GPUs hidden"])


def write_verify_reports(checked: Report, wheel_path: Path) -> tuple[Path, Path]:
    """``<wheel>.verify.json`` and ``<wheel>.verify.md`` beside the wheel."""
    as_json = wheel_path.with_name(wheel_path.name + ".verify.json")
    as_md = wheel_path.with_name(wheel_path.name + ".verify.md")
    as_json.write_text(checked.to_json() + "\n")
    as_md.write_text(checked.to_markdown())
    return as_json, as_md
