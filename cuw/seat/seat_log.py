"""Reading a seat log (one JSON line per decision the seat made): what the gates, the
progress lines, the planner and the cost tables read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from cuw.base.errors import CuwError
from cuw.base.files import json_records
from cuw.base.records import SeatLogEntry, seat_entries, seat_line
from cuw.toolchain.cache import Cache, Sccache


def _is_cuda_compile(entry: SeatLogEntry) -> bool:
    return entry.is_compile and not entry.is_host


def compiled_count(path: Path) -> int:
    """How many CUDA TUs a job's seat has compiled so far (for progress lines)."""
    return LogReader(path).compiled_count()


def read_log(path: Path) -> list[dict]:
    """Every whole line of a seat log as the seat wrote it (the tests hold the seat's writing to
    it); the forge reads a seat log as entries (:func:`read_entries`)."""
    return json_records(path)


def read_entries(path: Path) -> list[SeatLogEntry]:
    """Every whole entry of a seat log, typed (:class:`cuw.base.records.SeatLogEntry`): a line cut
    short is left out, a whole one that cannot be read is refused naming its line."""
    return seat_entries(path)


def missed_keys(compiles: list[SeatLogEntry], job_cache: Cache) -> list[str]:
    """TU keys of ``compiled`` entries that missed the cache: from the seat's per-call outcome, or
    sccache's piece log (the link's misses; a continuation's replays of its earlier parts)."""
    if isinstance(job_cache, Sccache):
        stems = job_cache.missed_stems()
        return sorted({e.tu for e in compiles if Path(e.tu).name.split(".", 1)[0] in stems})
    return sorted(e.tu for e in compiles if e.outcome == "miss")


class LogReader:
    """A seat log read as it grows, for progress lines: each :meth:`read` parses only the bytes
    appended since the last one, and a last line still being written waits for the next read.
    A log replaced or cut (a job folder prepared afresh) is read again from its start."""

    def __init__(self, path: Path, count_host: bool = False) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.compiled = 0
        """CUDA TUs (with ``count_host``, CUDA and host TUs) compiled so far."""
        self.count_host = count_host
        self._inode: Optional[int] = None

    def read(self) -> list[SeatLogEntry]:
        """The entries appended since the last call. One that cannot be read is left out of the count
        (progress is a courtesy: the gate refuses it after the build, naming its line)."""
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_ino != self._inode or st.st_size < self.offset:
                    self._inode, self.offset, self.partial, self.compiled = st.st_ino, 0, b"", 0
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        entries = [e for e in map(self._entry, lines) if e is not None]
        self.compiled += sum(1 for e in entries if _is_cuda_compile(e) or (self.count_host and e.is_compile))
        return entries

    def _entry(self, line: bytes) -> Optional[SeatLogEntry]:
        try:
            return seat_line(line, str(self.path))
        except CuwError:
            return None

    def compiled_count(self) -> int:
        self.read()
        return self.compiled


def timeline_row(entry: SeatLogEntry) -> Optional[list]:
    """A compile as a manifest's timeline row: ``[key, start (epoch s), seconds, outcome]``, then
    ``cpu_s`` and ``peak_mb`` where the seat measured them (not on Windows, not under sccache).
    None for an entry without its times."""
    if entry.at is None or entry.seconds is None:
        return None
    row = [entry.tu, round(entry.at - entry.seconds, 3), entry.seconds, entry.outcome]
    if entry.measured:
        row += [entry.cpu_s, entry.peak_mb]
    return row


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def timeline_entry(row: list) -> Optional[SeatLogEntry]:
    """A timeline row read back as the compile's seat-log entry (rows of 4 or 6 items); None for a malformed row."""
    if len(row) not in (4, 6) or not (_number(row[1]) and _number(row[2])):
        return None
    if not isinstance(row[0], str) or not (row[3] is None or isinstance(row[3], str)):
        return None
    measured = len(row) == 6 and _number(row[4]) and _number(row[5])
    return SeatLogEntry(
        "compiled",
        key=row[0],
        at=row[1] + row[2],
        seconds=row[2],
        outcome=row[3],
        rc=0,
        cpu_s=row[4] if measured else None,
        peak_mb=row[5] if measured else None,
    )


def measured_totals(compiles: list[SeatLogEntry]) -> dict[str, object]:
    """A job's compiles summed: ``cpu_s`` (all their CPU seconds) and ``peak_mb`` (the largest one
    compile's peak), over the compiles that carry them; None where none does."""
    cpu = [e.cpu_s for e in compiles if e.measured and e.cpu_s is not None]
    peaks = [e.peak_mb for e in compiles if e.measured and e.peak_mb is not None]
    if not cpu:
        return {"cpu_s": None, "peak_mb": None}
    return {"cpu_s": round(sum(cpu), 3), "peak_mb": max(peaks)}
