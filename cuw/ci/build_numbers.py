"""Which build of its version a cell's next wheel is, from what the published index holds.

A wheel's identity is its name, version, tags and build number (PEP 427's build tag; pip and uv
install the highest build of the same version and tags). The first build of a version is untagged
(build 0). A rebuild gets the next number: the highest the index publishes for the cell's name,
version and tags, plus one; a rebuild of the inputs the newest published build names keeps that
build's number (publish then calls it "already published": the published bytes stand). The plan
does not know the version a build will make, so the number is given per published version
(:class:`cuw.wheel.finish.BuildNumber`): finish picks the one of the version it finds, and a
version the index does not publish is a first build.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from packaging.version import Version

from cuw.ci.published import read_index, record_cell_of
from cuw.config.cell import Cell
from cuw.config.grid import collapses_python
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe
from cuw.wheel.finish import BuildNumber, wheel_key


def _of_cell(record: dict[str, Any], recipe: Recipe, cell: Cell) -> bool:
    """Whether a published record is of ``cell``: its cell, or (a recipe whose wheel serves every
    Python) the same cell built with another Python."""
    theirs = record_cell_of(record)
    if theirs is None or theirs.recipe != cell.recipe:
        return False
    if collapses_python(recipe):
        return (theirs.lane, theirs.cuda, theirs.torch) == (cell.lane, cell.cuda, cell.torch)
    return theirs == cell


def next_build(records: Iterable[dict[str, Any]], recipe: Recipe, cell: Cell, digest: Optional[str]) -> BuildNumber:
    """The number of ``cell``'s next wheel for each version the index publishes of it (``records``:
    every published build record); ``digest``: today's inputs digest of the cell (None: unknown,
    every version gets a new number)."""
    records = list(records)
    keys = {key for key, _ in filter(None, (wheel_key(str(r.get("wheel"))) for r in records if _of_cell(r, recipe, cell)))}
    newest: dict[Version, tuple[int, set[Optional[str]]]] = {}  # public version -> (highest build, its digests)
    for record in records:
        found = wheel_key(str(record.get("wheel")))
        if found is None or found[0] not in keys:
            continue
        (_, version, _), number = found
        public = Version(version.public)
        high, digests = newest.get(public, (-1, set()))
        if number > high:
            newest[public] = (number, {record.get("inputs_digest")})
        elif number == high:
            digests.add(record.get("inputs_digest"))
    numbers = [
        (str(v), high if digest is not None and digest in digests else high + 1) for v, (high, digests) in sorted(newest.items())
    ]
    return BuildNumber(per_version=tuple((v, n) for v, n in numbers if n))  # build 0 is every other version's


def planned_builds(
    cells: Iterable[tuple[Recipe, Cell, str]], policy: Policy, records: list[dict[str, Any]], keep: set[str]
) -> dict[str, str]:
    """The plan's: for each kept cell (recipe, cell, its build image) the index publishes builds of,
    the number its link stamps, as ``--build-number`` takes it; a cell without one is a first build."""
    out = {}
    for recipe, cell, image in cells:
        if cell.id in keep:
            number = next_build(records, recipe, cell, inputs_digest(cell_inputs(recipe, policy, cell, image)))
            if number.per_version:
                out[cell.id] = str(number)
    return out


def from_index(location: str, recipe: Recipe, cell: Cell, policy: Policy, image: str) -> BuildNumber:
    """A build outside the plan (``cuw build``, ``cuw link`` with ``--published``): the next free
    number of each version the index at ``location`` (a folder or URL) publishes of ``cell``."""
    records = read_index(location, "--published").records
    return next_build(records, recipe, cell, inputs_digest(cell_inputs(recipe, policy, cell, image)))
