"""Ordering dotted version-like labels that ``packaging`` does not parse (``12.8``, ``GLIBC_2.34``)."""

from __future__ import annotations

import re


def version_key(text: str) -> tuple[int, ...]:
    """The numbers in ``text``, in order: ``"GLIBC_2.34"`` -> (2, 34), ``"12.8"`` -> (12, 8)."""
    return tuple(int(x) for x in re.findall(r"\d+", text))
