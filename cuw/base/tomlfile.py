"""TOML text as Python data: the standard library's parser (3.11+) or the same one as ``tomli`` on 3.10."""

from __future__ import annotations

import sys
from typing import Any


def loads(text: str) -> dict[str, Any]:
    """``text`` parsed; a :class:`ValueError` (``TOMLDecodeError``) where it is not TOML."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, before it joined the standard library (a pinned dependency on 3.10)
        import tomli as tomllib
    return tomllib.loads(text)
