"""Reading a published file over HTTP(S): bounded, with one clear error (an index that cannot be
read is an error, never "nothing there")."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from cuw.base.errors import CuwError

MAX_BYTES = 4 << 20  # an index's marker or a build record; never a wheel


def fetch(url: str, what: str, limit: int = MAX_BYTES) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read(limit + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CuwError(f"{what}: cannot read {url} ({getattr(exc, 'reason', None) or exc}); an index that "
                       "cannot be read is an error (read as empty it would rebuild or republish everything)") from None  # fmt: skip
    if len(data) > limit:
        raise CuwError(f"{what}: {url} is over {limit >> 20} MiB; not an index file")
    return data


def parse_json(data: bytes, where: str, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise CuwError(f"{what}: {where} is not JSON; restore the index or give its right location") from None
