"""The seat: an nvcc stand-in placed where builds look for the compiler.

It is reached through CUDACXX (CMake), PYTORCH_NVCC (torch's ninja path) and
the shadow CUDA_HOME's bin/nvcc (torch's distutils path, and anything that
runs ``$CUDA_HOME/bin/nvcc`` by path). For each call:

* not a compile (device link, --version, CMake's compiler-id run): the real
  nvcc, untouched and uncached;
* a build-system probe (CMake try_compile, meson, conftest): the real nvcc,
  uncached -- a stubbed probe kills configure;
* a TU another shard owns: a valid empty object (and a depfile if asked);
* otherwise: ``ccache <real nvcc> ...`` with -dc/-dw spelled out.

The host compilers (gcc, g++, cc, c++) get a seat too, reached through PATH
(the shadow CUDA_HOME's bin comes first): a host TU under the source root is
compiled through the same cache, so the link job replays it, and on lanes
whose shards may leave host symbols undefined (not Windows, where the
module-init symbol must be in every shard) it is partitioned like a CUDA TU.
Host compiles of anything else (nvcc's own ``tmpxft`` intermediates, files
in the build tree, probes, links) run the real compiler untouched.

Each decision is one JSON line in the seat log, which the gates read.
The configuration is a JSON file written by :func:`install`; a seat with a
partition refuses to run when the ``source`` filter is also active.

On a shard, :func:`install_native` puts a native stub (``cuw/seat/seat_stub.c``)
in front of these scripts: from a table of the keys this shard does not own
(:func:`foreign_table`, written from the materialized source tree with the
partition rule here), it stubs a foreign TU the way :func:`run` and
:func:`run_host` do, without starting Python, and hands every other call, with
the same argv, to the scripts (moved to ``<seat>/python/``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional

from cuw.toolchain.nvcc_args import HOST_VALUE_OPTIONS, NvccCall, parse
from cuw.partition.globs import glob_match
from cuw.partition.rules import Assignment, tu_key

if TYPE_CHECKING:
    from pathlib import Path

# Every build TU starts a Python here, and on a shard most of them are stubs: the stub path
# imports only json, os, the argv parser and the partition; subprocess, shutil, tempfile,
# pathlib and the cache module are imported where a real compile or the installer needs them.

PROBE_MARKERS = ("CMakeScratch", "CompilerId", "CMakeTmp", "cmTC_", "meson-private", "conftest")
SOURCE_FILTER_VARS = ("CUDA_WHEELS_SHARD_INDEX", "CUDA_WHEELS_SHARD_COUNT")
DOUBLE_PARTITION_EXIT = 90
HOST_COMPILERS = ("gcc", "g++", "cc", "c++")
HOST_SCRIPT = "host-cc"


@dataclass(frozen=True)
class SeatPartition:
    index: int  # 1-based
    count: int
    assignment: dict[str, int] = field(default_factory=dict)
    """Key -> shard from the recipe's rule (cuw.partition.assignment); keys outside it fall back to the hash rule."""
    filter_globs: list[str] = field(default_factory=list)
    """Under ``filter: source``: the filter's globs. A key they match (or that is in
    ``filter_keys``) is the filter's to partition, never the seat's: the seat compiles it."""
    filter_keys: list[str] = field(default_factory=list)
    """Under ``filter: source``: the files the filter partitioned, as keys."""

    def owner(self, key: str) -> int:
        """The 1-based shard that compiles the TU with this key."""
        return Assignment(self.count, table=self.assignment).owner(key)

    @property
    def beside_filter(self) -> bool:
        """Whether this seat partitions a source-filter recipe's rest (it knows the filter's files)."""
        return bool(self.filter_globs)

    def partitions(self, key: str) -> bool:
        """Whether the seat decides this key's owner (False: the source filter's file, compiled here)."""
        if not self.filter_globs:
            return True
        return key not in self.filter_keys and not any(glob_match(key, g) for g in self.filter_globs)


