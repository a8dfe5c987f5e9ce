"""A PEP 503 package index generated from folders of finished wheels, added to over time.

Layout (all static files, servable by any web server or ``file://``)::

    <out>/files/<wheel>                      every wheel ever added, once
    <out>/files/<wheel>.metadata             its METADATA, byte for byte (PEP 658/714: read instead of the wheel)
    <out>/simple/<project>/index.html        the flat root: every wheel
    <out>/<cu130>/<torch2.14>/<project>/     a channel per CUDA line x torch
    <out>/<cu130>/<project>/                 torch-free wheels of the CUDA line
    <out>/cuw-index.json                     what makes the folder an index: file -> sha256, and per file
                                             when it was added, its metadata's sha256, Requires-Python, a yank
    <out>/.../<project>/index.json           PEP 691 JSON (api-version 1.1, PEP 700) beside every page
    <out>/.../index.json                     PEP 691 project list beside every channel's root page
    <out>/packages.json                      every published wheel: name, version, cell, sha256, size, URL
    <out>/choose.html                        pick package, lane, Python, CUDA, torch: the pip command

A wheel's channel comes from its local version label (``+cu130torch2.14``);
torch-free wheels (``+cu130``) are listed under every torch channel of their
CUDA line too, so one ``--index-url`` serves a whole environment.

Adding wheels never removes one: older versions and older builds of a version
(PEP 427's build tag, ``name-1.2.3-1-...``) stay listed (pip and uv pick the highest
version, then the highest build), a published file is never replaced by other bytes, and a folder that
holds anything but an index is refused. Every file is written beside its place
and renamed into it, so a reader of the index never sees half a page or wheel.
Every page, JSON file and ``packages.json`` is derived from the marker alone
(:func:`write_pages`), so they never disagree about what is published.

What installers read without downloading a wheel: each link carries ``data-core-metadata`` (and
the older ``data-dist-info-metadata``) with the sha256 of ``<wheel>.metadata``, and
``data-requires-python`` (HTML-escaped); the JSON carries ``core-metadata``, ``requires-python``
and PEP 700's ``upload-time`` (when the index added the wheel, kept in the marker, so it never
changes). A yanked wheel (PEP 592, :mod:`cuw.wheel.yank`) stays listed with ``data-yanked`` and
the JSON's ``yanked`` saying why: installers skip it unless a requirement pins it with ``==``.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import zipfile
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional
from urllib.parse import quote

from packaging.metadata import parse_email
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from cuw.base.errors import InputError
from cuw.base.files import held, place_bytes, place_copy, place_text, sha256_of
from cuw.base.reading import LIMITS, read_bytes, read_text
from cuw.base.records import published_record
from cuw.config.lanes import LANE_NAMES, LANES
from cuw.wheel import variants
from cuw.wheel.finish import highest_build
from cuw.wheel.verify import integrity

MARKER = "cuw-index.json"
LOCK = ".cuw-index.lock"
PACKAGES = "packages.json"
CHOOSER = "choose.html"
RECORD_SUFFIX = ".build.json"  # the build record beside each wheel (cuw/wheel/publish.py writes it)
METADATA_SUFFIX = ".metadata"  # PEP 658: the wheel's METADATA beside it, at its URL + ".metadata"
DETAIL_KEYS = ("added", "metadata", "requires_python", "yanked", "variant")  # the marker's details of a wheel
API_VERSION = "1.1"  # PEP 691's JSON with PEP 700's versions and size
CHOOSER_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # offered even before a wheel names them
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
    build: int = 0  # the build number (the file name's build tag; 0: untagged, the first build)
    details: dict[str, str] = field(default_factory=dict, compare=False, hash=False)  # the marker's: DETAIL_KEYS


def _entry(path: Path, sha256: Optional[str] = None, details: Optional[dict[str, str]] = None) -> Entry:
    """A wheel's place in the index; ``sha256``: the digest the marker already holds for a published
    file (pip checks it against the file on every download), so a publish hashes only what is new;
    ``details``: the marker's about it (:data:`DETAIL_KEYS`)."""
    try:
        name, version, build, tags = variants.parse_wheel_name(path.name)
    except Exception as exc:
        raise InputError(f"{path}: not a wheel filename ({exc})") from None
    match = _LABEL.match(version.local or "")
    if not match:
        raise InputError(f"{path.name}: no cell label like +cu130torch2.14 (finish the wheel first)")
    if sha256 is None and not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not a wheel (not a zip archive); only finished wheels go into an index")
    tag_text = variants.split_label(path.name)[0][: -len(".whl")].split("-", 3 if build else 2)[-1]
    digest = sha256 or sha256_of(path)
    number = build[0] if build else 0
    project = canonicalize_name(name)
    return Entry(path, project, version, match.group(1), match.group(2), tag_text, digest, number, dict(details or {}))


def ordered(entries: list[Entry]) -> list[Entry]:
    """Per project, channel and tags: oldest version first, and within a version its builds in order."""
    return sorted(entries, key=lambda e: (e.project, e.cuda, e.torch or "", e.tags, e.version, e.build))


def _attribute_text(attrs: dict[str, str]) -> str:
    return "".join(f' {name}="{html.escape(value)}"' for name, value in attrs.items())


