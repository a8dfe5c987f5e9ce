"""What the published index already holds, read for the plan (``cuw matrix --published``).

A cell whose published build record names today's inputs (:mod:`cuw.config.inputs`) is
``current`` and needs no job; one with records of other inputs is ``stale`` (the record says
which input changed, and where it was built when the builder differs); one whose records are of an
older inputs scheme that cannot tell is ``not comparable``; one with none is ``missing``. A py3
wheel built with any Python covers its collapsed cell. ``--rebuild missing`` plans the missing cells
only, ``stale`` (the default) the stale ones too, ``all`` every cell, the not comparable ones
included. An index that cannot be read is an error, never "nothing published": reading it as empty
would rebuild the whole grid.

The index is a folder (a self-hosted runner's disk, a local run's) or the URL it is served at:
its ``cuw-index.json`` lists the wheels, and each wheel's record is ``files/<wheel>.build.json``
(read over HTTP under one deadline, a few at a time: :mod:`cuw.base.http`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union
from urllib.parse import quote, unquote, urlsplit

from packaging.utils import InvalidWheelFilename
from packaging.version import InvalidVersion, Version

from cuw.base import http
from cuw.base.errors import InputError
from cuw.base.reading import read_bytes
from cuw.base.records import published_record
from cuw.config.cell import Cell
from cuw.config.inputs import INPUTS_SCHEME, cell_inputs, changed_inputs, compare_inputs, input_cell, inputs_digest
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe
from cuw.config.lanes import LANE_NAMES
from cuw.wheel.index import MARKER, RECORD_SUFFIX, marker_lists, published_files, read_served, remote_files
from cuw.wheel.variants import parse_wheel_name

REBUILD = ("missing", "stale", "all")
MAX_RECORD_BYTES = http.MAX_BYTES


@dataclass
class CellStatus:
    current: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # cell id -> which inputs changed
    missing: list[str] = field(default_factory=list)
    not_comparable: dict[str, str] = field(default_factory=dict)  # cell id -> what its older record cannot tell

    def to_build(self, rebuild: str) -> set[str]:
        if rebuild == "all":
            return {*self.current, *self.stale, *self.missing, *self.not_comparable}
        return {*self.missing, *(self.stale if rebuild == "stale" else ())}


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def locate(location: str, option: str = "--published") -> Union[str, Path]:
    """Where an index is: an http(s) URL (returned without a trailing ``/``) or a folder (a
    ``file://`` URL is its folder). An empty value and any other scheme are refused: read as a
    folder, they would be "nothing published"."""
    if not location.strip():
        raise InputError(f"{option}: an empty value; give the index folder or the http(s) URL it is served at")
    match = _SCHEME.match(location)
    if match is None:
        return Path(location)
    scheme = match.group(1).lower()
    if scheme in ("http", "https"):
        return scheme + location[len(scheme) :].rstrip("/")
    parts = urlsplit(location)
    if scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    raise InputError(f"{option} {location}: {scheme}:// is not read; give the index folder or the http(s) URL it is served at")


def read_records(location: str, option: str = "--published") -> list[dict[str, Any]]:
    """Every published wheel's build record, from an index folder or the URL it is served at."""
    return read_index(location, option).records


@dataclass(frozen=True)
class Published:
    records: list[dict[str, Any]]  # every published wheel's build record
    wheels: dict[str, str]  # wheel name -> where it is: its URL, or its path in the index folder
    sizes: dict[str, int]  # a release asset's size, as the marker lists it
    digests: dict[str, str] = field(default_factory=dict)  # wheel name -> the sha256 the marker lists


def read_index(location: str, option: str = "--published", lost_ok: bool = False) -> Published:
    """Every published wheel's build record, and where each wheel is: under ``files/``, or a
    release asset at the URL the marker names. ``lost_ok`` (the audit): a folder whose marker lists a
    wheel missing from ``files/``, or a record whose fields do not check, is read all the same (the
    audit reports the lost file or the junk record as its wheel's finding)."""
    where = locate(location, option)
    if isinstance(where, str):
        served = read_served(where, option, lenient=lost_ok)
        remote = served.remote
        wheels = {name: _remote_url(remote.get(name)) or f"{where}/files/{quote(name)}" for name in sorted(served.files)}
        return Published([served.records[name] for name in sorted(served.files)], wheels, _sizes(remote), dict(served.files))
    return _read_folder(where, location, option, lost_ok)


def _read_folder(folder: Path, location: str, option: str, lost_ok: bool = False) -> Published:
    if not folder.is_dir():
        fix = (
            "make it empty for a first run, or leave out --published"
            if option == "--published"
            else "give the folder the index was published to"
        )
        what = "is a file, not an index folder" if folder.exists() else "no such index folder"
        raise InputError(f"{option} {location}: {what} ({fix})")
    marker = folder / MARKER
    if lost_ok and marker.is_file():  # the marker checked, a listed file that is gone left to the caller
        listed = marker_lists(http.parse_json(read_bytes(marker, "index record", "index"), str(marker), option), str(marker))[0]
    else:
        listed = published_files(folder)  # the marker checked, as read_served checks a served one
    names = sorted(listed)
    remote = remote_files(folder)
    records = []
    for name in names:
        path = folder / "files" / f"{name}{RECORD_SUFFIX}"
        try:
            data = http.parse_json(read_bytes(path, "build record", "report"), str(path), option)
        except OSError as exc:
            raise InputError(f"{option}: {path}: {exc.strerror or exc}; a published wheel lacks its record") from None
        records.append(published_record(data, name, f"{option}: {path}", lenient=lost_ok))
    wheels = {name: _remote_url(remote.get(name)) or str(folder / "files" / name) for name in names}
    return Published(records, wheels, _sizes(remote), listed)


def _sizes(remote: dict[str, dict[str, Any]]) -> dict[str, int]:
    """A release asset's size, as the marker lists it."""
    return {n: r["size"] for n, r in remote.items() if isinstance(r, dict) and type(r.get("size")) is int}


def _remote_url(entry: Any) -> Optional[str]:
    url = entry.get("url") if isinstance(entry, dict) else None
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def record_cell(record: dict[str, Any]) -> Optional[str]:
    """The id of the cell a build record is of: its inputs' cell (a py3 wheel's without its Python:
    ``example-linux-py3-cu13.0-notorch``), or (a record older than input digests, without ``inputs``)
    its cell's; None when it names none it can be read as."""
    if "inputs" in record:
        inputs = record["inputs"]
        key = inputs.get("cell") if isinstance(inputs, dict) else None
        return key if isinstance(key, str) and key else None
    cell = record_cell_of(record)
    return cell.id if cell is not None else None


def record_cell_of(record: dict[str, Any]) -> Optional[Cell]:
    """The record's ``cell`` as a :class:`Cell` of its own recipe and a known lane, or None."""
    cell = record.get("cell")
    if not isinstance(cell, dict) or set(cell) != {"recipe", "lane", "python", "cuda", "torch"}:
        return None
    if not all(isinstance(cell[k], str) and cell[k] for k in ("recipe", "lane", "python", "cuda")):
        return None
    if not (cell["torch"] is None or isinstance(cell["torch"], str)) or cell["lane"] not in LANE_NAMES:
        return None
    if cell["recipe"] != record.get("recipe", cell["recipe"]):
        return None
    return Cell(**cell)


def check_cells(records: list[dict[str, Any]], option: str = "--published") -> None:
    """Refuses a record that names no cell: the plan would take its cell for missing and rebuild
    it, and publish would then refuse the rebuild (the name is published)."""
    for record in records:
        if record_cell(record) is None:
            raise InputError(
                f"{option}: the record of {record.get('wheel')} names no cell (its inputs.cell, or its cell, "
                "is missing or malformed); restore the index"
            )


def _changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    return changed_inputs(old, new)  # one comparison: a rebuild's record names the same (cuw/wheel/publish.py)


def _where(image: Any) -> str:
    return f"in {image}" if isinstance(image, str) and image else "on the runner itself"


def _judge(record: dict[str, Any], today: dict[str, Any], recipe: Recipe, policy: Policy, cell: Cell) -> tuple[str, str]:
    """One record against today's inputs: ("current" | "stale" | "not comparable", why)."""
    old = record.get("inputs")
    if not isinstance(old, dict):
        return "not comparable", "its record predates input digests"
    if record.get("inputs_digest") == inputs_digest(today):
        return "current", ""
    found = compare_inputs(old, today, recipe, policy, cell)
    if found.changed:
        why = f"{', '.join(found.changed)} changed"
        if "image" in found.changed:  # the builder: named, so a wheel built elsewhere reads as such
            why += f" (built {_where(old.get('image'))}; the plan builds {_where(today['image'])})"
        return "stale", why if found.scheme == INPUTS_SCHEME else f"{why} (a record of inputs scheme {found.scheme})"
    if found.unknown:
        return "not comparable", f"a record of inputs scheme {found.scheme}, which cannot tell {'; '.join(found.unknown)}"
    return ("current", "") if found.scheme != INPUTS_SCHEME else ("stale", "the digest changed")


def _record_key(record: dict[str, Any], recipes: dict[str, Recipe]) -> Optional[str]:
    """The cell a record covers, as today's inputs name it (a record of an older scheme named a
    ``py3`` wheel's cell with its builder's Python)."""
    key = record_cell(record)
    cell = record_cell_of(record)
    if key is not None and cell is not None and key == cell.id and cell.recipe in recipes:
        return input_cell(recipes[cell.recipe], cell).id
    return key


def cell_status(
    cells: Iterable[tuple[Recipe, Cell, str]],
    policy: Policy,
    records: list[dict[str, Any]],
    say: Callable[[str], None] = lambda _: None,
) -> CellStatus:
    """Each planned cell (recipe, cell, its build image) against the published records, judged by its
    newest wheel (highest version, then build number): current when that wheel's record names today's
    inputs, stale when it names a changed input, not comparable when it is of an older inputs scheme
    that cannot tell; missing without records."""
    cells = list(cells)
    recipes = {recipe.key: recipe for recipe, _, _ in cells}
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        key = _record_key(record, recipes)
        if key is not None:
            by_cell.setdefault(key, []).append(record)
    status = CellStatus()
    for recipe, cell, image in cells:
        today = cell_inputs(recipe, policy, cell, image)
        found = by_cell.get(today["cell"], [])
        if not found:
            status.missing.append(cell.id)
            continue
        # What an installer takes is the newest wheel (highest version, then build number): the cell is
        # current only when that one has today's inputs. An older build of today's inputs (a revert after
        # a rebuild) does not count: pip and uv would install the newer build of the other inputs.
        newest = max(enumerate(found), key=lambda pair: (_newness(pair[1]), pair[0]))[1]
        kind, why = _judge(newest, today, recipe, policy, cell)
        if kind == "current":
            status.current.append(cell.id)
        elif kind == "stale":
            status.stale[cell.id] = f"{newest.get('wheel')}: {why}"
        else:
            status.not_comparable[cell.id] = f"{newest.get('wheel')}: {why}"
    return status


def _newness(record: dict[str, Any]) -> tuple[Version, int]:
    """Where a record's wheel stands among its cell's: its version, then its build number (a name
    that is no wheel's comes first)."""
    try:
        _, version, build, _ = parse_wheel_name(str(record.get("wheel")))
    except (InvalidWheelFilename, InvalidVersion, InputError):
        return Version("0"), -1
    return version, build[0] if build else 0