@dataclass(frozen=True)
class SeatConfig:
    real_nvcc: str
    cache_cmd: str
    """The cache tool's binary (ccache or sccache)."""
    cache_env: dict[str, str]
    statslog_var: Optional[str]
    """The tool's per-call stats log variable, when it has one (ccache)."""
    source_root: str
    empty_object: str
    log: str
    partition: Optional[SeatPartition]
    """None: the seat is a pure cache pass-through (unsharded, link, or ``source`` filter)."""
    extra_args: list[str] = field(default_factory=list)
    """The recipe's nvcc_flags and ``--threads N``, appended to every owned compile."""
    real_compilers: dict[str, str] = field(default_factory=dict)
    """Host compiler name -> the real executable behind the host seat."""
    partition_host: bool = True
    """Whether host TUs are partitioned too (False on Windows lanes)."""

    @staticmethod
    def read(path: str) -> "SeatConfig":
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        part = data.pop("partition")
        return SeatConfig(partition=SeatPartition(**part) if part else None, **data)


def is_probe(call: NvccCall, cwd: str) -> bool:
    haystack = " ".join(filter(None, [call.source, call.output, cwd]))
    return any(marker in haystack for marker in PROBE_MARKERS)


def _log(config: SeatConfig, **entry: object) -> None:
    entry["pid"] = os.getpid()
    with open(config.log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def _stub(call: NvccCall, config: SeatConfig) -> None:
    assert call.output is not None
    os.makedirs(os.path.dirname(os.path.abspath(call.output)), exist_ok=True)
    with open(config.empty_object, "rb") as src, open(call.output, "wb") as out:
        out.write(src.read())
    if call.depfile:
        os.makedirs(os.path.dirname(os.path.abspath(call.depfile)), exist_ok=True)
        with open(call.depfile, "w", encoding="utf-8") as dep:
            dep.write(f"{call.output.replace(' ', chr(92) + ' ')}:\n")


def _call(cmd: list[str], env: Optional[dict[str, str]] = None) -> int:
    import subprocess

    return subprocess.call(cmd, env=env)


def _compile_cached(cmd_tail: list[str], config: SeatConfig) -> tuple[int, str]:
    import tempfile

    from cuw.toolchain import cache

    env = cache.scrub(dict(os.environ))
    env.update(config.cache_env)
    cmd = [config.cache_cmd, *cmd_tail]
    if not config.statslog_var:
        return _call(cmd, env=env), "unknown"
    fd, statslog = tempfile.mkstemp(prefix="cuw-statslog-", dir=os.path.dirname(config.log))
    os.close(fd)
    env[config.statslog_var] = statslog
    try:
        rc = _call(cmd, env=env)
        with open(statslog, encoding="utf-8", errors="replace") as fh:
            outcome = cache.Ccache.call_outcome(fh.read())
    finally:
        os.unlink(statslog)
    return rc, outcome


_CCBIN = ("-ccbin", "--compiler-bindir")


def _unseated_ccbin(args: list[str], config: SeatConfig) -> list[str]:
    """``args`` with a ``-ccbin`` that names a host seat (CMake passes its CXX compiler, which is
    the job's own shadow ``bin/c++``) pointed at the real compiler: the seat's path differs per
    job, and the cache hashes it verbatim."""

    def real(value: str) -> str:
        if os.path.basename(os.path.realpath(value)) != HOST_SCRIPT:
            return value
        return config.real_compilers.get(os.path.basename(value)) or config.real_compilers.get("g++") or value

    out: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in _CCBIN and eq:
            out.append(f"{name}={real(value)}")
        elif args[i] in _CCBIN and i + 1 < len(args):
            out += [args[i], real(args[i + 1])]
            i += 1
        else:
            out.append(args[i])
        i += 1
    return out


def _host_compiler_args(argv: list[str], config: SeatConfig) -> list[str]:
    """``-ccbin <real g++>`` unless the build chose one: nvcc would otherwise find the host
    seat on PATH, a path that differs per job (sccache hashes it) and costs a Python start
    per host pass."""
    if any(arg.split("=", 1)[0] in _CCBIN for arg in argv):
        return []
    real = config.real_compilers.get("g++") or config.real_compilers.get("gcc")
    return ["-ccbin", real] if real else []


def _double_partition(config: SeatConfig) -> bool:
    """A partitioning seat refuses to run under the source filter when it would partition the
    filter's files too (each shard would get ~1/N^2 of them): when it does not know which files
    the filter covers, or when the filter's shard is not its own. A seat that knows the filter's
    globs partitions only the rest (:meth:`SeatPartition.partitions`), disjoint by construction."""
    part = config.partition
    if not part or not any(os.environ.get(v) for v in SOURCE_FILTER_VARS):
        return False
    if not part.beside_filter:
        sys.stderr.write(
            "cuw seat: refusing to partition: the source filter is active too "
            "(CUDA_WHEELS_SHARD_COUNT is set), so each shard would get ~1/N^2 of the work\n"
        )
        return True
    filtered = f"{os.environ.get(SOURCE_FILTER_VARS[0], '')}/{os.environ.get(SOURCE_FILTER_VARS[1], '')}"
    if filtered != f"{part.index}/{part.count}":
        sys.stderr.write(
            f"cuw seat: refusing to partition: the source filter is shard {filtered}, this seat is shard "
            f"{part.index}/{part.count}; one job, one shard\n"
        )
        return True
    return False


def _stub_or_compile(
    call: NvccCall, config: SeatConfig, part: Optional[SeatPartition], cmd: list[str], **kind: str
) -> int:
    """One TU of the build: a foreign one gets the empty object, an owned one goes through the cache."""
    assert call.source is not None
    key = tu_key(call.source, config.source_root)
    tu_owner = part.owner(key) if part and part.partitions(key) else None
    if part and tu_owner is not None and tu_owner != part.index:
        _stub(call, config)
        _log(config, action="stubbed", **kind, key=key, owner=tu_owner, output=call.output)
        return 0
    start = time.monotonic()
    rc, outcome = _compile_cached(cmd, config)
    _log(
        config,
        action="compiled",
        **kind,
        key=key,
        owner=tu_owner,
        output=call.output,
        rc=rc,
        outcome=outcome,
        seconds=round(time.monotonic() - start, 3),
        at=round(time.time(), 3),  # when the compile ended: a timeline bar is [at - seconds, at]
    )
    return rc


def run(argv: list[str], config: SeatConfig) -> int:
    if _double_partition(config):
        return DOUBLE_PARTITION_EXIT
    call = parse(argv)
    cwd = os.getcwd()
    real = [config.real_nvcc, *argv]
    if not call.is_compile or call.source is None:
        _log(config, action="passthrough", argv=argv[:6])
        return _call(real)
    if is_probe(call, cwd):
        _log(config, action="probe", source=call.source)
        return _call(real)
    args = _unseated_ccbin(call.cache_safe_args(), config)
    cmd = [config.real_nvcc, *args, *_host_compiler_args(argv, config), *config.extra_args]
    return _stub_or_compile(call, config, config.partition, cmd)


def _under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)
    except ValueError:  # different drives
        return False


