"""Limits every layer checks against: the shard count a cell can have.

Import-light (the seat's runtime reads the partition rules, which read this).
"""

from __future__ import annotations

from cuw.base.errors import InputError

MAX_SHARDS = 255


def check_count(count: int, what: str) -> int:
    """A shard count within 1..MAX_SHARDS, or a CuwError naming the option."""
    if count < 1 or count > MAX_SHARDS:
        raise InputError(
            f"{what} {count}: a shard count is 1..{MAX_SHARDS} (a cell's shards and its link job "
            f"share one GitHub matrix, capped at 256 jobs)"
        )
    return count
