"""A PEP 503 package index generated from a folder of finished wheels.

Layout (all static files, servable by any web server or ``file://``)::

    <out>/files/<wheel>                      every kept wheel, once
    <out>/simple/<project>/index.html        the flat root: every wheel
    <out>/<cu130>/<torch2.14>/<project>/     a channel per CUDA line x torch
    <out>/<cu130>/<project>/                 torch-free wheels of the CUDA line

A wheel's channel comes from its local version label (``+cu130torch2.14``);
torch-free wheels (``+cu130``) are listed under every torch channel of their
CUDA line too, so one ``--index-url`` serves a whole environment. Only the
highest version per (package, cell) is kept.
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from .errors import CuwError

_LABEL = re.compile(r"^(cu\d+)(?:(torch\d+\.\d+))?$")


@dataclass(frozen=True)
class Entry:
    path: Path
    project: str
    version: Version
    cuda: str  # "cu130"
    torch: str | None  # "torch2.14"
    tags: str  # the wheel's tag triple(s)
    sha256: str


def _entry(path: Path) -> Entry:
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except Exception as exc:
        raise CuwError(f"{path}: not a wheel filename ({exc})") from None
    match = _LABEL.match(version.local or "")
    if not match:
        raise CuwError(f"{path.name}: no cell label like +cu130torch2.14 (finish the wheel first)")
    tag_text = path.name[: -len(".whl")].split("-", 2)[2]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Entry(path, canonicalize_name(name), version, match.group(1), match.group(2), tag_text, digest)


def prune(entries: list[Entry]) -> list[Entry]:
    """The highest version per (package, cell)."""
    best: dict[tuple, Entry] = {}
    for e in entries:
        key = (e.project, e.cuda, e.torch, e.tags)
        if key not in best or e.version > best[key].version:
            best[key] = e
    return sorted(best.values(), key=lambda e: (e.project, e.cuda, e.torch or "", e.tags))


def _page(title: str, links: list[tuple[str, str]]) -> str:
    body = "\n".join(f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>' for href, text in links)
    return f"<!DOCTYPE html>\n<html>\n  <head><title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n"


def _write_channel(root: Path, depth: int, entries: list[Entry]) -> None:
    by_project: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_project[e.project].append(e)
    up = "../" * (depth + 1)
    for project, items in by_project.items():
        links = [(f"{up}files/{quote(e.path.name)}#sha256={e.sha256}", e.path.name) for e in items]
        (root / project).mkdir(parents=True, exist_ok=True)
        (root / project / "index.html").write_text(_page(f"Links for {project}", links))
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text(_page("Simple index", [(f"{p}/", p) for p in sorted(by_project)]))


def build_index(wheel_dir: Path, out: Path) -> list[Entry]:
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise CuwError(f"no wheels in {wheel_dir}")
    kept = prune([_entry(w) for w in wheels])
    if out.exists():
        shutil.rmtree(out)
    (out / "files").mkdir(parents=True)
    for e in kept:
        shutil.copy2(e.path, out / "files" / e.path.name)
    _write_channel(out / "simple", 1, kept)
    torch_channels: dict[str, set[str]] = defaultdict(set)
    for e in kept:
        if e.torch:
            torch_channels[e.cuda].add(e.torch)
    for cuda in sorted({e.cuda for e in kept}):
        line = [e for e in kept if e.cuda == cuda]
        _write_channel(out / cuda, 1, [e for e in line if not e.torch])
        for torch in sorted(torch_channels[cuda]):
            _write_channel(out / cuda / torch, 2, [e for e in line if e.torch in (None, torch)])
    return kept
