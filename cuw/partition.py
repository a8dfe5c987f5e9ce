"""Which shard owns a translation unit: the one partition rule of the forge.

A TU's key is its source path relative to the source root, with forward
slashes (``csrc/kernels/k03_reduce.cu``). The owner is

    shard = int(md5(key)[:8], 16) % N + 1        (1-based)

The key depends only on the source layout, so the seat (deciding live inside
the build), the ``source`` filter (deleting files before it) and a planner on
any other machine all reach the same answer.
"""

from __future__ import annotations

import hashlib
import ntpath
import os
import re
from dataclasses import dataclass

from .errors import CuwError


_WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def tu_key(path: str, source_root: str) -> str:
    """The partition key of a source file: its path relative to the source root.

    Windows paths (``D:\\a\\_temp\\src\\k.cu``) give the same key as POSIX ones,
    on any machine, so a planner on Linux predicts a Windows lane.
    """
    if _WINDOWS_PATH.match(path) or _WINDOWS_PATH.match(source_root):
        rel = ntpath.relpath(ntpath.normpath(path), ntpath.normpath(source_root))
        return rel.replace("\\", "/")
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(source_root))
    return rel.replace(os.sep, "/")


def owner(key: str, count: int) -> int:
    """The 1-based shard that compiles the TU with this key."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    digest = hashlib.md5(key.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % count + 1


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count``, 1-based, as written on the command line (``3/23``)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """File-name form: ``3of23``."""
        return f"{self.index}of{self.count}"

    def owns(self, key: str) -> bool:
        return owner(key, self.count) == self.index


_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard_spec(text: str) -> ShardSpec:
    """Parses ``I/N`` (1 <= I <= N); anything else is a CuwError that says why."""
    match = _SPEC.match(text)
    if not match:
        raise CuwError(f"shard {text!r} is not I/N (for example 3/23: shard 3 of 23, counted from 1)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise CuwError(f"shard {text!r}: the shard count must be at least 1")
    if not 1 <= index <= count:
        raise CuwError(f"shard {text!r}: the index must be between 1 and {count} (shards count from 1)")
    return ShardSpec(index, count)
