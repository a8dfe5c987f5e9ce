"""What verify and finish read from a wheel's compiled files: an ELF shared object's
DT_NEEDED, RPATH/RUNPATH, GLIBC versions and ``PyInit_*`` export (pyelftools), a PE
DLL's imports and export (pefile). One reader, so the two steps never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pefile
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection, DynamicTag
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from elftools.elf.sections import SymbolTableSection


@dataclass(frozen=True)
class Binary:
    """A compiled file in the wheel: an ELF shared object or a PE DLL (``.pyd``)."""

    path: str  # inside the wheel
    needed: list[str]  # DT_NEEDED; for PE, the imported DLLs (delay-loaded ones too)
    rpaths: list[str]
    glibc: list[str]
    exports_pyinit: Optional[str]
    kind: str = "elf"  # or "pe"


def read_binary(name: str, data: bytes, scratch: Path) -> Optional[Binary]:
    if data.startswith(b"\x7fELF"):
        return read_elf(name, data, scratch)
    if data.startswith(b"MZ"):
        return read_pe(name, data, scratch)
    return None


def read_pe(name: str, data: bytes, scratch: Path) -> Optional[Binary]:
    """A PE file's imported DLLs and its ``PyInit_*`` export, read with pefile."""
    try:
        pe = pefile.PE(data=data, fast_load=True)
        pe.parse_data_directories(
            directories=[
                pefile.DIRECTORY_ENTRY[d]
                for d in ("IMAGE_DIRECTORY_ENTRY_IMPORT", "IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT", "IMAGE_DIRECTORY_ENTRY_EXPORT")
            ]
        )
    except pefile.PEFormatError:
        return None
    needed: list[str] = []
    for entry in (*getattr(pe, "DIRECTORY_ENTRY_IMPORT", []), *getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", [])):
        dll = entry.dll.decode("ascii", "replace")
        if dll.lower() not in (n.lower() for n in needed):
            needed.append(dll)
    pyinit = None
    export = getattr(pe, "DIRECTORY_ENTRY_EXPORT", None)
    for sym in export.symbols if export else []:
        if sym.name and sym.name.startswith(b"PyInit_"):
            pyinit = sym.name[len(b"PyInit_") :].decode("ascii", "replace")
    pe.close()
    (scratch / Path(name).name).write_bytes(data)  # for cuobjdump
    return Binary(name, needed, [], [], pyinit, "pe")


def read_elf(name: str, data: bytes, scratch: Path) -> Optional[Binary]:
    """An ELF member of a wheel, written to ``scratch`` (cuobjdump reads it there too)."""
    if not data.startswith(b"\x7fELF"):
        return None
    path = scratch / Path(name).name
    path.write_bytes(data)
    return read_elf_file(path, name)


def _tag_text(tag: DynamicTag) -> str:
    """The string of a DT_NEEDED, DT_RPATH or DT_RUNPATH entry: pyelftools sets it as an attribute
    named after the tag (``needed``, ``rpath``, ``runpath``), which its types cannot name."""
    return str(getattr(tag, tag.entry.d_tag[3:].lower()))


def read_elf_file(path: Path, name: Optional[str] = None) -> Optional[Binary]:
    """An ELF file on disk (``name``: how to report it, the path by default); None when it is
    not a readable ELF file."""
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            needed: list[str] = []
            rpaths: list[str] = []
            versions: list[str] = []
            pyinit = None
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_NEEDED":
                            needed.append(_tag_text(tag))
                        elif tag.entry.d_tag == "DT_RPATH":
                            rpaths.append(_tag_text(tag))
                        elif tag.entry.d_tag == "DT_RUNPATH":
                            rpaths.append(_tag_text(tag))
                elif isinstance(section, GNUVerNeedSection):
                    for _, aux in section.iter_versions():
                        versions.extend(a.name for a in aux)
            dynsym = elf.get_section_by_name(".dynsym")
            if isinstance(dynsym, SymbolTableSection):
                for sym in dynsym.iter_symbols():
                    if sym.name.startswith("PyInit_") and sym["st_shndx"] != "SHN_UNDEF":
                        pyinit = sym.name[len("PyInit_") :]
    except (ELFError, OSError):
        return None
    rp = [p for entry in rpaths for p in entry.split(":") if p]
    return Binary(name or str(path), needed, rp, sorted({v for v in versions if v.startswith("GLIBC_")}), pyinit)
