"""The seat's native stub (``seat_stub.c``): its table of foreign keys, its generated C tables,
and compiling it into a job's seat folder in front of the Python scripts."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from cuw.base.settings import process_environ
from cuw.toolchain.nvcc_args import SOURCE_SUFFIXES
from cuw.partition.rules import tu_key
from cuw.seat.install import c_compiler
from cuw.seat.runtime import DEADLINE_AFTER_VAR, HOST_COMPILERS, HOST_SCRIPT, PROBE_MARKERS, SOURCE_FILTER_VARS, SeatConfig
from cuw.toolchain import nvcc_args
from cuw.toolchain.cache import Ccache


# -- the native fast path ------------------------------------------------------------------
#
# A stubbed TU through the Python seat costs an interpreter start. cuw/seat/seat_stub.c does the
# stub alone: it reads a table of the keys this shard does NOT own, written here from the
# materialized source tree (the partition rule stays in Python), and execs the Python seat
# (moved to <seat>/python/) for every other call, so the result is the same either way.

NATIVE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seat_stub.c")
NATIVE_TABLE = "seat-stub.tsv"
PYTHON_SEAT_DIR = "python"
_TABLE_MAGIC = "cuw-seat-stub 2"
TABLES_HEADER = "seat_tables.h"
# The stub's one argument that is not a compiler's: print the LC_CTYPE it would coerce to here
# (_locale_lines), then exit.
LOCALE_PROBE_ARG = "--cuw-seat-locale-probe"
_LOCALE_VARS = ("LC_ALL", "LC_CTYPE", "LANG", "LOCPATH")
_COERCION_TARGETS = ("C.UTF-8", "C.utf8", "UTF-8")  # PEP 538's, in the interpreter's order


def _compile_lines(config: SeatConfig) -> list[str]:
    """The table's lines for the native owned compile: everything ``_compile_cached`` and the
    nvcc command need beyond the argv. None of them when one cannot be written as a table line
    (or the cache tool is not an absolute path): every owned TU then goes to the Python seat."""
    values = [
        config.cache_cmd,
        config.real_nvcc,
        config.statslog_var or "",
        *config.extra_args,
        *(f"{k}={v}" for k, v in config.cache_env.items()),
        *config.real_compilers,
        *config.real_compilers.values(),
    ]
    if not os.path.isabs(config.cache_cmd) or any(c in v for v in values for c in "\n\r\0"):
        return []
    if any(not k or "=" in k or "\t" in k for k in config.cache_env) or any("\t" in n for n in config.real_compilers):
        return []
    return [
        "compile\t1",
        f"cache\t{config.cache_cmd}",
        f"nvcc\t{config.real_nvcc}",
        *([f"statslog_var\t{config.statslog_var}"] if config.statslog_var else []),
        *(f"env\t{k}={v}" for k, v in config.cache_env.items()),
        *(f"extra\t{arg}" for arg in config.extra_args),
        *(f"real\t{name}\t{path}" for name, path in sorted(config.real_compilers.items())),
    ]


def seat_table(config: SeatConfig, locale_lines: Sequence[str] = ()) -> Optional[str]:
    """The native stub's table: header lines (the job's paths; with :func:`_compile_lines`, how an
    owned TU is compiled; ``locale_lines``: :func:`_locale_lines`), then ``owned`` and ``key,
    owner or null, key as JSON`` for every source file under the source root this seat compiles
    (its own slice; beside the source filter, the filter's files, owner null), then ``keys`` and
    the same for every one another shard owns.
    None when there is nothing for the stub to do: no partition and no native compile."""
    part = config.partition
    compile_lines = _compile_lines(config)
    if part is None and not compile_lines:
        return None
    root = os.path.normpath(config.source_root)
    lines = [
        _TABLE_MAGIC,
        f"root\t{root}",
        f"empty\t{config.empty_object}",
        f"log\t{config.log}",
        f"host_partitioned\t{int(config.partition_host)}",
        *([f"tree\t{os.path.normpath(config.tree)}"] if config.tree else []),
        f"host_tools\t {' '.join(sorted(config.real_compilers))} ",
        *([f"partition\t{part.index}/{part.count}"] if part else []),
        # Beside the source filter: the filter's keys are left out below, so the stub may stub
        # the rest while CUDA_WHEELS_SHARD_* name this shard (any other value: the Python seat).
        *([f"source_filter\t{part.index}/{part.count}"] if part and part.beside_filter else []),
        *compile_lines,
        *locale_lines,
        # Past it, an owned compile goes to the Python seat, which defers it (runtime.past_deadline).
        *([f"deadline\t{config.deadline!r}"] if config.deadline is not None else []),
    ]
    owned: list[str] = []
    foreign: list[str] = []
    if part is not None:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                if not name.endswith(SOURCE_SUFFIXES) or name in SOURCE_SUFFIXES:
                    continue
                key = tu_key(os.path.join(dirpath, name), root)
                if any(c in key for c in "\t\n\r"):
                    continue
                if not part.partitions(key):  # the source filter's file: compiled where it survives
                    owned.append(f"{key}\tnull\t{json.dumps(key)}")
                    continue
                tu_owner = part.owner(key)
                (owned if tu_owner == part.index else foreign).append(f"{key}\t{tu_owner}\t{json.dumps(key)}")
    return "\n".join(lines + ["owned", *sorted(owned), "keys", *sorted(foreign)]) + "\n"


def foreign_table(config: SeatConfig) -> Optional[str]:
    """The table the stub reads (:func:`seat_table`), when the seat partitions (else None);
    its lines after ``keys`` are the foreign keys."""
    return seat_table(config) if config.partition is not None else None


def tables_header() -> str:
    """The C tables the stub reads, generated from the Python seat's own definitions, so the two
    cannot drift: nvcc's and the host compilers' value options, compile and not-a-compile flags,
    depfile flags, source suffixes, probe markers, the source filter's variables, the table magic."""
    arrays = {
        "NVCC_VALUE_OPTIONS": nvcc_args.VALUE_OPTIONS,
        "HOST_VALUE_OPTIONS": nvcc_args.HOST_VALUE_OPTIONS,
        "COMPILE_FLAGS": nvcc_args.COMPILE_FLAGS,
        "NOT_A_COMPILE": nvcc_args.NOT_A_COMPILE,
        "DEPFILE_WITH_COMPILE": nvcc_args.DEPFILE_WITH_COMPILE,
        "SOURCE_SUFFIXES": SOURCE_SUFFIXES,
        "PROBE_MARKERS": PROBE_MARKERS,
        "CACHE_HITS": Ccache.HITS,
        "CACHE_MISSES": Ccache.MISSES,
        "CACHE_UNCACHEABLE": Ccache.UNCACHEABLE,
    }
    out = ["/* Generated by cuw/seat/native.py (tables_header): do not edit. */"]
    for name, values in arrays.items():
        items = ", ".join(_c_literal(v) for v in sorted(values))
        out.append(f"static const char *const {name}[] = {{{items}, NULL}};")
    out.append(f"#define TABLE_MAGIC {_c_literal(_TABLE_MAGIC)}")
    out.append(f"#define HOST_SCRIPT {_c_literal(HOST_SCRIPT)}")
    index_var, count_var = SOURCE_FILTER_VARS
    out.append(f"#define FILTER_INDEX_VAR {_c_literal(index_var)}")
    out.append(f"#define FILTER_COUNT_VAR {_c_literal(count_var)}")
    out.append(f"#define DEADLINE_AFTER_VAR {_c_literal(DEADLINE_AFTER_VAR)}")
    out.append(f"#define LOCALE_PROBE_ARG {_c_literal(LOCALE_PROBE_ARG)}")
    return "\n".join(out) + "\n"


def write_tables_header(folder: Path) -> Path:
    """``<folder>/seat_tables.h`` (:func:`tables_header`), for compiling the stub with ``-I folder``."""
    path = folder / TABLES_HEADER
    path.write_text(tables_header(), encoding="utf-8")
    return path


def _c_literal(text: str) -> str:
    """A C string literal for a path: octal escapes for everything but plain path characters."""
    plain = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.-+"
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03o}" for b in os.fsencode(text)) + '"'


