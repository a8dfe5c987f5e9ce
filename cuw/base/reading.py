"""Reading what the forge is given: the one place a path is opened for reading.

A path someone gave the forge (an option, a file an earlier step left, a name found in a folder)
may be anything: a FIFO that blocks an ``open`` forever, a device that never ends (``/dev/zero``),
a folder where a file belongs, a link to nowhere. Every reader here

* opens without blocking (``O_NONBLOCK``: a FIFO with no writer is not waited on) and asks the
  open descriptor what it is (``fstat``), so what is checked is what is read;
* refuses anything but a regular file in one line naming the path and what it is
  (``plan.json is a FIFO, not a regular file``), exit 2 (:class:`~cuw.base.errors.InputError`);
* reads at most the bound of its kind of file (:data:`LIMITS`): a file larger than any the
  forge writes of that kind is refused before it is read, not read until memory runs out.

A missing file stays :class:`FileNotFoundError`, so each caller keeps its own line for it ("no
cost table at ...: record it with ..."); a folder expected is checked by :func:`folder`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Optional, Union

from cuw.base.errors import InputError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

LIMITS: dict[str, int] = {
    "recipe": 1 * MiB,  # a hand-written YAML file (recipe.yml, defaults.yml, an image recipe): a few KiB
    "report": 64 * MiB,  # a job report, verify or gpu report, build record, seat configuration: KiBs
    "cost table": 64 * MiB,  # costs.json: about 100 bytes a TU
    "log": 1 * GiB,  # a seat log or a .ninja_log: a line per compile, read whole
    "index": 256 * MiB,  # an index's cuw-index.json, packages.json, pages: a few hundred bytes a wheel
    "member": 256 * MiB,  # a wheel's METADATA, WHEEL, RECORD, a compile database
    "text": 16 * MiB,  # a patch, a README, a CMake file, anything else read whole
}
"""The most bytes read of each kind of file, far above any the forge writes of that kind."""

PathLike = Union[str, "os.PathLike[str]"]


def what_it_is(mode: int) -> str:
    """A file type in words, for the one-line error (``a FIFO``, ``a character device``)."""
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def not_a_file(path: PathLike, mode: int, what: str) -> InputError:
    """The one line for something that is not the regular file expected."""
    return InputError(f"{path} is {what_it_is(mode)}, not a regular file; give the {what} as a regular file")


def _size(limit: int) -> str:
    for unit, name in ((GiB, "GiB"), (2 * MiB, "MiB"), (KiB, "KiB")):
        if limit >= unit:
            return f"{limit / (unit if unit != 2 * MiB else MiB):g} {name}"
    return f"{limit} bytes"


def too_large(path: PathLike, limit: int, what: str) -> InputError:
    return InputError(f"{path} is larger than {_size(limit)}, more than any {what} holds; give the {what}")


def regular_file(path: PathLike, what: str) -> os.stat_result:
    """``path``'s status, refused unless it is a regular file (a link to one counts): for a library
    that opens the path itself (``zipfile``, ``tarfile``, a tool). :class:`FileNotFoundError` for a
    missing file or a link to nowhere."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise not_a_file(path, info.st_mode, what)
    return info


def is_regular(path: PathLike, what: str) -> bool:
    """True for a regular file (a link to one counts), False where nothing is (a link to nowhere
    too); anything else there (a FIFO, a device, a folder) is refused in one line naming it."""
    try:
        regular_file(path, what)
    except FileNotFoundError:
        return False
    return True


def optional_folder(path: PathLike, what: str) -> bool:
    """True for a folder, False where nothing is (an optional folder not made yet); a file, FIFO or
    device there is refused in one line: what the user named is not silently passed over."""
    if not os.path.lexists(path) or (os.path.islink(path) and not os.path.exists(path)):
        return False
    folder(path, what)
    return True


def folder(path: PathLike, what: str) -> Path:
    """``path``, refused unless it is a folder (a link to one counts), in one line naming what it is."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such folder") from None
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(info.st_mode):
        kind = "a file" if stat.S_ISREG(info.st_mode) else what_it_is(info.st_mode)
        raise InputError(f"{what} {path} is {kind}, not a folder; give a folder")
    return Path(path)


def open_file(path: PathLike, what: str, limit: Optional[int] = None) -> BinaryIO:
    """``path`` open for reading in binary, checked on its descriptor to be a regular file (and,
    with ``limit``, no larger than that). Never blocks on a FIFO: it is opened non-blocking and
    refused. A missing file raises :class:`FileNotFoundError` as ``open`` would."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:  # where a folder cannot be opened at all
        raise InputError(f"{path} is a folder, not a regular file; give the {what} as a regular file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_a_file(path, info.st_mode, what)
        if limit is not None and info.st_size > limit:
            raise too_large(path, limit, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: PathLike, what: str, kind: str = "text") -> bytes:
    """The whole of a regular file of the ``kind`` (a key of :data:`LIMITS`), at most its bound."""
    limit = LIMITS[kind]
    with open_file(path, what, limit) as fh:
        data = fh.read(limit + 1)  # a file that grew after the check is still read no further
    if len(data) > limit:
        raise too_large(path, limit, what)
    return data


def read_text(path: PathLike, what: str, kind: str = "text", errors: str = "strict") -> str:
    """:func:`read_bytes` as UTF-8 (a :class:`UnicodeDecodeError` for other bytes, unless ``errors``
    says otherwise), lines as they are (no newline translation)."""
    return read_bytes(path, what, kind).decode("utf-8", errors)
