"""A shard's name, ``I/N``: one grammar for the partition's parser of ``cuw shard example 3/23`` and
for the readers of the ``shard`` field a shard report carries."""

from __future__ import annotations

import re
from typing import Optional

_SPEC = re.compile(r"^\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*$")


def spec_numbers(text: str) -> Optional[tuple[int, int]]:
    """``(I, N)`` of a text shaped ``I/N`` (ASCII digits), else None; the caller checks the range."""
    match = _SPEC.match(text)
    return (int(match.group(1)), int(match.group(2))) if match else None
