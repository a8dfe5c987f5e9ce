"""What the published index already holds, read for the plan (``cuw matrix --published``).

A cell whose published build record names today's inputs (:mod:`cuw.config.inputs`) is
``current`` and needs no job; one with records of other inputs is ``stale`` (the record says
which input changed); one with none is ``missing``. ``--rebuild missing`` plans the missing cells
only, ``stale`` (the default) the stale ones too, ``all`` every cell. An index that cannot be read
is an error, never "nothing published": reading it as empty would rebuild the whole grid.

The index is a folder (a self-hosted runner's disk, a local run's) or the URL it is served at:
its ``cuw-index.json`` lists the wheels, and each wheel's record is ``files/<wheel>.build.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote

from cuw.base import http
from cuw.base.errors import CuwError
from cuw.config.cell import Cell
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe
from cuw.wheel.index import MARKER, published_files
from cuw.wheel.publish import RECORD_SUFFIX

REBUILD = ("missing", "stale", "all")
MAX_RECORD_BYTES = http.MAX_BYTES


@dataclass
class CellStatus:
    current: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # cell id -> which inputs changed
    missing: list[str] = field(default_factory=list)

    def to_build(self, rebuild: str) -> set[str]:
        if rebuild == "all":
            return {*self.current, *self.stale, *self.missing}
        return {*self.missing, *(self.stale if rebuild == "stale" else ())}


def _fetch(url: str, option: str) -> bytes:
    return http.fetch(url, option, MAX_RECORD_BYTES)


def _json(data: bytes, where: str, option: str) -> Any:
    return http.parse_json(data, where, option)


def read_records(location: str, option: str = "--published") -> list[dict[str, Any]]:
    """Every published wheel's build record, from an index folder or the URL it is served at."""
    if location.startswith(("http://", "https://")):
        base = location.rstrip("/")
        marker = _json(_fetch(f"{base}/{MARKER}", option), f"{base}/{MARKER}", option)
        files = marker.get("files") if isinstance(marker, dict) else None
        if not isinstance(files, dict):
            raise CuwError(f"{option}: {base}/{MARKER} lists no files; not an index made by cuw")
        names = sorted(files)
        def load(name: str) -> Any:
            url = f"{base}/files/{quote(name + RECORD_SUFFIX)}"
            return _json(_fetch(url, option), url, option)
    else:
        folder = Path(location)
        if not folder.is_dir():
            raise CuwError(f"{option} {location}: no such index folder (make it empty for a first run, "
                           "or leave out --published)")  # fmt: skip
        names = sorted(published_files(folder))

        def load(name: str) -> Any:
            path = folder / "files" / f"{name}{RECORD_SUFFIX}"
            try:
                return _json(path.read_bytes(), str(path), option)
            except OSError as exc:
                raise CuwError(f"{option}: {path}: {exc.strerror or exc}; a published wheel lacks its record") from None

    records = []
    for name in names:
        record = load(name)
        if not isinstance(record, dict) or record.get("wheel") != name:
            raise CuwError(f"{option}: the record of {name} names another wheel; restore the index")
        records.append(record)
    return records


def _changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(fields) or "the digest"


def cell_status(cells: Iterable[tuple[Recipe, Cell, str]], policy: Policy, records: list[dict[str, Any]],
                say: Callable[[str], None] = lambda _: None) -> CellStatus:  # fmt: skip
    """Each planned cell (recipe, cell, its build image) against the published records."""
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        inputs, cell = record.get("inputs"), record.get("cell")
        key = inputs.get("cell") if isinstance(inputs, dict) else None
        if key is None and isinstance(cell, dict):  # a record older than input digests
            try:
                key = Cell(**cell).id
            except TypeError:
                key = None
        by_cell.setdefault(str(key), []).append(record)
    status = CellStatus()
    for recipe, cell, image in cells:
        today = cell_inputs(recipe, policy, cell, image)
        digest = inputs_digest(today)
        found = by_cell.get(cell.id, [])
        if any(r.get("inputs_digest") == digest for r in found):
            status.current.append(cell.id)
        elif found:
            newest = found[-1]
            old = newest.get("inputs")
            why = f"{_changed(old, today)} changed" if isinstance(old, dict) else "its record predates input digests"
            status.stale[cell.id] = f"{newest.get('wheel')}: {why}"
        else:
            status.missing.append(cell.id)
    return status