def _page(title: str, links: list[tuple[str, str, dict[str, str]]]) -> str:
    """A PEP 503 page; each link's ``attrs`` (``data-...``) HTML-escaped as its href and text."""
    body = "\n".join(
        f'    <a href="{html.escape(href)}"{_attribute_text(attrs)}>{html.escape(text)}</a><br/>' for href, text, attrs in links
    )
    return f"<!DOCTYPE html>\n<html>\n  <head><title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n"


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def _url(e: Entry, up: str, urls: dict[str, str]) -> str:
    """Where a page links a wheel: its remote URL, or ``files/`` relative to the page (``up``)."""
    return urls.get(e.path.name) or f"{up}files/{quote(e.path.name)}"


def _attributes(e: Entry) -> dict[str, str]:
    """A link's PEP 503 attributes: Requires-Python, the metadata file's digest (PEP 658 and PEP
    714's name for it), a yank's reason (PEP 592)."""
    attrs = {}
    if "requires_python" in e.details:
        attrs["data-requires-python"] = e.details["requires_python"]
    if "metadata" in e.details:
        attrs["data-dist-info-metadata"] = attrs["data-core-metadata"] = f"sha256={e.details['metadata']}"
    if "yanked" in e.details:
        attrs["data-yanked"] = e.details["yanked"]
    return attrs


def _file_json(e: Entry, url: str, size: int) -> dict[str, Any]:
    """A file of PEP 691's JSON, with what :func:`_attributes` gives the HTML and PEP 700's upload-time."""
    item: dict[str, Any] = {"filename": e.path.name, "url": url, "hashes": {"sha256": e.sha256}, "size": size}
    if "requires_python" in e.details:
        item["requires-python"] = e.details["requires_python"]
    if "metadata" in e.details:
        item["core-metadata"] = {"sha256": e.details["metadata"]}
    if "added" in e.details:
        item["upload-time"] = e.details["added"]
    item["yanked"] = e.details.get("yanked") or ("yanked" in e.details)  # a reason, True without one, or False
    return item


def _write_channel(
    root: Path,
    depth: int,
    entries: list[Entry],
    sizes: dict[str, int],
    urls: dict[str, str],
    variant_files: Optional[dict[str, tuple[str, int]]] = None,
) -> None:
    """A channel's pages: per project ``index.html`` (PEP 503) and ``index.json`` (PEP 691/700, the
    same files, URLs, digests and attributes), and the root's project list in both forms.
    ``variant_files``: ``files/{name}-{version}-variants.json`` (sha256, size), linked on each page
    that links a wheel of that version (PEP 825)."""
    by_project: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_project[e.project].append(e)
    up = "../" * (depth + 1)
    for project, items in by_project.items():
        links = [(f"{_url(e, up, urls)}#sha256={e.sha256}", e.path.name, _attributes(e)) for e in items]
        files = [_file_json(e, _url(e, up, urls), sizes[e.path.name]) for e in items]
        for name in sorted({variants.index_name(e.path.name) for e in items} & set(variant_files or {})):
            sha, size = (variant_files or {})[name]
            links.append((f"{up}files/{quote(name)}#sha256={sha}", name, {}))
            files.append({"filename": name, "url": f"{up}files/{quote(name)}", "hashes": {"sha256": sha}, "size": size})
        (root / project).mkdir(parents=True, exist_ok=True)
        place_text(root / project / "index.html", _page(f"Links for {project}", links), "index page")
        versions = [str(v) for v in sorted({e.version for e in items})]
        detail = {"meta": {"api-version": API_VERSION}, "name": project, "files": files, "versions": versions}
        place_text(root / project / "index.json", _json_text(detail), "index page")
    root.mkdir(parents=True, exist_ok=True)
    place_text(root / "index.html", _page("Simple index", [(f"{p}/", p, {}) for p in sorted(by_project)]), "index page")
    projects = {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(by_project)]}
    place_text(root / "index.json", _json_text(projects), "index page")


def _check_index_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"index folder {out} is a file; give a folder (new, or an index made by `cuw index`)")


def _transient(name: str) -> bool:
    """A file a run of the forge makes and removes within moments (cuw/base/files.py)."""
    return name.startswith(".cuw-write-probe-") or (name.startswith(f".{MARKER}.") and name.endswith(".partial"))


def published_files(out: Path) -> dict[str, str]:
    """The index already at ``out`` (file -> sha256); refuses a folder that is not one."""
    if not out.exists():
        return {}
    _check_index_folder(out)
    marker = out / MARKER
    if not marker.is_file():
        # files/ alone: a first run's staged files; a concurrent first run's write probe or a temp of
        # its marker (files.py's names) are no foreign files either. A first run writes its marker
        # before any page, so pages seen here with the marker there now are that run's: an index.
        foreign = any(p.name not in ("files", LOCK) and not _transient(p.name) for p in out.iterdir())
        if foreign and not marker.is_file():
            raise InputError(
                f"{out} holds files but no {MARKER}: it is not an index made by `cuw index`; "
                "give a new folder or an existing index"
            )
        if not foreign:
            return {}
    files, remote = _read_marker(marker)
    for name in files:
        if "/" in name or "\\" in name or (name not in remote and not (out / "files" / name).is_file()):
            raise InputError(f"{marker}: lists {name!r}, which is not in {out / 'files'}; restore the index")
    return dict(files)


