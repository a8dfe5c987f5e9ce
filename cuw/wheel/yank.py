"""``cuw yank``: withdraw a published wheel without removing it (PEP 592).

The index is append-only: a broken wheel cannot be deleted (an installer's lock file, a pinned
requirement or a mirror may name it). Yanking marks it in the marker's details with a reason; the
pages say so (``data-yanked="<reason>"``, the JSON's ``yanked``), ``packages.json`` and the chooser
show it, and installers skip it unless a requirement pins it with ``==`` (or ``===``). The file, its
metadata file and its build record stay. ``--undo`` takes the yank back.

An index whose wheels are release assets and whose pages are on GitHub Pages is yanked in a folder
continued from the site (``--from-url``, as publish continues it): the yank is then published as any
change of the pages, by deploying that folder; later publishes continue from the deployed marker and
keep it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cuw.base.errors import InputError
from cuw.wheel.index import MARKER, index_lock, published_files, read_details, remote_files, write_marker, write_pages

MAX_REASON = 500  # pip prints the reason in its warning; a line, not a document


def check_reason(reason: Optional[str], undo: bool) -> None:
    if undo:
        if reason is not None:
            raise InputError("yank: --undo takes no --reason (the yank's reason goes with it)")
        return
    if reason is None or not reason.strip():
        raise InputError("yank: --reason TEXT is required: say why (pip and uv show it to whoever pins the wheel)")
    if not reason.isprintable() or len(reason) > MAX_REASON:
        raise InputError(f"yank: --reason: one printable line of at most {MAX_REASON} characters")


def yank(index: Path, wheel: str, reason: Optional[str], undo: bool = False) -> str:
    """Marks ``wheel`` (a file name the index lists) yanked for ``reason`` (``undo``: not yanked);
    rewrites the marker and every page under the index's lock. Returns what changed, in a line."""
    check_reason(reason, undo)
    if not (index / MARKER).is_file():
        raise InputError(f"yank: {index} is not an index (no {MARKER}); give the folder `cuw index` or publish made")
    with index_lock(index):
        published = published_files(index)
        if wheel not in published:
            raise InputError(
                f"yank: {index} does not publish {wheel!r}; give a file name its packages.json lists ({len(published)} there)"
            )
        details = read_details(index)
        about = dict(details.get(wheel, {}))
        was = about.get("yanked")
        if undo:
            if was is None:
                return f"{wheel} is not yanked: nothing to undo"
            del about["yanked"]
            said = f"{wheel}: yank taken back (was: {was})"
        else:
            if was == reason:
                return f"{wheel} is already yanked: {was}"
            about["yanked"] = str(reason)
            said = f"{wheel} yanked: {reason}" + (f" (was: {was})" if was is not None else "")
        details[wheel] = about
        remote = remote_files(index)
        write_marker(index, published, remote, details)
        write_pages(index, published, remote)
    return said


def yank_verb(index: Path, wheel: str, reason: Optional[str], undo: bool, from_url: Optional[str]) -> str:
    """``cuw yank``: with ``from_url``, ``index`` (a new folder) first continues the index served
    there (its marker and build records, as ``publish --from-url`` does)."""
    check_reason(reason, undo)
    if from_url is not None:
        from cuw.wheel.publish import continue_from

        continue_from(from_url, index)
    return yank(index, wheel, reason, undo)
