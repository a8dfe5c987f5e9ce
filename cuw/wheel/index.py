"""A PEP 503 package index generated from folders of finished wheels, added to over time.

Layout (all static files, servable by any web server or ``file://``)::

    <out>/files/<wheel>                      every wheel ever added, once
    <out>/simple/<project>/index.html        the flat root: every wheel
    <out>/<cu130>/<torch2.14>/<project>/     a channel per CUDA line x torch
    <out>/<cu130>/<project>/                 torch-free wheels of the CUDA line
    <out>/cuw-index.json                     what makes the folder an index: file -> sha256

A wheel's channel comes from its local version label (``+cu130torch2.14``);
torch-free wheels (``+cu130``) are listed under every torch channel of their
CUDA line too, so one ``--index-url`` serves a whole environment.

Adding wheels never removes one: older versions stay listed (pip picks the
highest), a published file is never replaced by other bytes, and a folder that
holds anything but an index is refused. Every file is written beside its place
and renamed into it, so a reader of the index never sees half a page or wheel.
"""

from __future__ import annotations

import html
import json
import re
import zipfile
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cuw.base.errors import CuwError
from cuw.base.files import copy_into, held, sha256_of, write_text

MARKER = "cuw-index.json"
LOCK = ".cuw-index.lock"
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


def _entry(path: Path, sha256: Optional[str] = None) -> Entry:
    """A wheel's place in the index; ``sha256``: the digest the marker already holds for a published
    file (pip checks it against the file on every download), so a publish hashes only what is new."""
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except Exception as exc:
        raise CuwError(f"{path}: not a wheel filename ({exc})") from None
    match = _LABEL.match(version.local or "")
    if not match:
        raise CuwError(f"{path.name}: no cell label like +cu130torch2.14 (finish the wheel first)")
    if sha256 is None and not zipfile.is_zipfile(path):
        raise CuwError(f"{path}: not a wheel (not a zip archive); only finished wheels go into an index")
    tag_text = path.name[: -len(".whl")].split("-", 2)[2]
    digest = sha256 or sha256_of(path)
    return Entry(path, canonicalize_name(name), version, match.group(1), match.group(2), tag_text, digest)


def ordered(entries: list[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.project, e.cuda, e.torch or "", e.tags, e.version))


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
        write_text(root / project / "index.html", _page(f"Links for {project}", links), "index page")
    root.mkdir(parents=True, exist_ok=True)
    write_text(root / "index.html", _page("Simple index", [(f"{p}/", p) for p in sorted(by_project)]), "index page")


def _check_index_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise CuwError(f"index folder {out} is a file; give a folder (new, or an index made by `cuw index`)")


def published_files(out: Path) -> dict[str, str]:
    """The index already at ``out`` (file -> sha256); refuses a folder that is not one."""
    if not out.exists():
        return {}
    _check_index_folder(out)
    marker = out / MARKER
    if not marker.is_file():
        if any(p.name not in ("files", LOCK) for p in out.iterdir()):  # files/ alone: a first run's staged files
            raise CuwError(f"{out} holds files but no {MARKER}: it is not an index made by `cuw index`; "
                           "give a new folder or an existing index")  # fmt: skip
        return {}
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        files = data["files"]
        assert isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
    except (ValueError, KeyError, TypeError, AssertionError, UnicodeDecodeError):
        raise CuwError(f"{marker}: unreadable index record; restore it from the published copy") from None
    for name in files:
        if "/" in name or "\\" in name or not (out / "files" / name).is_file():
            raise CuwError(f"{marker}: lists {name!r}, which is not in {out / 'files'}; restore the index")
    return dict(files)


@contextmanager
def index_lock(out: Path) -> Iterator[None]:
    """One writer of the index at ``out`` at a time (on this machine, or on a shared disk that honours
    locks): a read-merge-write without it loses the other writer's wheels. Waits for the other.
    The lock file lives inside the index folder (made here), so a refused run leaves nothing beside it."""
    _check_index_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    with held(out / LOCK):
        yield


def build_index(wheel_dir: Path, out: Path) -> list[Entry]:
    """Adds the wheels of ``wheel_dir`` to the index at ``out`` (created when new); returns every entry."""
    # Every input checked before anything is made (the lock file included); again under the lock.
    wheels = _check_wheel_dir(wheel_dir, out)
    published = published_files(out)
    for e in (_entry(w) for w in wheels):
        _check_not_replaced(e, published, out)
    with index_lock(out):
        return add_to_index(wheel_dir, out)


def _check_wheel_dir(wheel_dir: Path, out: Path) -> list[Path]:
    if not wheel_dir.is_dir():
        raise CuwError(f"wheel folder {wheel_dir} {'is a file' if wheel_dir.exists() else 'does not exist'}")
    src, dest = wheel_dir.resolve(), out.resolve()
    if dest == src or dest in src.parents:
        raise CuwError(f"index folder {out} is or contains the wheel folder {wheel_dir}; give a separate folder")
    wheels = sorted(w for w in wheel_dir.glob("*.whl") if w.is_file())
    if not wheels:
        raise CuwError(f"no wheels in {wheel_dir}")
    _check_index_folder(out)
    return wheels


def _check_not_replaced(e: Entry, published: dict[str, str], out: Path) -> None:
    if published.get(e.path.name, e.sha256) != e.sha256:
        raise CuwError(f"{e.path}: the index at {out} already publishes {e.path.name} with other bytes; "
                       "a published wheel is never replaced (bump the version or the build tag)")  # fmt: skip


def add_to_index(wheel_dir: Path, out: Path) -> list[Entry]:
    """:func:`build_index` for a caller that holds :func:`index_lock`.

    Order: the new files into ``files/`` (staged: nothing lists them yet), then the marker (the
    truth: a file is published once it names it), then the pages, rewritten from the marker. A
    run killed at any point leaves an index the next run completes: a staged file is adopted only
    after it is checked again, and pages that lag behind the marker are rewritten."""
    wheels = _check_wheel_dir(wheel_dir, out)
    published = published_files(out)
    new = [_entry(w) for w in wheels]
    for e in new:
        _check_not_replaced(e, published, out)
    (out / "files").mkdir(parents=True, exist_ok=True)
    for e in new:
        if e.path.name not in published:
            copy_into(e.path, out / "files" / e.path.name, "index file")
            published[e.path.name] = e.sha256
    write_text(out / MARKER, json.dumps({"format": 1, "files": published}, indent=2, sort_keys=True) + "\n", "index record")
    return write_pages(out, published)


def write_pages(out: Path, published: dict[str, str]) -> list[Entry]:
    """Every page of the index, from the marker's files and digests (nothing is hashed again)."""
    kept = ordered([_entry(out / "files" / name, sha) for name, sha in sorted(published.items())])
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
