"""Reading a seat log (one JSON line per decision the seat made): what the gates, the
progress lines, the planner and the cost tables read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from cuw.base.files import json_record, json_records


def _is_cuda_compile(entry: dict) -> bool:
    return entry.get("action") == "compiled" and entry.get("kind") != "host"


def compiled_count(path: Path) -> int:
    """How many CUDA TUs a job's seat has compiled so far (for progress lines)."""
    return sum(1 for e in read_log(path) if _is_cuda_compile(e))


def read_log(path: Path) -> list[dict]:
    """Every whole entry of a seat log; a line that is not one (cut short) is left out."""
    return json_records(path)


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
        entries = [e for e in map(json_record, (line for line in lines if line.strip())) if e is not None]
        self.compiled += sum(1 for e in entries if _is_cuda_compile(e) or (self.count_host and e.get("action") == "compiled"))
        return entries

    def compiled_count(self) -> int:
        self.read()
        return self.compiled