def run_host(argv: list[str], config: SeatConfig, tool: str) -> int:
    """One call of a host compiler (gcc, g++, cc, c++) through the seat."""
    real = [config.real_compilers[tool], *argv]
    call = parse(argv, HOST_VALUE_OPTIONS)
    cwd = os.getcwd()
    if (
        not call.is_compile
        or call.source is None
        or not _under(call.source, config.source_root)
        or "tmpxft" in call.source
        or is_probe(call, cwd)
    ):
        # Links, preprocessing, nvcc's intermediates, build-tree files, probes: not the build's TUs.
        return _call(real)
    part = config.partition if config.partition_host else None
    if part and _double_partition(config):
        return DOUBLE_PARTITION_EXIT
    return _stub_or_compile(call, config, part, real, kind="host")


def main(argv: list[str], config_path: str, tool: str = "nvcc") -> int:
    config = SeatConfig.read(config_path)
    if tool == "nvcc":
        return run(argv, config)
    return run_host(argv, config, tool)


# -IS: isolated and without site-packages (the seat needs only the standard library and
# cuw); that saves every call the site step and its .pth scan. One word: a shebang passes
# its flags as a single argument.
_SCRIPT = """#!{python} -IS
# cuda-wheels-forge seat: an nvcc stand-in (see cuw/seat/runtime.py).
import sys
sys.path.insert(0, {root!r})
from cuw.seat.runtime import main
sys.exit(main(sys.argv[1:], {config!r}))
"""