def _locale_lines(stub: Path) -> list[str]:
    """The table's answers to what the stub's coerced_ctype() would otherwise ask the C library on
    every owned compile, asked of the stub itself once here: ``ctype_c``, the LC_CTYPE a C locale
    is coerced to (empty: none loads), and ``ctype_loads``, this job's own LC_CTYPE name when the
    answer for it is no coercion. Asked without LOCPATH: a call with one asks per call. None of
    them where the stub gives no plain answer."""
    import subprocess

    environ = process_environ()  # the job's own locale: the one the stub's calls inherit
    base = {k: v for k, v in environ.items() if k not in _LOCALE_VARS}

    def probe(env: dict[str, str]) -> Optional[str]:
        try:
            proc = subprocess.run(
                [str(stub), LOCALE_PROBE_ARG], env=env, capture_output=True, stdin=subprocess.DEVNULL, check=False, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = proc.stdout.decode("ascii", "replace")
        if proc.returncode != 0 or text.count("\n") != 1 or not text.endswith("\n"):
            return None
        answer = text[:-1]
        return answer if answer in ("", *_COERCION_TARGETS) else None

    coerced = probe(base)  # no locale variable at all: the C locale
    if coerced is None:
        return []
    lines = [f"ctype_c\t{coerced}"]
    name = environ.get("LC_CTYPE") or environ.get("LANG")
    if name and name not in ("C", "POSIX") and not any(c in name for c in "\t\n\r") and probe({**base, "LC_CTYPE": name}) == "":
        lines.append(f"ctype_loads\t{name}")
    return lines


def _native_unfit(config: SeatConfig) -> Optional[str]:
    """Why the native stub cannot stand in for this seat, or None. (The Python seat reads a
    relative path against each call's cwd; the table holds one string per path.)"""
    paths = {"source root": config.source_root, "empty object": config.empty_object, "seat log": config.log}
    for what, path in paths.items():
        if not os.path.isabs(path) or path.startswith("//") or any(c in path for c in "\t\n\r"):
            return f"the {what} {path!r} is not a plain absolute path"
    return None


def _compile_stubs(folder: Path, binaries: dict[str, Path], compiler: str) -> Optional[str]:
    """Compiles the stub once into the nvcc seat's binary and links it as the host seat's (the
    program tells which it stands as from the file it was run as); why not, or None.

    Linked statically where the C library allows it (its static archive installed): every call
    starts this program, and a static one starts without the dynamic loader (here about a quarter
    of the stub's own cost on a cache hit). Else dynamically, the same program.

    Not optimized (-O0): every job compiles it, and -O2 took 0.75 s to -O0's 0.18 s here while the
    stub's calls, all process starts and file copies, measured the same (benchmarks/seat_overhead.py:
    a stubbed .cu 1.7 ms, a .cpp hit 5.5 ms, either way)."""
    import shutil
    import subprocess

    out, host = binaries["nvcc"], binaries[HOST_SCRIPT]
    cmd = [compiler, "-O0", f"-DSEAT_DIR={_c_literal(os.path.abspath(folder))}", f"-I{folder}", NATIVE_SOURCE, "-o", str(out)]
    try:
        proc = subprocess.run([*cmd, "-static"], capture_output=True, stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0:  # no static C library
            proc = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        return f"{compiler} could not run: {exc.strerror}"
    if proc.returncode != 0:
        return f"{compiler} exited {proc.returncode} on {NATIVE_SOURCE}"
    try:
        os.link(out, host)
    except OSError:  # a file system without hard links: a copy is the same program
        try:
            shutil.copy2(out, host)
        except OSError as exc:
            return f"cannot copy the stub to {host}: {exc.strerror}"
    return None


def install_native(folder: Path, config: SeatConfig, note: Optional[Path] = None, *, cc: str) -> bool:
    """Compiles cuw/seat/seat_stub.c into the seat folder written by :func:`install`, in place of the
    ``nvcc`` and host scripts (which move to ``python/`` and stay the fallback).

    Without a partition (the link job) the stub still compiles every TU through the cache; only
    without a partition and without a native compile (:func:`_compile_lines`) the scripts stay. When the stub cannot
    be built (no C compiler), the scripts stay too -- same result, slower -- and one line says
    so in ``note`` (the job's build log), or on stderr."""
    if config.partition is None and not _compile_lines(config):
        return False  # seat_table's None: nothing for the stub to do
    reason = _native_unfit(config)
    binaries = {"nvcc": folder / "seat-stub-nvcc", HOST_SCRIPT: folder / "seat-stub-host"}
    if reason is None:
        write_tables_header(folder)
        reason = _compile_stubs(folder, binaries, c_compiler(cc))
        table = seat_table(config, _locale_lines(binaries[HOST_SCRIPT])) if reason is None else None
        if table is not None:
            (folder / NATIVE_TABLE).write_text(table, encoding="utf-8")
    if reason is not None:
        line = f"cuw seat: native stub not built ({reason}); foreign TUs go through the Python seat (same result, slower)\n"
        if note is not None:
            with open(note, "a", encoding="utf-8") as fh:
                fh.write(line)
        else:
            sys.stderr.write(line)
        for out in (*binaries.values(), folder / NATIVE_TABLE, folder / TABLES_HEADER):
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
