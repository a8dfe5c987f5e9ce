"""Safe writes and containment: the one place the forge turns user input into paths it writes.

* A path built from user input (a recipe name, a cell id) must stay under the root
  the user gave (:func:`contained`), checked before anything is written.
* An output is written beside its destination and renamed into place
  (:func:`write_text`, :func:`copy_into`), so a reader never sees half a file and
  an interrupted write leaves the previous file as it was.
* Two kinds of output: a file the user names (``--output``) is written through a link there,
  into a device or a pipe, as a shell's redirection would (:func:`write_text`); a file the forge
  names itself (a report beside a wheel, a file of an index or a work folder) is always a new
  file renamed over whatever is at its name (:func:`place_text`, :func:`place_bytes`,
  :func:`place_copy`): a link, FIFO or device someone planted there is replaced, never written
  through, and the file a planted link points to stays as it was.
* What the forge reads is opened in one place, :mod:`cuw.base.reading` (regular files only, each
  kind of file bounded).
* An output folder is probed before a long job starts (:func:`writable_dir`),
  so a read-only ``--dist`` fails in a second, not after the whole build.
* Something made once per machine and shared (an environment, a toolkit) is made
  under a lock (:func:`held`): two jobs on one runner wait for one another instead
  of deleting each other's half-made folder.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from cuw.base.errors import CuwError, InputError, OutputError
from cuw.base.reading import open_file, read_bytes, what_it_is


def contained(path: Path, root: Path, what: str) -> Path:
    """``path`` resolved, refused unless it lies under ``root`` (``what`` names the input)."""
    resolved_root = root.resolve()
    resolved = path.resolve()
    if resolved != resolved_root and resolved_root not in resolved.parents:
        raise InputError(f"{what}: {path} would lie outside {root}; refusing to write there")
    return resolved


def check_destination(dest: Path, option: str) -> None:
    """Refuses an output path that is a folder or whose folder is missing, before any work."""
    if dest.is_dir():
        raise InputError(f"{option} {dest} is a folder; give a file path")
    if not dest.parent.is_dir():
        raise InputError(f"{option} {dest}: the folder {dest.parent} does not exist (create it first)")


def _temp_beside(dest: Path, option: str) -> tuple[int, str]:
    """A temp file in ``dest``'s folder (so the rename is atomic); a clear error when none can be made."""
    try:
        # The name is cut so that a destination name near the file system's limit still has a temp.
        return tempfile.mkstemp(prefix=f".{dest.name[:100]}.", suffix=".partial", dir=dest.parent)
    except OSError as exc:
        raise OutputError(
            f"{option} {dest}: cannot write in {dest.parent} ({exc.strerror or exc}); pick a writable folder"
        ) from None


def _fill_and_rename(dest: Path, what: str, fill: Callable[[str], object]) -> Path:
    """``fill(temp)`` writes a temp beside ``dest``, a rename puts it in place; on any failure the temp
    goes and ``dest`` is as it was (``what``: the option or kind of file the error line names)."""
    fd, tmp = _temp_beside(dest, what)
    os.close(fd)
    try:
        fill(tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{what} {dest}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def _replace(dest: Path, option: str, fill: Callable[[str], object]) -> Path:
    """``fill(temp path)`` writes the new content beside ``dest``; a rename then puts it in place.
    Whatever goes wrong, the temp file goes and ``dest`` is as it was. A link is written through,
    as a plain write would (the link stays); a device, a pipe or one of this process's open files
    (``/dev/stdout``) is written into, never replaced."""
    check_destination(dest, option)
    fd_number = own_fd(dest)
    if fd_number is not None or (dest.exists() and not dest.is_file()):  # through links: a pipe is a pipe
        _write_into(dest, option, fill, fd_number)
        return dest
    if dest.is_symlink():
        dest = _link_target(dest, option)
        check_destination(dest, option)
    return _fill_and_rename(dest, option, fill)


_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/(\d+)/fd)/(\d+)")
_STD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def own_fd(dest: Path) -> Optional[int]:
    """The file descriptor ``dest`` names when it is one of this process's (``-``, ``/dev/stdout``,
    ``/dev/fd/3``, ``/proc/self/fd/1``): written there, as a shell's redirection set it up, rather
    than reopened (which would start at offset 0) or renamed over (which would unlink the file)."""
    if str(dest) == "-":  # the usual name of standard output, never a file called "-"
        return 1
    text = os.path.abspath(dest)
    if text in _STD_PATHS:
        return _STD_PATHS[text]
    found = _FD_PATH.fullmatch(text)
    if found and (found[1] is None or int(found[1]) == os.getpid()):
        return int(found[2])
    return None