# One script for every host compiler: the name it was called by picks the real one.
_HOST_SCRIPT = """#!{python} -IS
# cuda-wheels-forge host seat: a gcc/g++/cc/c++ stand-in (see cuw/seat/runtime.py).
import os, sys
sys.path.insert(0, {root!r})
from cuw.seat.runtime import main
sys.exit(main(sys.argv[1:], {config!r}, os.path.basename(sys.argv[0])))
"""


def find_host_compilers(path: Optional[str] = None) -> dict[str, str]:
    """The real host compilers on PATH (before the shadow CUDA_HOME is put in front of it)."""
    import shutil

    found = {}
    for name in HOST_COMPILERS:
        exe = shutil.which(name, path=path)
        if exe and os.path.basename(os.path.realpath(exe)) != HOST_SCRIPT:  # never another job's seat
            found[name] = exe
    return found


def link_host_seat(seat_dir: Path, bin_dir: Path, config: SeatConfig) -> list[Path]:
    """Puts the host seat in ``bin_dir`` under every host compiler's name."""
    links = []
    for name in config.real_compilers:
        link = bin_dir / name
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(seat_dir / HOST_SCRIPT)
        links.append(link)
    return links


def install(folder: Path, config: SeatConfig) -> Path:
    """Writes the seat executable and its configuration; returns the executable."""
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "seat.json"
    config_path.write_text(json.dumps(asdict(config), indent=2, sort_keys=True))
    script = folder / "nvcc"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # the folder holding cuw/
    script.write_text(_SCRIPT.format(python=sys.executable, root=root, config=str(config_path)))
    script.chmod(0o755)
    host = folder / HOST_SCRIPT
    host.write_text(_HOST_SCRIPT.format(python=sys.executable, root=root, config=str(config_path)))
    host.chmod(0o755)
    return script


def make_empty_object(path: Path) -> Path:
    """A valid object file with nothing in it, made once per job: compiled by the C compiler,
    or, where there is none (or it fails), written here as a minimal ELF relocatable object."""
    import subprocess

    compiler = find_c_compiler()
    if compiler is not None:
        src = path.with_suffix(".c")
        src.write_text("/* cuda-wheels-forge: the object a foreign TU gets */\n")
        try:
            proc = subprocess.run(
                [compiler, "-c", str(src), "-o", str(path)], capture_output=True, stdin=subprocess.DEVNULL, check=False
            )
            if proc.returncode == 0 and path.is_file():
                return path
        except OSError:
            pass
    path.write_bytes(empty_elf_object())
    return path


def find_c_compiler() -> Optional[str]:
    """The C compiler named by CC (when it runs) or found on PATH as cc or gcc; None without one."""
    import shutil

    named = os.environ.get("CC", "").split()
    for candidate in ([named[0]] if named else []) + ["cc", "gcc"]:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def c_compiler() -> str:
    """The C compiler a job builds its own small pieces with (the empty object, the native stub)."""
    return os.environ.get("CC") or find_c_compiler() or "cc"


# ELF e_machine (and e_flags) of the hosts a job builds on: what the empty object is for.
_ELF_MACHINES = {"x86_64": (62, 0), "amd64": (62, 0), "aarch64": (183, 0), "arm64": (183, 0), "ppc64le": (21, 2)}


