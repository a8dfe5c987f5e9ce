"""The one glob engine for recipe globs (``sharding.source.globs``, families, the seat's filter keys).

``pathlib``-style globs over ``/`` keys relative to the source root: ``**`` spans folders, ``*``,
``?`` and ``[...]`` (``[!...]`` negated) stay inside one name. Listing files (:func:`glob_paths`)
walks the tree and asks the same matcher, so a glob cannot select one set of files when listing
and another when matching (``csrc/[x].cu`` is a character class to both). Hand-written rather
than ``wcmatch``: the seat's per-call runtime matches with it and must stay import-light.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path


def _segment_regex(segment: str) -> str:
    """One folder or file name of a glob: ``*``, ``?`` and ``[...]`` (``[!...]`` negated), as
    ``pathlib`` reads them, never crossing a ``/``."""
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        close = segment.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif close != -1:
            body = segment[i + 1 : close]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\").replace("^", "\\^") + "]")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> "re.Pattern[str]":
    """``pathlib``-style glob over ``/`` keys: ``**`` spans folders, ``*``, ``?`` and ``[...]`` stay inside one."""
    parts = []
    for segment in pattern.strip("/").split("/"):
        if segment == "**":
            parts.append("(?:[^/]+/)*")
            continue
        parts.append(_segment_regex(segment) + "/")
    return re.compile("".join(parts).removesuffix("/") + r"\Z")


def glob_match(key: str, pattern: str) -> bool:
    """Whether a partition key matches a glob relative to the source root."""
    return _glob_regex(pattern).match(key) is not None


def glob_paths(root: Path, globs: list[str]) -> list[Path]:
    """Every file under ``root`` whose key (its path relative to ``root``, ``/``-separated) one of
    ``globs`` matches, sorted."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        for name in files:
            key = name if rel == "." else f"{rel}/{name}"
            if any(glob_match(key, g) for g in globs):
                found.append(Path(dirpath) / name)
    return sorted(p for p in found if p.is_file())