def _link_target(dest: Path, option: str) -> Path:
    """Where a link leads (a dangling one: the file it would make); a loop is an error, not a file."""
    try:
        return Path(os.path.realpath(dest, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(dest))
    except OSError as exc:
        raise OutputError(f"{option} {dest}: cannot write ({exc.strerror or exc})") from None


def _write_into(dest: Path, option: str, fill: Callable[[str], object], fd_number: Optional[int] = None) -> None:
    """``dest`` is a device, a pipe or an open file descriptor of this process: nothing to rename
    over, and replacing it would break it. The content is made in a private folder (whatever mode
    ``fill`` gives the file, nobody else can open it), then copied in; a pipe nobody reads is
    refused rather than waited on."""
    with tempfile.TemporaryDirectory(prefix="cuw-output-") as private:
        tmp = os.path.join(private, "content")
        try:
            fill(tmp)
            if fd_number is not None:
                out = os.dup(fd_number)
            else:
                nonblock = getattr(os, "O_NONBLOCK", 0)
                out = os.open(dest, os.O_WRONLY | nonblock)
                if nonblock:
                    os.set_blocking(out, True)
            with open(tmp, "rb") as src, os.fdopen(out, "wb") as sink:
                shutil.copyfileobj(src, sink)
        except OSError as exc:
            why = {errno.ENXIO: "nothing reads that pipe", errno.EBADF: "that file descriptor is not open"}.get(
                exc.errno or 0, exc.strerror or str(exc)
            )
            raise OutputError(f"{option} {dest}: cannot write ({why})") from None


def _default_mode(dest: Path, follow: bool = True) -> int:
    """The mode a plain ``open(dest, "w")`` would leave: the old file's, else 0666 less the umask.
    Without ``follow``, only a regular file at ``dest`` itself gives its mode (not a link's target)."""
    try:
        info = os.stat(dest, follow_symlinks=follow)
        if follow or stat.S_ISREG(info.st_mode):
            return info.st_mode & 0o7777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_text(dest: Path, text: str, option: str = "output") -> Path:
    """Writes ``text`` to a temp file beside ``dest`` and renames it into place (a temp file is
    private to its owner: the result gets the mode a plain write would have given it)."""
    mode = _default_mode(dest)

    def fill(tmp: str) -> None:
        Path(tmp).write_text(text, encoding="utf-8")
        os.chmod(tmp, mode)

    return _replace(dest, option, fill)


def write_bytes(dest: Path, data: bytes, option: str = "output") -> Path:
    """:func:`write_text` for bytes, written as they are (no newline or encoding of their own)."""
    mode = _default_mode(dest)

    def fill(tmp: str) -> None:
        Path(tmp).write_bytes(data)
        os.chmod(tmp, mode)

    return _replace(dest, option, fill)


def copy_into(src: Path, dest: Path, option: str = "output") -> Path:
    """Copies ``src`` to ``dest`` through a temp file beside it and a rename (no torn file)."""
    return _replace(dest, option, lambda tmp: shutil.copy2(src, tmp))


def _place(dest: Path, what: str, fill: Callable[[str], object]) -> Path:
    """``fill(temp path)`` writes a file the forge names itself beside ``dest``; a rename puts it
    at ``dest`` whatever is there: a link is replaced (what it points to is never opened), so is a
    FIFO or a device node. A folder there, or no folder for it, is an error; a failed write leaves
    ``dest`` as it was and no temp."""
    if os.path.isdir(dest) and not os.path.islink(dest):
        raise OutputError(f"{what} {dest}: a folder is in the way; remove it or write elsewhere")
    if not dest.parent.is_dir():
        raise OutputError(f"{what} {dest}: the folder {dest.parent} does not exist")
    return _fill_and_rename(dest, what, fill)


def place_text(dest: Path, text: str, what: str) -> Path:
    """``text`` as the file the forge names ``dest`` (UTF-8): a new file renamed into place, never
    written through a link or into a FIFO found there (:func:`_place`); an old regular file's mode
    is kept, else a plain write's."""
    return place_bytes(dest, text.encode("utf-8"), what)


def place_bytes(dest: Path, data: bytes, what: str) -> Path:
    """:func:`place_text` for bytes."""
    mode = _default_mode(dest, follow=False)

    def fill(tmp: str) -> None:
        Path(tmp).write_bytes(data)
        os.chmod(tmp, mode)

    return _place(dest, what, fill)


def place_copy(src: Path, dest: Path, what: str) -> Path:
    """A copy of the regular file ``src`` (checked, never a FIFO waited on) as the file the forge
    names ``dest`` (:func:`_place`), its mode and times kept as :func:`shutil.copy2` keeps them."""

    def fill(tmp: str) -> None:
        with open_file(src, what) as source, open(tmp, "wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
        shutil.copystat(src, tmp)

    return _place(dest, what, fill)


def writable_dir(folder: Path, option: str) -> Path:
    """Creates ``folder`` if needed and proves a file can be written in it; a clear error otherwise."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{option} {folder} is {_what_is(folder)}, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".cuw-write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{option} {folder}: cannot write there ({exc.strerror or exc}); pick a writable folder") from None
    return folder


def _what_is(path: Path) -> str:
    """What ``path`` is, in words (``a file``, ``a FIFO``): for the line that refuses it as a folder."""
    mode = os.stat(path).st_mode
    return "a file" if stat.S_ISREG(mode) else what_it_is(mode)


def check_apart(folders: list[tuple[str, Path]], context: str = "") -> None:
    """Each (option, folder) lies apart from the others: not the same folder, not one inside
    another. One line naming both and the fix otherwise; ``context`` prefixes it (a verb's name)."""
    resolved = [(option, Path(folder).resolve()) for option, folder in folders]
    for option, folder in resolved:
        for other, there in resolved:
            if other != option and (folder == there or there in folder.parents):
                relation = "the same folder as" if folder == there else "inside"
                raise InputError(f"{context}{option} {folder} is {relation} {other} {there}: give each its own folder")


def same_file(a: Path, b: Path) -> bool:
    """True when both paths name one file (existing or not)."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except (OSError, RuntimeError):  # RuntimeError: a link loop, before Python 3.13
        return False


def tree_digest(root: Path) -> str:
    """sha256 over every file under ``root`` by relative path and the content a compiler reads there,
    in sorted order: a link to a file counts as that file (a copy that resolved the link is the same
    tree); a link to a folder, or a dangling one, by its target. ``__pycache__`` is left out."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in path.parts:
            continue
        if path.is_file():
            h.update(f"F {rel} ".encode() + bytes.fromhex(sha256_of(path)) + b"\n")
        elif path.is_symlink():
            h.update(f"L {rel} -> {os.readlink(path)}\n".encode())
    return h.hexdigest()


def sha256_of(path: Path, what: str = "file") -> str:
    """The sha256 of a regular file (a FIFO or a device is refused, never waited on or read forever)."""
    digest = hashlib.sha256()
    with open_file(path, what) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """An exclusive lock on the file ``lock`` (made if missing) for this machine's processes,
    released when the block ends or the process dies."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as fh:
        if sys.platform == "win32":  # mypy knows this test: msvcrt exists only there
            import msvcrt

            while True:  # msvcrt's blocking mode gives up after 10 s; retry until it is ours
                try:
                    msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
        else:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


@contextmanager
def only_one(lock: Path, what: str) -> Iterator[None]:
    """``what`` runs here alone: an exclusive lock on ``lock`` held for the block, taken at once or
    refused in one line (never waited for). Atomic, unlike a check of a "running" report followed
    by a write: of several runs started together exactly one gets it, and the others touch nothing.
    The lock dies with its process, so a killed run never blocks the next."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as fh:
        try:
            if sys.platform == "win32":  # mypy knows this test: msvcrt exists only there
                import msvcrt

                msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError on POSIX, PermissionError from msvcrt
            # Another run holds the lock: neither the input nor a tool is at fault.
            raise CuwError(f"{what} is already running (lock {lock}); wait for it or stop it") from None
        yield


def json_record(line: bytes) -> Optional[dict]:
    """One line of an append-only JSON-lines log as a dict; None for a line cut short (its
    writer killed mid-write) or one that is not a JSON object."""
    try:
        entry = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None


def json_records(path: Path) -> list[dict]:
    """Every whole record of a JSON-lines log (none when it is missing); a line cut short is left out."""
    try:
        data = read_bytes(path, "JSON-lines log", "log")
    except FileNotFoundError:
        return []
    return [e for e in map(json_record, (line for line in data.splitlines() if line.strip())) if e is not None]
