"""Installing a job's seat: the nvcc and host-compiler scripts, their configuration, and the
empty object a foreign TU gets. Runs once per job (not per compile), so it may import freely."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import cuw
from cuw.seat.runtime import HOST_COMPILERS, HOST_SCRIPT, SeatConfig


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
    root = os.path.realpath(cuw.FORGE_ROOT)
    script.write_text(_SCRIPT.format(python=sys.executable, root=root, config=str(config_path)))
    script.chmod(0o755)
    host = folder / HOST_SCRIPT
    host.write_text(_HOST_SCRIPT.format(python=sys.executable, root=root, config=str(config_path)))
    host.chmod(0o755)
    return script


def make_empty_object(path: Path, cc: str) -> Path:
    """A valid object file with nothing in it, made once per job: compiled by the C compiler,
    or, where there is none (or it fails), written here as a minimal ELF relocatable object.
    ``cc``: the run's ``$CC`` (:func:`find_c_compiler`)."""
    import subprocess

    compiler = find_c_compiler(cc)
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


def find_c_compiler(cc: str) -> Optional[str]:
    """The C compiler ``cc`` names (the run's ``$CC``), when it runs, or found on PATH as cc or gcc;
    None without one."""
    import shutil

    named = cc.split()
    for candidate in ([named[0]] if named else []) + ["cc", "gcc"]:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def c_compiler(cc: str) -> str:
    """The C compiler a job builds its own small pieces with (the empty object, the native stub):
    ``cc`` (the run's ``$CC``), else one on PATH."""
    return cc or find_c_compiler(cc) or "cc"


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
        from cuw.base.errors import ToolError

        raise ToolError(f"no C compiler to build the empty object with, and none is built in for {arch} (set CC)")
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
