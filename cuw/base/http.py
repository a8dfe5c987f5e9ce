"""Reading a published file over HTTP(S): bounded, with one clear error (an index that cannot be
read is an error, never "nothing there").

Bounded in size and in time: each wait on the server at most :data:`TIMEOUT_S`, the whole answer
at most :data:`DEADLINE_S` (a server that trickles a byte at a time never holds a plan up for more)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any

from cuw.base.errors import CuwError, InputError

MAX_BYTES = 4 << 20  # an index's marker or a build record; never a wheel
TIMEOUT_S = 30.0  # the longest wait for the server: to connect, for its headers, for the next bytes
DEADLINE_S = 60.0  # the longest a whole answer may take


def fetch(url: str, what: str, limit: int = MAX_BYTES) -> bytes:
    deadline = time.monotonic() + DEADLINE_S
    data = bytearray()
    try:
        with urllib.request.urlopen(url, timeout=min(TIMEOUT_S, DEADLINE_S)) as response:
            while len(data) <= limit:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no whole answer in {DEADLINE_S:g} s")
                block = response.read1(min(1 << 16, limit + 1 - len(data)))
                if not block:
                    break
                data += block
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:  # HTTPException: not HTTP at all
        raise CuwError(
            f"{what}: cannot read {url} ({getattr(exc, 'reason', None) or exc}); an index that "
            "cannot be read is an error (read as empty it would rebuild or republish everything)"
        ) from None
    if len(data) > limit:
        raise InputError(f"{what}: {url} is over {limit >> 20} MiB; not an index file")
    return bytes(data)


def parse_json(data: bytes, where: str, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{what}: {where} is not JSON; restore the index or give its right location") from None


def fetch_json(url: str, what: str, limit: int = MAX_BYTES) -> Any:
    """A published JSON file (an index's marker, a build record): read and parsed, or one error."""
    return parse_json(fetch(url, what, limit), url, what)