def empty_elf_object(machine: Optional[str] = None) -> bytes:
    """A minimal ELF64 little-endian relocatable object with no code, no data and no symbols
    (sections: an empty .text, .note.GNU-stack so linkers keep the stack non-executable,
    .symtab, .strtab, .shstrtab) for this host's machine; what ``cc -c empty.c`` gives,
    less the compiler's comment."""
    import platform
    import struct

    arch = (machine or platform.machine()).lower()
    if sys.platform == "win32" or arch not in _ELF_MACHINES:
        from cuw.base.errors import CuwError

        raise CuwError(f"no C compiler to build the empty object with, and none is built in for {arch} (set CC)")
    e_machine, e_flags = _ELF_MACHINES[arch]
    names = [b"", b".text", b".note.GNU-stack", b".symtab", b".strtab", b".shstrtab"]
    shstrtab = b"\0".join(names) + b"\0"
    offsets = [shstrtab.index(b"\0" + n + b"\0") + 1 if n else 0 for n in names]
    symtab = bytes(24)  # the null symbol
    strtab = b"\0"
    symtab_off = 64
    strtab_off = symtab_off + len(symtab)
    shstrtab_off = strtab_off + len(strtab)
    shoff = (shstrtab_off + len(shstrtab) + 7) & ~7
    section = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, align, entsize
    headers = [
        section.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        section.pack(offsets[1], 1, 0x6, 0, symtab_off, 0, 0, 0, 1, 0),  # .text: PROGBITS, AX
        section.pack(offsets[2], 1, 0, 0, symtab_off, 0, 0, 0, 1, 0),  # .note.GNU-stack: PROGBITS
        section.pack(offsets[3], 2, 0, 0, symtab_off, len(symtab), 4, 1, 8, 24),  # .symtab -> .strtab
        section.pack(offsets[4], 3, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0),  # .strtab
        section.pack(offsets[5], 3, 0, 0, shstrtab_off, len(shstrtab), 0, 0, 1, 0),  # .shstrtab
    ]
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1, System V
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, e_machine, 1, 0, 0, shoff, e_flags, 64, 0, 0, 64, len(headers), 5)
    body = header + symtab + strtab + shstrtab
    return body + bytes(shoff - len(body)) + b"".join(headers)


# -- the native fast path ------------------------------------------------------------------
#
# A stubbed TU through the Python seat costs an interpreter start. cuw/seat/seat_stub.c does the
# stub alone: it reads a table of the keys this shard does NOT own, written here from the
# materialized source tree (the partition rule stays in Python), and execs the Python seat
# (moved to <seat>/python/) for every other call, so the result is the same either way.

NATIVE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seat_stub.c")
NATIVE_TABLE = "seat-stub.tsv"
PYTHON_SEAT_DIR = "python"
_TABLE_MAGIC = "cuw-seat-stub 1"


def foreign_table(config: SeatConfig) -> Optional[str]:
    """The native stub's table: header lines, then ``key, owner, key as JSON`` for every source
    file under the source root that another shard owns. None when the seat partitions nothing."""
    from cuw.toolchain.nvcc_args import SOURCE_SUFFIXES

    part = config.partition
    if part is None:
        return None
    root = os.path.normpath(config.source_root)
    lines = [
        _TABLE_MAGIC,
        f"root\t{root}",
        f"empty\t{config.empty_object}",
        f"log\t{config.log}",
        f"host_partitioned\t{int(config.partition_host)}",
        f"host_tools\t {' '.join(sorted(config.real_compilers))} ",
        # Beside the source filter: the filter's keys are left out below, so the stub may stub
        # the rest while CUDA_WHEELS_SHARD_* name this shard (any other value: the Python seat).
        *([f"source_filter\t{part.index}/{part.count}"] if part.beside_filter else []),
        "keys",
    ]
    rows = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            key = tu_key(os.path.join(dirpath, name), root)
            if not part.partitions(key):
                continue  # the source filter's file: compiled where it survives
            tu_owner = part.owner(key)
            if tu_owner != part.index and not any(c in key for c in "\t\n\r"):
                rows.append(f"{key}\t{tu_owner}\t{json.dumps(key)}")
    return "\n".join(lines + sorted(rows)) + "\n"


def _c_literal(text: str) -> str:
    """A C string literal for a path: octal escapes for everything but plain path characters."""
    plain = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.-+"
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03o}" for b in os.fsencode(text)) + '"'


def _native_unfit(config: SeatConfig) -> Optional[str]:
    """Why the native stub cannot stand in for this seat, or None. (The Python seat reads a
    relative path against each call's cwd; the table holds one string per path.)"""
    paths = {"source root": config.source_root, "empty object": config.empty_object, "seat log": config.log}
    for what, path in paths.items():
        if not os.path.isabs(path) or path.startswith("//") or any(c in path for c in "\t\n\r"):
            return f"the {what} {path!r} is not a plain absolute path"
    return None


