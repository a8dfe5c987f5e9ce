"""A shard job that stops at a deadline, and the continuation job that resumes it.

A hosted runner stops a job at its time limit (6 hours on GitHub) and keeps nothing. A shard
given ``--deadline`` starts no owned compile after it (the seat defers it:
:attr:`cuw.seat.runtime.SeatConfig.deadline`); what is running finishes, the shard gate counts
the deferred TUs as left, and the job packs its whole cache as part 1, ``partial``. A
continuation (``--resume`` that archive) checks it the way the link checks a shard's archive,
restores its cache, builds again (every TU an earlier part finished is a hit, which the gate
checks) and packs the whole cache as the next part. The link takes the last part of each
shard's chain and refuses a partial one.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from cuw.base.errors import InputError
from cuw.config.cell import Cell
from cuw.jobs import archive
from cuw.jobs.fingerprint import check_fingerprint
from cuw.jobs.workspace import Workspace
from cuw.partition.rules import ShardSpec
from cuw.toolchain.builder import Builder
from cuw.toolchain.cache import Cache

_EARLIEST = 1_000_000_000  # 2001-09-09: a smaller bare number is seconds meant as +SECONDS


def parse_deadline(text: str, started: float) -> float:
    """``--deadline``: ``+SECONDS`` from ``started`` (the job's start), a Unix time, or an ISO-8601
    UTC time (``2026-12-02T17:00:00Z``), as a Unix time."""
    value = text.strip()
    try:
        if value.startswith("+"):
            seconds = float(value[1:])
            if seconds >= 0 and seconds == seconds and seconds != float("inf"):
                return started + seconds
        elif value.replace(".", "", 1).isdigit():
            if float(value) >= _EARLIEST:
                return float(value)
            raise InputError(f"--deadline {text}: a Unix time before 2001; for seconds from the job's start write +{value}")
        else:
            # Python 3.10's fromisoformat takes no "Z"; it means +00:00 (3.11 reads it so).
            when = datetime.fromisoformat(value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value)
            if when.tzinfo is not None and when.utcoffset() == timezone.utc.utcoffset(None):
                return when.timestamp()
            raise InputError(f"--deadline {text}: an ISO-8601 time must be UTC (end it in Z, e.g. 2026-12-02T17:00:00Z)")
    except ValueError:
        pass
    raise InputError(
        f"--deadline {text!r}: not +SECONDS (from the job's start), a Unix time or an ISO-8601 UTC time (2026-12-02T17:00:00Z)"
    )


def describe_deadline(deadline: float) -> str:
    return datetime.fromtimestamp(deadline, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Resumed:
    """The previous part's archive, checked: what the continuation restores and goes on from."""

    path: Path
    manifest: archive.Manifest
    sha256: str = ""
    """The digest its shard recorded: the restore checks the bytes it unpacks against it."""
    kept: Optional[Path] = None
    """The folder holding it aside (:func:`hold`) when the continuation resumes its own output."""

    @property
    def part(self) -> int:
        """This continuation's part number."""
        return self.manifest.part + 1

    @property
    def earlier(self) -> list[str]:
        """The TUs the earlier parts finished: in the restored cache, so each must be a hit here."""
        return self.manifest.compiled


def kept_folder(target: Path) -> Path:
    """Where a continuation keeps the part it resumes when that part lies where the continuation writes
    its own archive (``cuw shard R i/N --resume <its own archive>``, the command a partial part prints):
    hidden beside it (no archive glob matches it), on its filesystem."""
    return target.parent / f".{target.name}.resume"


def resume_path(path: Path) -> Path:
    """``--resume``'s archive, absolute; one that is not there (nor kept aside by an interrupted or
    failed continuation of it, :func:`hold`) is refused before anything is made."""
    if not path.is_file() and not (kept_folder(path) / path.name).is_file():
        raise InputError(f"--resume {path}: no such archive (the previous part's cuw-shard-*.tar, its report beside it)")
    return path.resolve()


def hold(path: Path, target: Path) -> Path:
    """The archive the continuation reads: ``path`` itself unless it is the job's own output
    ``target``, which the job's report, archive and gate replace or remove. Then a finished part there
    (its report records its digest) is linked (or copied) with its report into :func:`kept_folder`
    first, the folder renamed into place whole, so a run killed at any point leaves that part where it
    was or its copy there; and where ``target`` holds no finished part (a continuation of it was
    interrupted or failed its gate), the copy kept there is the part it resumed. The caller holds the
    shard's lock."""
    if not _same(path, target):
        return path
    kept = kept_folder(target)
    for leftover in target.parent.glob(f"{kept.name}.*"):  # a killed hold's: no other run holds the lock
        shutil.rmtree(leftover, ignore_errors=True)
    if target.is_file() and _records_digest(target):
        fresh = kept.with_name(f"{kept.name}.{os.getpid()}.new")
        fresh.mkdir()
        copy = fresh / target.name
        try:
            os.link(target, copy)  # the archive is only ever replaced by a rename or removed: a link keeps it
        except OSError:
            shutil.copy2(target, copy)
        shutil.copy2(archive.report_path(target), archive.report_path(copy))  # the report is rewritten in place: a copy
        if kept.exists():
            old = kept.with_name(f"{kept.name}.{os.getpid()}.old")
            kept.rename(old)
            fresh.rename(kept)
            shutil.rmtree(old, ignore_errors=True)
        else:
            fresh.rename(kept)
    copy = kept / target.name
    return copy if copy.is_file() else path


def _same(path: Path, target: Path) -> bool:
    return path.resolve() == target.resolve()


def _records_digest(path: Path) -> bool:
    try:
        archive.recorded_digest(path)
    except InputError:
        return False
    return True


def release(resumed: Optional[Resumed]) -> None:
    """Once the continuation's own archive and report are written: the part it kept aside is in it."""
    if resumed is not None and resumed.kept is not None:
        shutil.rmtree(resumed.kept, ignore_errors=True)


def check_resume(path: Path, spec: ShardSpec, cell: Cell, job_cache: Cache, builder: Builder) -> Resumed:
    """The archive ``--resume`` names, held against this job as the link holds a shard's archive
    (its shard's recorded digest, every member, cell, cache tool, N, builder), and it must be this
    shard's and partial. Before the job writes anything: the digest is in the report beside it."""
    path = resume_path(path)
    archive.check_digest(path)
    sha256, _ = archive.recorded_digest(path)
    manifest = archive.check_archive(path)
    archive.expect(manifest, path, cell, job_cache, spec.count, builder)
    if manifest.shard_index != spec.index:
        raise InputError(
            f"--resume {path}: the archive is shard {manifest.shard_index}/{manifest.shard_count}, this job is shard {spec}: "
            "a continuation resumes its own shard's archive"
        )
    if not manifest.partial:
        raise InputError(
            f"--resume {path}: shard {spec} part {manifest.part} finished with nothing left: "
            "hand that archive to the link; there is nothing to resume"
        )
    kept = path.parent if path.parent.name == kept_folder(path.parent.parent / path.name).name else None
    return Resumed(path, manifest, sha256, kept)


def restore(resumed: Resumed, ws: Workspace, fingerprint: dict[str, str], spec: ShardSpec) -> int:
    """The earlier parts' cache into the prepared job's cache, once their fingerprint is this
    job's (the same forge, recipe, source, archs, toolkit and ownership); returns entries added."""
    check_fingerprint(resumed.manifest.fingerprint, fingerprint, resumed.path, f"{spec} part {resumed.manifest.part}")
    staging = ws.root / "resume"
    staging.mkdir()
    try:
        restored = archive.unpack(resumed.path, staging, resumed.sha256, f"{spec} part {resumed.manifest.part}")
        return archive.merge_into([restored], ws.cache_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def refuse_partial(manifest: archive.Manifest, path: Path) -> None:
    """The link's rule: a partial part is not a shard's cache; the chain's last part is."""
    if manifest.partial:
        shard = f"{manifest.shard_index}/{manifest.shard_count}"
        raise InputError(
            f"{path}: shard {shard} part {manifest.part} stopped at its deadline with {len(manifest.left)} TUs left: "
            f"its continuation did not run or stopped at its deadline too (cuw shard <recipe> {shard} --resume {path.name})"
        )


def continue_line(label: str, part: int, left: int, owned: int, recipe_key: str, spec: ShardSpec, written: Path) -> str:
    """The partial job's last line: what is left and the command that goes on."""
    return (
        f"{label} part {part}: stopped at its deadline with {left} of {owned} TUs left; "
        f"continue with: cuw shard {recipe_key} {spec} --resume {written}"
    )


def kept_line(label: str, resumed: Resumed) -> str:
    """A continuation that failed: the part it resumed is still there, and the command runs again."""
    return f"{label}: the part it resumed is kept at {resumed.path}; the same command resumes it again"


def merged_compiled(resumed: Optional[Resumed], compiled: list[str]) -> list[str]:
    """The TUs in this part's cache: the earlier parts' and its own."""
    return sorted(set(resumed.earlier if resumed else []) | set(compiled))