def marker_lists(data: Any, where: str) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """An index marker's files (name -> sha256) and its remote ones (name -> url and size: wheels
    stored elsewhere, release assets, listed by URL), checked; ``where`` names the marker (a folder's
    file or the URL it is served at) in the one line that refuses it."""
    files = data.get("files") if isinstance(data, dict) else None
    remote = data.get("remote", {}) if isinstance(data, dict) else None
    if (
        not isinstance(files, dict)
        or not isinstance(remote, dict)
        or not all(isinstance(v, str) for v in files.values())
        or not all(
            n in files
            and isinstance(r, dict)
            and str(r.get("url", "")).startswith(("https://", "http://"))
            and type(r.get("size")) is int
            for n, r in remote.items()
        )
    ):
        raise InputError(
            f"{where} is not an index record (files, and remote wheels with url and size); restore the published index"
        )
    for name in files:
        if not (
            name.endswith(".whl") and not name.startswith(".") and "/" not in name and "\\" not in name and name.isprintable()
        ):
            raise InputError(f"{where} lists {name!r}, not a wheel file name; restore the published index")
    return dict(files), dict(remote)


_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")  # PEP 700's upload-time


def marker_details(data: Any, files: dict[str, str], where: str) -> dict[str, dict[str, str]]:
    """An index marker's details, per listed wheel: when the index added it (``added``, PEP 700's
    upload-time), its metadata file's sha256 (``metadata``), METADATA's ``requires_python`` and a
    yank's reason (``yanked``); each optional (an index older than them has none), all checked."""
    details = data.get("details", {}) if isinstance(data, dict) else None
    if not isinstance(details, dict) or not all(
        name in files
        and isinstance(about, dict)
        and all(key in DETAIL_KEYS and isinstance(value, str) for key, value in about.items())
        and _HEX64.match(about.get("metadata", "0" * 64))
        and _TIME.match(about.get("added", "2000-01-01T00:00:00Z"))
        for name, about in details.items()
    ):
        raise InputError(
            f"{where}: its details are not an index record's (per listed wheel: {', '.join(DETAIL_KEYS)}); "
            "restore the published index"
        )
    return {name: dict(about) for name, about in details.items()}


