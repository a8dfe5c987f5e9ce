"""Reading a published file over HTTP(S): bounded, with one clear error (an index that cannot be
read is an error, never "nothing there").

Bounded in size and in time: each wait on the server at most :data:`TIMEOUT_S`, and one read of an
index (its marker and every build record, :class:`Deadline`) at most :data:`DEADLINE_S` in all,
however many files it lists; the files are fetched :data:`CONCURRENT` at a time. A server that
trickles a byte at a time, or answers each file late, never holds a plan up for more."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from cuw.base.errors import CuwError, InputError

MAX_BYTES = 4 << 20  # an index's marker or a build record; never a wheel
TIMEOUT_S = 30.0  # the longest wait for the server: to connect, for its headers, for the next bytes
DEADLINE_S = 300.0  # the longest one read of an index may take: its marker and every record together
CONCURRENT = 8  # files of one read fetched at a time


class Deadline:
    """The moment one read of an index ends, whatever is left: every fetch under it shares it."""

    def __init__(self, seconds: Optional[float] = None) -> None:
        self.seconds = DEADLINE_S if seconds is None else seconds
        self.end = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.end - time.monotonic()


class _Late(Exception):
    """A file not read whole by the deadline."""


def _read(url: str, limit: int, deadline: Deadline) -> bytes:
    data = bytearray()
    wait = max(0.01, min(TIMEOUT_S, deadline.left()))
    try:
        with urllib.request.urlopen(url, timeout=wait) as response:
            while len(data) <= limit:
                if deadline.left() <= 0:
                    raise _Late()
                block = response.read1(min(1 << 16, limit + 1 - len(data)))
                if not block:
                    break
                data += block
    except (TimeoutError, urllib.error.URLError) as exc:
        # A wait cut short to the deadline's share that runs out is the deadline, not the server's own timeout.
        timed_out = isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)
        if timed_out and wait < TIMEOUT_S:
            raise _Late() from None
        raise
    return bytes(data)


def _cannot_read(url: str, what: str, why: object) -> CuwError:
    return CuwError(
        f"{what}: cannot read {url} ({why}); an index that cannot be read is an error "
        "(read as empty it would rebuild or republish everything)"
    )


def _late(url: str, what: str, deadline: Deadline, done: int, total: int) -> CuwError:
    return CuwError(
        f"{what}: cannot read {url} (no whole answer in {deadline.seconds:g} s, the deadline of one read of the "
        f"index: {done} of {total} file(s) read); the server answers too slowly: retry when it is faster, or give "
        "the index's folder instead of its URL"
    )


def fetch_all(urls: list[str], what: str, limit: int = MAX_BYTES, deadline: Optional[Deadline] = None) -> list[bytes]:
    """Each of ``urls``, read whole, :data:`CONCURRENT` at a time, all by ``deadline`` (a new
    :class:`Deadline` when None); the first that cannot be read, or the deadline, is one error."""
    deadline = deadline or Deadline()
    read: dict[int, bytes] = {}
    failed: dict[int, BaseException] = {}
    pending = list(reversed(list(enumerate(urls))))  # popped from the end: in order
    changed = threading.Condition()

    def work() -> None:
        while True:
            with changed:
                if not pending or failed:
                    return
                i, url = pending.pop()
            try:
                data = _read(url, limit, deadline)
            except BaseException as exc:  # handed to the reading thread, which says it
                with changed:
                    failed[i] = exc
                    changed.notify_all()
                return
            with changed:
                read[i] = data
                changed.notify_all()

    for _ in range(min(CONCURRENT, len(urls))):
        # Daemons: a worker still waiting on a server at the deadline does not hold the process.
        threading.Thread(target=work, name="cuw-index-read", daemon=True).start()
    with changed:
        while len(read) < len(urls) and not failed:
            if deadline.left() <= 0:
                first = min(i for i in range(len(urls)) if i not in read)
                raise _late(urls[first], what, deadline, len(read), len(urls))
            changed.wait(timeout=deadline.left())
        if failed:
            i = min(failed)
            _raise(urls[i], what, failed[i], deadline, len(read), len(urls))
    for i, url in enumerate(urls):
        if len(read[i]) > limit:
            raise InputError(f"{what}: {url} is over {limit >> 20} MiB; not an index file")
    return [read[i] for i in range(len(urls))]


def _raise(url: str, what: str, exc: BaseException, deadline: Deadline, done: int, total: int) -> None:
    if isinstance(exc, _Late):
        raise _late(url, what, deadline, done, total)
    if isinstance(exc, (urllib.error.URLError, http.client.HTTPException, OSError, ValueError)):  # HTTPException: not HTTP
        raise _cannot_read(url, what, getattr(exc, "reason", None) or exc) from None
    raise exc


def fetch(url: str, what: str, limit: int = MAX_BYTES, deadline: Optional[Deadline] = None) -> bytes:
    """One file, read whole by ``deadline`` (a new :class:`Deadline` when None), at most ``limit`` bytes."""
    return fetch_all([url], what, limit, deadline)[0]


def parse_json(data: bytes, where: str, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InputError(f"{what}: {where} is not JSON; restore the index or give its right location") from None


def fetch_json(url: str, what: str, limit: int = MAX_BYTES, deadline: Optional[Deadline] = None) -> Any:
    """A published JSON file (an index's marker, a build record): read and parsed, or one error."""
    return parse_json(fetch(url, what, limit, deadline), url, what)
