"""Reading a seat log (one JSON line per decision the seat made): what the gates, the
progress lines, the planner and the cost tables read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional


def _is_cuda_compile(entry: dict) -> bool:
    return entry.get("action") == "compiled" and entry.get("kind") != "host"


def compiled_count(path: Path) -> int:
    """How many CUDA TUs a job's seat has compiled so far (for progress lines)."""
    return sum(1 for e in read_log(path) if _is_cuda_compile(e))


def _parse_line(line: bytes) -> Optional[dict]:
    try:
        entry = json.loads(line.decode("utf-8"))
    except ValueError:  # a line cut short (a seat killed mid-write), or not the seat's
        return None
    return entry if isinstance(entry, dict) else None


def read_log(path: Path) -> list[dict]:
    """Every whole entry of a seat log; a line that is not one (cut short) is left out."""
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return []
    entries = []
    for line in data.splitlines():
        entry = _parse_line(line) if line.strip() else None
        if entry is not None:
            entries.append(entry)
    return entries


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

    def read(self) -> list[dict]:
        """The entries appended since the last call."""
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
        entries = [e for e in map(_parse_line, (line for line in lines if line.strip())) if e is not None]
        self.compiled += sum(1 for e in entries if _is_cuda_compile(e) or (self.count_host and e.get("action") == "compiled"))
        return entries

    def compiled_count(self) -> int:
        self.read()
        return self.compiled