def _marker_data(marker: Path) -> Any:
    try:
        return json.loads(read_text(marker, "index record", "index"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{marker}: unreadable index record; restore it from the published copy") from None


def _read_marker(marker: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    return marker_lists(_marker_data(marker), str(marker))


def read_details(out: Path) -> dict[str, dict[str, str]]:
    """The details the marker of the index at ``out`` holds (:func:`marker_details`); none without one."""
    marker = out / MARKER
    if not marker.is_file():
        return {}
    data = _marker_data(marker)
    return marker_details(data, marker_lists(data, str(marker))[0], str(marker))


def yanked_in(where: "Path | str", option: str) -> dict[str, str]:
    """The yanked wheels (name -> reason) of the index in a folder, or served at a URL (without a
    trailing ``/``); its marker checked as every reader checks it."""
    if isinstance(where, Path):
        details = read_details(where)
    else:
        from cuw.base import http

        data, said = http.fetch_json(f"{where}/{MARKER}", option), f"{option}: {where}/{MARKER}"
        details = marker_details(data, marker_lists(data, said)[0], said)
    return {name: about["yanked"] for name, about in sorted(details.items()) if "yanked" in about}


@dataclass(frozen=True)
class ServedIndex:
    """An index read from the URL it is served at: its marker's lists, details and every build record."""

    files: dict[str, str]
    remote: dict[str, dict[str, Any]]
    records: dict[str, dict[str, Any]]
    details: dict[str, dict[str, str]] = field(default_factory=dict)


def read_served(base: str, option: str, lenient: bool = False) -> ServedIndex:
    """The marker and every wheel's build record of the index served at ``base`` (no trailing
    ``/``), each checked: the one reader of an online index (the plan's, the audit's, publish's).
    ``lenient``: a record that does not check is kept for the audit to report (records.published_record)."""
    from cuw.base import http

    deadline = http.Deadline()  # one for the whole read, the marker and every record (a few at a time)
    data, where = http.fetch_json(f"{base}/{MARKER}", option, deadline=deadline), f"{option}: {base}/{MARKER}"
    files, remote = marker_lists(data, where)
    details = marker_details(data, files, where)
    names = sorted(files)
    urls = [f"{base}/files/{quote(name + RECORD_SUFFIX)}" for name in names]
    records = {}
    for name, url, data in zip(names, urls, http.fetch_all(urls, option, deadline=deadline)):
        records[name] = published_record(http.parse_json(data, url, option), name, f"{option}: {url}", lenient)
    return ServedIndex(files, remote, records, details)


def remote_files(out: Path) -> dict[str, dict[str, Any]]:
    """The index's wheels stored elsewhere (name -> {url, size}); empty for a folder index."""
    marker = out / MARKER
    return _read_marker(marker)[1] if marker.is_file() else {}


def write_marker(
    out: Path, published: dict[str, str], remote: dict[str, dict[str, Any]], details: Optional[dict[str, dict[str, str]]] = None
) -> None:
    """The marker: ``published`` (file -> sha256), the ``remote`` wheels' URLs and sizes, and the
    wheels' ``details`` (:func:`marker_details`; None: the ones the marker holds now)."""
    details = read_details(out) if details is None else details
    body: dict[str, Any] = {"format": 1, "files": published}
    if remote:
        body["remote"] = remote
    kept = {name: about for name, about in sorted(details.items()) if name in published and about}
    if kept:
        body["details"] = kept
    reports = {name: listed for name, listed in read_gpu_reports(out).items() if name in published}  # cuw gpu's, kept
    if reports:
        body[GPU_REPORTS] = reports
    place_text(out / MARKER, json.dumps(body, indent=2, sort_keys=True) + "\n", "index record")


# Reports of runs on a GPU (cuw gpu, cuw/wheel/gpu.py): additions beside a published wheel, never a
# change to it or its record. Each is files/<wheel>.gpu-<12 hex of its sha256>.json, listed in the
# marker (wheel -> {file: sha256}) so the audit hashes it like every file, shown by choose.html.
GPU_REPORTS = "gpu_reports"
_GPU_REPORT = re.compile(r"^(?P<wheel>[^/\\]+\.whl)\.gpu-[0-9a-f]{12}\.json$")


def marker_gpu_reports(data: Any, files: dict[str, str], where: str) -> dict[str, dict[str, str]]:
    """An index marker's GPU reports (wheel -> {report file: sha256}), checked."""
    reports = data.get(GPU_REPORTS, {}) if isinstance(data, dict) else None
    if not isinstance(reports, dict) or not all(
        wheel in files
        and isinstance(listed, dict)
        and all(
            isinstance(name, str)
            and isinstance(sha, str)
            and _HEX64.match(sha)
            and (m := _GPU_REPORT.match(name)) is not None
            and m.group("wheel") == wheel
            for name, sha in listed.items()
        )
        for wheel, listed in reports.items()
    ):
        raise InputError(
            f"{where}: its {GPU_REPORTS} are not an index record's (per listed wheel: <wheel>.gpu-<hex>.json -> sha256); "
            "restore the published index"
        )
    return {wheel: dict(listed) for wheel, listed in reports.items()}


def read_gpu_reports(out: Path) -> dict[str, dict[str, str]]:
    """The GPU reports the marker of the index at ``out`` lists; none without a marker."""
    marker = out / MARKER
    if not marker.is_file():
        return {}
    data = _marker_data(marker)
    return marker_gpu_reports(data, marker_lists(data, str(marker))[0], str(marker))


def gpu_report_name(wheel: str, data: bytes) -> str:
    return f"{wheel}.gpu-{hashlib.sha256(data).hexdigest()[:12]}.json"


def add_gpu_reports(out: Path, reports: list[Path]) -> list[str]:
    """Adds each ``cuw gpu`` report beside the published wheel it names (append-only: the same
    report again is already there; the wheel, its record and the other files stay as they are).
    Every report is checked before anything is written: it ran on a GPU (not a dry run), passed, and
    ran the published bytes. Returns the names of the files added."""
    with index_lock(out):
        published = published_files(out)
        listed = read_gpu_reports(out)
        new: dict[str, tuple[str, bytes]] = {}
        for path in reports:
            data = read_bytes(path, "GPU report", "report")
            try:
                report = json.loads(data)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise InputError(f"{path}: not a GPU report (unreadable JSON); give the <wheel>.gpu.json cuw gpu wrote") from None
            wheel = report.get("wheel") if isinstance(report, dict) else None
            if not isinstance(wheel, str) or wheel not in published:
                raise InputError(f"{path}: its wheel {wheel!r} is not published in the index at {out}; publish the wheel first")
            if report.get("sha256") != published[wheel]:
                raise InputError(f"{path}: ran other bytes than the published {wheel} (sha256 differs); run the published wheel")
            device = report.get("device")
            if report.get("dry_run") or not isinstance(device, dict) or not device.get("name") or not device.get("sm"):
                raise InputError(f"{path}: a dry run (no device): only a run on a GPU goes into an index")
            if report.get("result") != "pass":
                raise InputError(f"{path}: the run failed ({report.get('result')}); only a passed run goes into an index")
            name = gpu_report_name(wheel, data)
            if name not in listed.get(wheel, {}):
                new[name] = (wheel, data)
        (out / "files").mkdir(parents=True, exist_ok=True)
        for name, (wheel, data) in sorted(new.items()):
            place_bytes(out / "files" / name, data, "index file")
            listed.setdefault(wheel, {})[name] = hashlib.sha256(data).hexdigest()
        if new:
            _write_gpu_reports(out, published, listed)
        return sorted(new)


def _write_gpu_reports(out: Path, published: dict[str, str], listed: dict[str, dict[str, str]]) -> None:
    """The marker with ``listed`` as its GPU reports (the rest of it as it is), then the pages."""
    data = _marker_data(out / MARKER)
    data[GPU_REPORTS] = {wheel: dict(sorted(files.items())) for wheel, files in sorted(listed.items()) if files}
    place_text(out / MARKER, json.dumps(data, indent=2, sort_keys=True) + "\n", "index record")
    write_pages(out, published)


def _ran_on(out: Path, reports: dict[str, dict[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """Per wheel, where its listed GPU reports say it ran (for packages.json and choose.html)."""
    ran: dict[str, list[dict[str, Any]]] = {}
    for wheel, listed in reports.items():
        for name, sha in sorted(listed.items()):
            try:
                report = json.loads(read_bytes(out / "files" / name, "GPU report", "report"))
                device = report["device"]
                entry = {"device": str(device["name"]), "sm": str(device["sm"]), "date": str(report.get("date", ""))}
            except (OSError, ValueError, UnicodeDecodeError, RecursionError, KeyError, TypeError):
                continue  # missing or unreadable: the audit names it
            ran.setdefault(wheel, []).append({**entry, "url": f"files/{quote(name)}", "sha256": sha})
    return ran


@contextmanager
def index_lock(out: Path) -> Iterator[None]:
    """One writer of the index at ``out`` at a time (on this machine, or on a shared disk that honours
    locks): a read-merge-write without it loses the other writer's wheels. Waits for the other.
    The lock file lives inside the index folder (made here), so a refused run leaves nothing beside it."""
    _check_index_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    with held(out / LOCK):
        yield


def upload_time() -> str:
    """Now, as PEP 700's upload-time (UTC, microseconds)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_metadata(wheel: Path) -> bytes:
    """The wheel's ``<name>-<version>.dist-info/METADATA``, byte for byte: what an installer reads."""
    name = canonicalize_name(variants.parse_wheel_name(wheel.name)[0])
    try:
        with zipfile.ZipFile(wheel) as zf:
            found = [
                member
                for member in zf.namelist()
                if member.count("/") == 1
                and member.endswith(".dist-info/METADATA")
                and canonicalize_name(member.split("/")[0][: -len(".dist-info")].rsplit("-", 1)[0]) == name
            ]
            if len(found) == 1 and zf.getinfo(found[0]).file_size > LIMITS["member"]:
                raise InputError(f"{wheel}: its {found[0]} is larger than any METADATA; only finished wheels go into an index")
            data = zf.read(found[0]) if len(found) == 1 else None
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{wheel}: cannot read its METADATA ({exc}); only finished wheels go into an index") from None
    if data is None:
        raise InputError(f"{wheel}: {len(found)} {name}-*.dist-info/METADATA in it, not 1; only finished wheels go into an index")
    return data


def stage_metadata(wheel: Path, folder: Path, details: dict[str, dict[str, str]], added: Optional[str]) -> None:
    """``folder/<wheel>.metadata`` (its METADATA, byte for byte), and into ``details`` the file's
    sha256, METADATA's Requires-Python and ``added`` (the upload time; None: unknown, an older
    wheel's), the wheel's other details (a yank) kept."""
    data = read_metadata(wheel)
    about = {"metadata": hashlib.sha256(data).hexdigest()}
    requires = parse_email(data)[0].get("requires_python")
    if requires:
        try:
            SpecifierSet(requires)
        except InvalidSpecifier:
            raise InputError(
                f"{wheel}: METADATA Requires-Python {requires!r} is not a version specifier; "
                "fix requires-python in the package and build it again"
            ) from None
        about["requires_python"] = requires
    if added is not None:
        about["added"] = added
    variant = variants.kept_variant(wheel)  # its variant.json's variant: the version's -variants.json merges them
    if variant is not None:
        about["variant"] = variant
    place_bytes(folder / (wheel.name + METADATA_SUFFIX), data, "index file")
    details[wheel.name] = {**details.get(wheel.name, {}), **about}


def build_index(wheel_dir: Path, out: Path) -> list[Entry]:
    """Adds the wheels of ``wheel_dir`` to the index at ``out`` (created when new); returns every entry."""
    # Every input checked before anything is made (the lock file included); again under the lock.
    wheels = _check_wheel_dir(wheel_dir, out)
    published = published_files(out)
    for e in (_entry(w) for w in wheels):
        _check_not_replaced(e, published, out)
        problems = [] if e.path.name in published else integrity(e.path)  # publish's check of a wheel, the one rule
        if problems:
            raise InputError(f"{e.path}: {'; '.join(problems)}; an index takes only sound wheels: build it again")
    with index_lock(out):
        return add_to_index(wheel_dir, out)


def _check_wheel_dir(wheel_dir: Path, out: Path) -> list[Path]:
    if not wheel_dir.is_dir():
        raise InputError(f"wheel folder {wheel_dir} {'is a file' if wheel_dir.exists() else 'does not exist'}")
    src, dest = wheel_dir.resolve(), out.resolve()
    if dest == src or dest in src.parents:
        raise InputError(f"index folder {out} is or contains the wheel folder {wheel_dir}; give a separate folder")
    wheels = sorted(w for w in wheel_dir.glob("*.whl") if w.is_file())
    if not wheels:
        raise InputError(f"no wheels in {wheel_dir}")
    _check_index_folder(out)
    return wheels


def _check_not_replaced(e: Entry, published: dict[str, str], out: Path) -> None:
    if published.get(e.path.name, e.sha256) != e.sha256:
        raise InputError(
            f"{e.path}: the index at {out} already publishes {e.path.name} with other bytes; "
            f"a published wheel is never replaced: build it again as build {highest_build(published, e.path.name) + 1} "
            f"of its version (cuw build --published {out}, or --build-number {highest_build(published, e.path.name) + 1})"
        )


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
    details, added = read_details(out), upload_time()
    for e in new:
        if e.path.name not in published:
            place_copy(e.path, out / "files" / e.path.name, "index file")
            stage_metadata(out / "files" / e.path.name, out / "files", details, added)
            published[e.path.name] = e.sha256
    remote = remote_files(out)
    _backfill_metadata(out, published, remote, details)
    write_marker(out, published, remote, details)
    return write_pages(out, published, remote)


def _backfill_metadata(out: Path, published: dict[str, str], remote: dict[str, Any], details: dict[str, dict[str, str]]) -> None:
    """The metadata files an index made before them lacks, for the wheels in its ``files/`` (their
    upload time unknown, so none); a wheel whose METADATA cannot be read stays without one."""
    for name in sorted(set(published) - set(remote)):
        if "metadata" in details.get(name, {}) and (out / "files" / (name + METADATA_SUFFIX)).is_file():
            continue
        try:
            stage_metadata(out / "files" / name, out / "files", details, None)
        except InputError:
            continue


def write_pages(out: Path, published: dict[str, str], remote: Optional[dict[str, dict[str, Any]]] = None) -> list[Entry]:
    """Every page of the index, from the marker's files and digests (no wheel is hashed again): the
    PEP 503 pages with their PEP 691 JSON, then ``packages.json`` and ``choose.html``. A remote
    wheel is linked by its URL (``#sha256=`` as every link), a local one under ``files/``."""
    remote = remote_files(out) if remote is None else remote
    details = read_details(out)
    kept = ordered([_entry(out / "files" / name, sha, details.get(name)) for name, sha in sorted(published.items())])
    sizes = {e.path.name: remote[e.path.name]["size"] if e.path.name in remote else e.path.stat().st_size for e in kept}
    urls = {name: r["url"] for name, r in remote.items()}
    vfiles = _write_variant_files(out, kept)
    _write_channel(out / "simple", 1, kept, sizes, urls, vfiles)
    torch_channels: dict[str, set[str]] = defaultdict(set)
    for e in kept:
        if e.torch:
            torch_channels[e.cuda].add(e.torch)
    for cuda in sorted({e.cuda for e in kept}):
        line = [e for e in kept if e.cuda == cuda]
        _write_channel(out / cuda, 1, [e for e in line if not e.torch], sizes, urls, vfiles)
        for torch in sorted(torch_channels[cuda]):
            _write_channel(out / cuda / torch, 2, [e for e in line if e.torch in (None, torch)], sizes, urls, vfiles)
    ran_on = _ran_on(out, read_gpu_reports(out))
    place_text(out / PACKAGES, _json_text(packages_manifest(kept, sizes, urls, ran_on)), "index page")
    place_text(out / CHOOSER, CHOOSER_PAGE, "index page")
    return kept


def _write_variant_files(out: Path, kept: list[Entry]) -> dict[str, tuple[str, int]]:
    """``files/{name}-{version}-variants.json`` for each version with variant wheels (PEP 825): the
    merge of the variants the marker keeps of them; returns each file's (sha256, size)."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for e in kept:
        if "variant" in e.details:
            found[variants.index_name(e.path.name)][e.path.name] = e.details["variant"]
    made = {}
    for name, of_version in sorted(found.items()):
        data = variants.text(variants.document(variants.merge(of_version, str(out / MARKER)))).encode()
        place_bytes(out / "files" / name, data, "index file")
        made[name] = (hashlib.sha256(data).hexdigest(), len(data))
    return made


# packages.json: the published wheels for tools and people (and choose.html).


def _python(digits: str) -> str | None:
    """``311`` -> ``3.11``; ``3`` -> None (every 3.x)."""
    return f"{digits[0]}.{digits[1:]}" if len(digits) > 1 and digits.isdigit() else None


def _on_lane(platform: str, lane: Any) -> bool:
    """Whether a wheel's platform tag installs on ``lane`` (``manylinux_2_34_x86_64``: linux)."""
    if lane.os == "windows":
        return platform == lane.wheel_platform
    return "linux" in platform and platform.endswith("_" + lane.wheel_platform)


def _serves(e: Entry) -> dict[str, Any]:
    """Where pip installs the wheel, read from its file name: lanes (None: any platform), the Python
    range (None: unbounded), the CUDA line and torch line of its local label."""
    _, _, _, tags = variants.parse_wheel_name(e.path.name)
    lanes: set[str] | None = set()
    lows: list[str | None] = []
    highs: list[str | None] = []
    for tag in tags:
        if tag.platform == "any":
            lanes = None
        elif lanes is not None:
            lanes |= {lane.name for lane in LANES.values() if _on_lane(tag.platform, lane)}
        interpreter = tag.interpreter
        if interpreter.startswith("cp") and interpreter[2:].isdigit():
            version = _python(interpreter[2:])
            lows.append(version)
            highs.append(None if tag.abi == "abi3" else version)
        elif interpreter.startswith("py") and interpreter[2:].isdigit():
            lows.append(_python(interpreter[2:]))
            highs.append(None)
    low = None if not lows or None in lows else min(lows, key=lambda v: Version(str(v)))
    high = None if not highs or None in highs else max(highs, key=lambda v: Version(str(v)))
    digits = e.cuda[2:]
    return {
        "lanes": None if lanes is None else [n for n in LANE_NAMES if n in lanes],
        "python_min": low,
        "python_max": high,
        "cuda": f"{digits[:-1]}.{digits[-1]}",
        "torch": e.torch[len("torch") :] if e.torch else None,
    }


def _cell(record: Any, serves: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The wheel's cell: its build record's when it names one, else read from the file name."""
    cell = record.get("cell") if isinstance(record, dict) else None
    if isinstance(cell, dict) and all(k in cell for k in ("lane", "python", "cuda", "torch")):
        return {k: cell[k] for k in ("lane", "python", "cuda", "torch")}, "build record"
    lanes = serves["lanes"]
    exact = serves["python_min"] if serves["python_min"] == serves["python_max"] else None
    return {
        "lane": lanes[0] if lanes and len(lanes) == 1 else None,
        "python": exact,
        "cuda": serves["cuda"],
        "torch": serves["torch"],
    }, "file name"


def packages_manifest(
    kept: list[Entry],
    sizes: dict[str, int],
    urls: Optional[dict[str, str]] = None,
    ran_on: Optional[dict[str, list[dict[str, Any]]]] = None,
) -> dict[str, Any]:
    """``packages.json``: every published wheel (sorted by name, version, build, file name), URLs
    relative to the index root; the build record's digest and cell when ``files/<wheel>.build.json`` is there."""
    wheels, urls = [], urls or {}
    for e in sorted(kept, key=lambda e: (e.project, e.version, e.build, e.path.name)):
        record_path = e.path.with_name(e.path.name + RECORD_SUFFIX)
        record_data = read_bytes(record_path, "build record", "report") if record_path.is_file() else None
        try:
            record = json.loads(record_data) if record_data is not None else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            record = None  # unreadable: its digest is still given, the cell comes from the file name
        serves = _serves(e)
        cell, source = _cell(record, serves)
        wheels.append(
            {
                "name": e.project,
                "version": str(e.version),
                "build": e.build,
                "filename": e.path.name,
                "url": _url(e, "", urls),
                "sha256": e.sha256,
                "size": sizes[e.path.name],
                "tags": e.tags,
                "cell": cell,
                "cell_from": source,
                "channel": f"{e.cuda}/{e.torch}/" if e.torch else f"{e.cuda}/",
                "serves": serves,
                "build_record": None
                if record_data is None
                else {"url": f"files/{quote(record_path.name)}", "sha256": hashlib.sha256(record_data).hexdigest()},
                "metadata": None
                if "metadata" not in e.details
                else {"url": _url(e, "", urls) + METADATA_SUFFIX, "sha256": e.details["metadata"]},
                "requires_python": e.details.get("requires_python"),
                "upload_time": e.details.get("added"),
                "yanked": e.details.get("yanked"),
                "ran_on": (ran_on or {}).get(e.path.name, []),  # cuw gpu's reports: device, sm, date, url, sha256
            }
        )
    return {"format": 1, "lanes": list(LANE_NAMES), "pythons": list(CHOOSER_PYTHONS), "wheels": wheels}


# choose.html: static, no external resources; reads packages.json beside it, so it works wherever
# the index is served (the index URL in the command is the page's own folder).
CHOOSER_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Choose a wheel</title>
<style>
  body { font-family: sans-serif; margin: 2em; max-width: 60em; }
  label { display: inline-block; margin: 0 1.5em 0.8em 0; }
  pre { background: #f3f3f3; padding: 0.8em; white-space: pre-wrap; }
  .not-built { color: #a00; }
  .yanked { color: #a60; }
</style>
</head>
<body>
<h1>Choose a wheel</h1>
<form id="choices">
  <label>Package <select id="package" name="package"></select></label>
  <label>OS <select id="lane" name="lane"></select></label>
  <label>Python <select id="python" name="python"></select></label>
  <label>CUDA <select id="cuda" name="cuda"></select></label>
  <label>torch <select id="torch" name="torch"></select></label>
</form>
<p id="result">reading packages.json&hellip;</p>
<pre id="command" hidden></pre>
<p id="wheel"></p>
<p id="yanked" class="yanked"></p>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const canon = (name) => name.toLowerCase().replace(/[-_.]+/g, "-");
const pyKey = (v) => v.split(".").map(Number);
const pyCmp = (a, b) => { const x = pyKey(a), y = pyKey(b); return x[0] - y[0] || x[1] - y[1]; };
const isYanked = (w) => typeof w.yanked === "string";  // packages.json: the reason, or null
const join = (items) => items.length < 2 ? items.join("") : items.slice(0, -1).join(", ") + " and " + items[items.length - 1];
const DIMS = {
  lane: { ok: (s, v) => s.lanes === null || s.lanes.includes(v), say: (v) => v,
          built: (s) => s.lanes === null ? ["any platform"] : s.lanes },
  python: { ok: (s, v) => (s.python_min === null || pyCmp(v, s.python_min) >= 0) &&
                          (s.python_max === null || pyCmp(v, s.python_max) <= 0),
            say: (v) => "Python " + v,
            built: (s) => [s.python_min === null && s.python_max === null ? "any Python"
                           : s.python_min === s.python_max ? "Python " + s.python_min
                           : s.python_max === null ? "Python " + s.python_min + " and later"
                           : "Python " + (s.python_min || "3") + " to " + s.python_max] },
  cuda: { ok: (s, v) => s.cuda === v, say: (v) => "CUDA " + v, built: (s) => ["CUDA " + s.cuda] },
  torch: { ok: (s, v) => v === "none" ? s.torch === null : s.torch === null || s.torch === v,
           say: (v) => v === "none" ? "no torch" : "torch " + v,
           built: (s) => [s.torch === null ? "no torch" : "torch " + s.torch] },
};
let wheels = [];

function fill(id, values, say) {
  const select = $(id);
  for (const v of values) {
    const option = document.createElement("option");
    option.value = v;
    option.textContent = say ? say(v) : v;
    select.appendChild(option);
  }
}

function preselect(params) {
  for (const id of ["package", "lane", "python", "cuda", "torch"]) {
    let v = params.get(id);
    if (v === null) continue;
    if (id === "package") v = canon(v);
    if (id === "torch" && (v === "" || v === "null")) v = "none";
    const select = $(id);
    if (![...select.options].some((o) => o.value === v)) fill(id, [v]);  // asked for: shown, even if never built
    select.value = v;
  }
}

function choose() {
  const pick = {};
  for (const id of ["package", "lane", "python", "cuda", "torch"]) pick[id] = $(id).value;
  const command = $("command"), result = $("result"), about = $("wheel");
  command.hidden = true;
  about.textContent = $("yanked").textContent = "";
  const mine = wheels.filter((w) => w.name === pick.package);
  const dims = Object.keys(DIMS);
  const fits = (w, skip) => dims.every((d) => d === skip || DIMS[d].ok(w.serves, pick[d]));
  const matches = mine.filter((w) => fits(w, null));
  if (matches.length) {
    const live = matches.filter((x) => !isYanked(x));  // installers skip a yanked wheel unless pinned with ==
    const offered = live.length ? live : matches;
    const w = offered[offered.length - 1];  // packages.json lists a package's wheels oldest version and build first
    let channel = w.channel;
    const torchChannel = w.serves.torch === null && pick.torch !== "none"
      ? channel + "torch" + pick.torch + "/" : null;  // a torch-free wheel is listed under its line's torch channels too
    if (torchChannel && wheels.some((x) => x.channel === torchChannel)) channel = torchChannel;
    const base = new URL(".", window.location.href).href;
    result.className = isYanked(w) ? "yanked" : "built";
    result.textContent = (isYanked(w) ? "yanked: " : "built: ") + w.name + " " + w.version
      + (w.build ? " (build " + w.build + ")" : "")
      + (isYanked(w) ? " (" + w.yanked + "); installed only by this exact pin" : "");
    command.textContent = "pip install --index-url " + base + channel + " " + w.name + "==" + w.version;
    command.hidden = false;
    about.textContent = w.filename + " (" + w.size + " bytes, sha256 " + w.sha256 + ")"
      + (w.build_record ? "; build record: " + w.build_record.url : "")
      + (w.ran_on && w.ran_on.length ? "; ran on: " + w.ran_on.map((r) => r.device + ", " + r.sm).join("; ") : "");
    const withdrawn = matches.filter((x) => isYanked(x) && x !== w);
    if (withdrawn.length) {
      $("yanked").textContent = "yanked, not offered: "
        + withdrawn.map((x) => x.version + (x.build ? " (build " + x.build + ")" : "") + ": " + x.yanked).join("; ");
    }
    return;
  }
  let reason;
  if (!mine.length) {
    reason = "no package named " + pick.package + " in this index";
  } else {
    for (const d of dims) {
      const near = mine.filter((w) => fits(w, d));
      if (!near.length) continue;
      const others = dims.filter((o) => o !== d).map((o) => DIMS[o].say(pick[o]));
      const built = [...new Set(near.flatMap((w) => DIMS[d].built(w.serves)))];
      reason = "no wheel for " + DIMS[d].say(pick[d]) + " with " + join(others) + ": built for " + built.join(", ");
      break;
    }
    if (!reason) {
      const cells = [...new Set(mine.map((w) => dims.map((d) => DIMS[d].built(w.serves).join("/")).join(", ")))];
      reason = "no wheel for " + join(dims.map((d) => DIMS[d].say(pick[d]))) + ": " + pick.package
        + " is built for " + cells.join("; ");
    }
  }
  result.className = "not-built";
  result.textContent = "not built: " + reason;
}

async function main() {
  let data;
  try {
    const response = await fetch("packages.json", { cache: "no-cache" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    data = await response.json();
  } catch (err) {
    $("result").textContent = "cannot read packages.json beside this page (" + err + "); a browser does not let a "
      + "page opened as a file read it: serve the index folder (python -m http.server) and open it from there";
    return;
  }
  wheels = data.wheels;
  if (!wheels.length) {
    $("result").textContent = "this index publishes no wheels yet";
    return;
  }
  const uniq = (xs) => [...new Set(xs)];
  fill("package", uniq(wheels.map((w) => w.name)).sort());
  fill("lane", data.lanes);
  const pythons = uniq([...data.pythons, ...wheels.flatMap((w) => [w.serves.python_min, w.serves.python_max])])
    .filter((v) => v !== null).sort(pyCmp);
  fill("python", pythons);
  fill("cuda", uniq(wheels.map((w) => w.serves.cuda)).sort(pyCmp));
  fill("torch", ["none", ...uniq(wheels.map((w) => w.serves.torch).filter((v) => v !== null)).sort(pyCmp)],
       DIMS.torch.say);
  preselect(new URLSearchParams(window.location.search));
  for (const id of ["package", "lane", "python", "cuda", "torch"]) $(id).addEventListener("change", choose);
  choose();
}
main();
</script>
</body>
</html>
"""