def install_native(folder: Path, config: SeatConfig, note: Optional[Path] = None) -> bool:
    """Compiles cuw/seat/seat_stub.c into the seat folder written by :func:`install`, in place of the
    ``nvcc`` and host scripts (which move to ``python/`` and stay the fallback).

    Without a partition there is nothing to stub and the scripts stay. When the stub cannot
    be built (no C compiler), the scripts stay too -- same result, slower -- and one line says
    so in ``note`` (the job's build log), or on stderr."""
    import subprocess

    table = foreign_table(config)
    if table is None:
        return False
    reason = _native_unfit(config)
    binaries = {"nvcc": folder / "seat-stub-nvcc", HOST_SCRIPT: folder / "seat-stub-host"}
    if reason is None:
        compiler = c_compiler()
        (folder / NATIVE_TABLE).write_text(table, encoding="utf-8")
        for host, out in enumerate(binaries.values()):
            cmd = [compiler, "-O2", f"-DSEAT_DIR={_c_literal(os.path.abspath(folder))}", f"-DSEAT_HOST={host}", NATIVE_SOURCE, "-o", str(out)]
            try:
                proc = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, check=False)
            except OSError as exc:
                reason = f"{compiler} could not run: {exc.strerror}"
                break
            if proc.returncode != 0:
                reason = f"{compiler} exited {proc.returncode} on {NATIVE_SOURCE}"
                break
    if reason is not None:
        line = f"cuw seat: native stub not built ({reason}); foreign TUs go through the Python seat (same result, slower)\n"
        if note is not None:
            with open(note, "a", encoding="utf-8") as fh:
                fh.write(line)
        else:
            sys.stderr.write(line)
        for out in (*binaries.values(), folder / NATIVE_TABLE):
            if out.exists():
                out.unlink()
        return False
    python_dir = folder / PYTHON_SEAT_DIR
    python_dir.mkdir(exist_ok=True)
    for name, native in binaries.items():
        os.replace(folder / name, python_dir / name)
        os.replace(native, folder / name)
    for name in HOST_COMPILERS:  # the host script reads the tool from its own name
        link = python_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(HOST_SCRIPT)
    return True


def _is_cuda_compile(entry: dict) -> bool:
    return entry.get("action") == "compiled" and entry.get("kind") != "host"


def compiled_count(path: Path) -> int:
    """How many CUDA TUs a job's seat has compiled so far (for progress lines)."""
    return sum(1 for e in read_log(path) if _is_cuda_compile(e))


def _parse_line(line: bytes) -> Optional[dict]:
    try:
        entry = json.loads(line.decode("utf-8"))
    except ValueError:  # a line cut short (a seat killed mid-write), or not the seat's
        return None
    return entry if isinstance(entry, dict) else None


def read_log(path: Path) -> list[dict]:
    """Every whole entry of a seat log; a line that is not one (cut short) is left out."""
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return []
    entries = []
    for line in data.splitlines():
        entry = _parse_line(line) if line.strip() else None
        if entry is not None:
            entries.append(entry)
    return entries


class LogReader:
    """A seat log read as it grows, for progress lines: each :meth:`read` parses only the bytes
    appended since the last one, and a last line still being written waits for the next read.
    A log replaced or cut (a job folder prepared afresh) is read again from its start."""

    def __init__(self, path: Path, count_host: bool = False) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.compiled = 0
        """CUDA TUs (with ``count_host``, CUDA and host TUs) compiled so far."""
        self.count_host = count_host
        self._inode: Optional[int] = None

    def read(self) -> list[dict]:
        """The entries appended since the last call."""
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_ino != self._inode or st.st_size < self.offset:
                    self._inode, self.offset, self.partial, self.compiled = st.st_ino, 0, b"", 0
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        entries = [e for e in map(_parse_line, (line for line in lines if line.strip())) if e is not None]
        self.compiled += sum(1 for e in entries if _is_cuda_compile(e) or (self.count_host and e.get("action") == "compiled"))
        return entries

    def compiled_count(self) -> int:
        self.read()
        return self.compiled
