"""Shard archives: one tarball per shard holding its compiler cache and a manifest.

Written and read with :mod:`tarfile` (never a shell tar: Git-bash tar reads a
drive letter as a remote host). Reading validates every archive completely
before anything is merged, so a bad archive leaves nothing half-written.

Uncompressed, copied in large blocks: ccache and sccache entries are already
compressed, so gzip only cost CPU (52 MB/s against plain tar's disk speed).
An archive an older forge wrote (``.tar.gz``) is refused by name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Optional

from cuw import __version__
from cuw.toolchain.cache import Cache
from cuw.config.cell import Cell
from cuw.base.processes import pid_alive
from cuw.base.errors import CuwError, InputError, OutputError
from cuw.base.files import sha256_of
from cuw.toolchain.builder import Builder

FORMAT = 3  # 2: the builder (image, glibc, compiler) that made the cache; 3: the handoff fingerprint
MANIFEST = "manifest.json"
CACHE_PREFIX = "cache"
SUFFIX = ".tar"
LEGACY_SUFFIX = ".tar.gz"  # what forges before the uncompressed format wrote
COPY_BUFSIZE = 4 << 20  # tarfile's default 16 kB block makes a 1 GB cache ~65k read/write pairs
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Manifest:
    format: int
    forge_version: str
    cell: dict[str, Any]
    shard_index: int
    shard_count: int
    filter: str
    cache_tool: str
    cache_version: str
    cache_remote: Optional[str]
    """With a shared remote cache the archive holds only this manifest."""
    owned: list[str]
    compiled: list[str]
    counters: dict[str, int]
    fingerprint: dict[str, str]
    """What the cache is a function of (:mod:`cuw.jobs.fingerprint`): the link compares it with its own."""
    timeline: list[list[Any]] = field(default_factory=list)
    """The shard's compiles as [key, start (epoch s), seconds, outcome], then cpu_s and peak_mb where the seat
    measured them (:func:`cuw.seat.seat_log.timeline_row`): the link draws them."""
    builder: Optional[dict[str, Any]] = None
    """Where the shard compiled (:class:`cuw.toolchain.builder.Builder`): the link refuses a
    cache made in another image or on another host toolchain."""
    part: int = 1
    """Which part of its shard this is: a shard stopped at its deadline (``partial``) goes on in a
    continuation job (``cuw shard --resume``), part 2, with the cache of part 1 and its own."""
    partial: bool = False
    """The shard stopped at its deadline: ``left`` are still to compile; the link refuses it."""
    left: list[str] = field(default_factory=list)
    """The TUs of its slice no part has compiled yet (empty unless ``partial``)."""

    @staticmethod
    def from_json(data: Any, where: str) -> "Manifest":
        """The manifest, read through its schema: a missing, unknown, mistyped or out-of-range field
        is a refusal naming it (a tampered or foreign manifest must never reach the merge)."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: manifest is not a JSON object; not a shard archive of this forge")
        if _is_int(data.get("format")) and data["format"] != FORMAT:
            raise InputError(
                f"{where}: archive format {data['format']}, this forge reads {FORMAT} (forge {__version__}): "
                "run the shards again with this forge"
            )
        unknown = sorted(set(data) - set(_FIELDS))
        missing = sorted(
            k
            for k, f in Manifest.__dataclass_fields__.items()
            if k not in data and f.default is MISSING and f.default_factory is MISSING
        )
        if unknown or missing:
            raise InputError(
                f"{where}: manifest does not match format {FORMAT} "
                f"({'unknown field(s) ' + ', '.join(unknown) if unknown else 'missing ' + ', '.join(missing)})"
            )
        for key, value in data.items():
            check, what = _FIELDS[key]
            if not check(value):
                raise InputError(f"{where}: manifest field {key!r} is {json.dumps(value)[:80]}, not {what}")
        if data.get("part", 1) < 1 or data.get("partial", False) != bool(data.get("left")):
            raise InputError(
                f"{where}: manifest says part {data.get('part', 1)}, partial {json.dumps(data.get('partial', False))} "
                f"with {len(data.get('left', []))} TUs left; a part counts from 1 and is partial exactly when TUs are left"
            )
        if not 1 <= data["shard_index"] <= data["shard_count"]:
            raise InputError(
                f"{where}: manifest says shard {data['shard_index']} of {data['shard_count']}; "
                "a shard index runs from 1 to the count"
            )
        cell = data["cell"]
        if (
            set(cell) != _CELL_KEYS
            or not all(isinstance(cell[k], str) and _safe_name(cell[k]) for k in _CELL_KEYS - {"torch"})
            or not (cell["torch"] is None or (isinstance(cell["torch"], str) and _safe_name(cell["torch"])))
        ):
            raise InputError(
                f"{where}: manifest cell {json.dumps(cell)[:160]} is not a cell "
                f"({', '.join(sorted(_CELL_KEYS))}: names of letters, digits, '.', '_', '-')"
            )
        return Manifest(**data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _safe_name(text: str) -> bool:
    return bool(text) and len(text) <= 100 and all(c.isalnum() or c in "._-" for c in text)


_CELL_KEYS = set(Cell.__dataclass_fields__)
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # every Manifest field: its check, and what it must be
    "format": (_is_int, "an integer"),
    "forge_version": (lambda v: isinstance(v, str), "a string"),
    "cell": (lambda v: isinstance(v, dict), "an object"),
    "shard_index": (_is_int, "an integer"),
    "shard_count": (_is_int, "an integer"),
    "filter": (lambda v: isinstance(v, str), "a string"),
    "cache_tool": (lambda v: v in ("ccache", "sccache"), "ccache or sccache"),
    "cache_version": (lambda v: isinstance(v, str), "a string"),
    "cache_remote": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "owned": (_strings, "a list of strings"),
    "compiled": (_strings, "a list of strings"),
    "counters": (
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and _is_int(n) for k, n in v.items()),
        "an object of integers",
    ),
    "fingerprint": (
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "an object of strings",
    ),
    "timeline": (lambda v: isinstance(v, list) and all(isinstance(row, list) for row in v), "a list of rows"),
    "builder": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "part": (_is_int, "an integer"),
    "partial": (lambda v: isinstance(v, bool), "true or false"),
    "left": (_strings, "a list of strings"),
}


def archive_name(cell: Cell, index: int, count: int) -> str:
    """Carries package, lane, Python, CUDA, torch and i-of-N (artifact names must not collide)."""
    return f"cuw-shard-{cell.id}-{index}of{count}{SUFFIX}"


def report_path(archive_path: Path) -> Path:
    """The shard's report beside its archive (it records the archive's SHA-256)."""
    return archive_path.with_name(archive_path.name.removesuffix(SUFFIX) + ".report.json")


def recorded_digest(path: Path) -> tuple[str, str]:
    """(the SHA-256 its shard recorded for the archive at ``path`` in its report, the shard ``i/N``):
    a missing or unreadable report, or one that records no digest, is refused naming the fix."""
    recorded_in = report_path(path)
    try:
        body = json.loads(recorded_in.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{path}: its shard's report {recorded_in.name} is missing, so the archive cannot be checked "
            "against the digest its shard recorded: hand over the shard's archive and report together"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"{recorded_in}: unreadable shard report ({exc}); run that shard again") from None
    recorded = body.get("archive_sha256") if isinstance(body, dict) else None
    shard = body.get("shard") if isinstance(body, dict) else None
    if not _is_sha256(recorded):
        raise InputError(
            f"{recorded_in}: records no archive_sha256 for {path.name} (a shard that did not finish, or an "
            f"older forge's): run shard {shard or 'i/N'} again"
        )
    assert isinstance(recorded, str)
    return recorded, str(shard)


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _refuse_digest(path: Path, got: str, recorded: str, shard: str) -> None:
    """The one wording of an archive that is not the one its shard made."""
    if got != recorded:
        raise InputError(
            f"{path}: SHA-256 {got[:16]}… is not the {recorded[:16]}… shard {shard} recorded when it made "
            "the archive: it was altered, cut short or replaced since; run that shard again"
        )


def check_digest(path: Path) -> None:
    """The archive is the one its shard made: its SHA-256 is the one the shard recorded in its report
    when it packed it. Corruption, a truncated copy, an archive swapped in from another run, or one
    whose entries were replaced after the shard, are refused here, before anything is unpacked. (The
    link does not read an archive twice: :func:`unpack` given the recorded digest checks the bytes it
    extracts.)"""
    recorded, shard = recorded_digest(path)
    _refuse_digest(path, sha256_of(path), recorded, shard)


def _partial_prefix(dest: Path) -> str:
    # Hidden and outside the archive glob: a half-written archive never reads as one.
    return f".{dest.name}."


def pack(job_cache: Cache, manifest: Manifest, dest: Path) -> Path:
    """Writes the archive atomically: a temp file beside ``dest``, flushed, then renamed into place.

    Until the rename, ``dest`` keeps whatever it held (the previous run's
    archive). A write that fails (no space left, a file size limit) removes
    its temp file and raises one line; a process killed mid-write leaves a
    hidden ``.partial`` that :func:`remove_partials` clears on the next run.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"{_partial_prefix(dest)}{os.getpid()}.", suffix=".partial", dir=dest.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb", buffering=COPY_BUFSIZE) as raw:  # a cache of small files: few large writes
            # TarFile itself: what tarfile.open(mode="w") makes, with copybufsize in its typed signature. GNU
            # headers: a pax header's checks cost more than the copy of a small entry, and entry names are
            # ASCII (a long one gets GNU's long-name record, which every reader of the archive parses).
            with tarfile.TarFile(fileobj=raw, mode="w", copybufsize=COPY_BUFSIZE, format=tarfile.GNU_FORMAT) as tar:
                data = json.dumps(asdict(manifest), indent=2, sort_keys=True).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
                base = len(str(job_cache.cache_dir)) + 1
                for path in job_cache.entry_files():
                    rel = str(path)[base:].replace(os.sep, "/")
                    with open(path, "rb") as entry:
                        tar.addfile(_entry_info(f"{CACHE_PREFIX}/{rel}", entry), entry)
            # No fsync: the rename below is what keeps a killed job (Ctrl-C, a timeout) from leaving
            # a partial archive under the real name; only an OS crash could tear the file, and the
            # link reads every member and the end-of-archive marker before it merges anything.
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        tmp.replace(dest)
    except (OSError, tarfile.TarError) as exc:
        tmp.unlink(missing_ok=True)
        why = getattr(exc, "strerror", None) or str(exc)
        kept = "; the previous archive there is untouched" if dest.exists() else ""
        raise OutputError(f"cannot write the shard archive {dest}: {why}{kept}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _entry_info(arcname: str, entry: BinaryIO) -> tarfile.TarInfo:
    """A header from the open file's own stat: no owner lookups, which the "data" filter ignores anyway."""
    st = os.fstat(entry.fileno())
    info = tarfile.TarInfo(arcname)
    info.size = st.st_size
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)  # a float mtime costs a pax header (two more blocks) per member
    return info


def remove_partials(dest: Path) -> list[Path]:
    """Removes temp files a killed :func:`pack` of ``dest`` left, except those of a live process."""
    removed: list[Path] = []
    if not dest.parent.is_dir():
        return removed
    for tmp in dest.parent.glob(f"{_partial_prefix(dest)}*.partial"):
        pid = tmp.name[len(_partial_prefix(dest)) :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
            continue  # another run of this shard is packing right now
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


REMOTE_FAILURES = ("remote_storage_error", "remote_storage_timeout")


def remote_failures(job_cache: Cache) -> dict[str, int]:
    """Counters of remote-storage calls that failed during this job (ccache: errors, timeouts).

    ccache keeps compiling when its remote goes away; a shard whose entries did
    not all reach the remote must not hand over a manifest that says they did.
    """
    if not job_cache.remote or job_cache.tool != "ccache":
        return {}
    found = {}
    for line in job_cache._run("--print-stats").splitlines():
        name, _, value = line.partition("\t")
        if name in REMOTE_FAILURES and value.strip().isdigit() and int(value) > 0:
            found[name] = int(value)
    return found


@dataclass(frozen=True)
class Restored:
    path: Path
    manifest: Manifest
    staging: Path  # the unpacked cache folder
    sha256: str = ""
    """The digest of every byte of the archive, taken from the bytes that were unpacked."""


def _check_member(member: tarfile.TarInfo, where: Path) -> None:
    name = member.name.replace("\\", "/")  # a Windows-made name must not smuggle "..\\"
    parts = PurePosixPath(name).parts
    # A drive letter or a stream name in any component ("cache/C:/Windows/x") joins to a path
    # outside the staging folder on Windows; "//host/share" is caught as absolute.
    if name.startswith(("/", "\\")) or ".." in parts or any(":" in part for part in parts):
        raise InputError(f"{where}: member {name!r} would land outside the cache directory; refusing the archive")
    if not (member.isfile() or member.isdir()):
        raise InputError(f"{where}: member {name!r} is a link or device, not a cache file; refusing the archive")
    if name != MANIFEST and parts[0] != CACHE_PREFIX:
        raise InputError(f"{where}: unexpected member {name!r} (a shard archive holds {MANIFEST} and {CACHE_PREFIX}/)")


def refuse_legacy(path: Path) -> None:
    """A gzip archive is from a forge before the uncompressed format: one line naming the fix."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError:
        return  # the read that follows names the error
    if magic == _GZIP_MAGIC:
        raise InputError(
            f"{path}: a gzip shard archive from an older forge (this forge writes and reads uncompressed "
            f"{SUFFIX}); re-run that shard with this forge, or delete the file"
        )


def shard_archives(folder: Path) -> list[Path]:
    """The shard archives in ``folder``; an older forge's ``.tar.gz`` there is refused, not skipped."""
    for old in sorted(folder.glob(f"cuw-shard-*{LEGACY_SUFFIX}")):
        refuse_legacy(old)
    return sorted(folder.glob(f"cuw-shard-*{SUFFIX}"))


def _open(path: Path) -> tarfile.TarFile:
    refuse_legacy(path)
    return tarfile.TarFile(path, "r", copybufsize=COPY_BUFSIZE)  # TarFile, not open(): no compression is ever guessed


# RecursionError: JSON nested deeper than the parser goes (a tampered manifest or report).
_CORRUPT = (tarfile.TarError, EOFError, OSError, ValueError, json.JSONDecodeError, AssertionError, RecursionError)


def read_manifest(path: Path) -> Manifest:
    try:
        with _open(path) as tar:
            return _manifest_in(tar, path)
    except _CORRUPT as exc:
        raise InputError(f"{path}: corrupted or truncated archive ({exc})") from None


def check_archive(path: Path) -> Manifest:
    """The whole archive checked without unpacking anything: every member's name and kind, its
    end, its manifest. What :func:`unpack` checks again before it writes."""
    try:
        with _open(path) as tar:
            for member in tar.getmembers():
                _check_member(member, path)
            _check_complete(tar, path)
            return _manifest_in(tar, path)
    except _CORRUPT as exc:
        raise InputError(f"{path}: corrupted or truncated archive ({exc})") from None


def _manifest_in(tar: tarfile.TarFile, path: Path) -> Manifest:
    try:
        member = tar.getmember(MANIFEST)
    except KeyError:
        raise InputError(f"{path}: no {MANIFEST} inside: not a shard archive") from None
    fh = tar.extractfile(member)
    assert fh is not None
    return Manifest.from_json(json.loads(fh.read()), str(path))


def _check_complete(tar: tarfile.TarFile, path: Path) -> None:
    """Uncompressed, a tar cut at a member boundary reads as a shorter valid one (gzip's trailer
    used to catch that): a whole archive ends in two zero blocks right after its last member."""
    assert tar.fileobj is not None
    tar.fileobj.seek(tar.offset)  # where reading the members stopped
    if tar.fileobj.read(2 * tarfile.BLOCKSIZE) != bytes(2 * tarfile.BLOCKSIZE):
        raise InputError(f"{path}: corrupted or truncated archive (no end-of-archive marker after its last member)")


MANIFEST_MOST = 256 << 20  # a manifest lists TUs and a timeline: a few MB for the largest shards
HASH_AHEAD = 4  # read buffers in flight: the hashing thread works on one while the next is read and written


class _OnePass:
    """An archive read once, in order, in ``COPY_BUFSIZE`` blocks, every byte hashed exactly once as it
    is read (on a thread of its own, so hashing overlaps the writes): the file object tarfile parses
    headers from, and the source :meth:`copy_to` writes member data from, so the bytes extracted are
    the bytes hashed. A seek forward reads (and hashes) what it skips; a read behind the current
    block (tarfile's one-byte probe of the last member's padding) reads the file again, unhashed."""

    def __init__(self, path: Path) -> None:
        self._raw = open(path, "rb", buffering=0)
        self._hash = hashlib.sha256()
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuw-archive-hash")
        self._buffers = [bytearray(COPY_BUFSIZE) for _ in range(HASH_AHEAD)]
        self._hashing: list[Optional[Future[None]]] = [None] * HASH_AHEAD
        self._turn = 0
        self._window = memoryview(b"")
        self._start = 0  # the file offset of the window's first byte
        self._read = 0  # bytes read from the file and handed to the hash: [0, _read)
        self._pos = 0
        self._eof = False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            offset += self._pos
        elif whence != os.SEEK_SET:
            raise OSError("a shard archive is read in order")
        self._pos = offset
        return offset

    def read(self, size: int = -1) -> bytes:
        if self._pos < self._start:  # behind the window: read again, outside the hash
            self._raw.seek(self._pos)
            try:
                return self._raw.read(min(size if size >= 0 else self._start, self._start - self._pos)) or b""
            finally:
                self._raw.seek(self._read)
        out = bytearray()
        while size < 0 or len(out) < size:
            piece = self._piece(COPY_BUFSIZE if size < 0 else size - len(out))
            if not piece:
                break
            out += piece
        return bytes(out)

    def copy_to(self, fd: int, size: int, name: str) -> None:
        """``size`` bytes from the position into ``fd``, straight from the hashed blocks."""
        left = size
        while left:
            piece = self._piece(left)
            if not piece:
                raise EOFError(f"member {name!r} is cut short")
            left -= len(piece)
            while piece:
                piece = piece[os.write(fd, piece) :]

    def _piece(self, most: int) -> memoryview:
        """Up to ``most`` bytes at the position, from the window (the next block read when it is spent)."""
        while self._pos >= self._read:
            if not self._advance():
                return memoryview(b"")
        at = self._pos - self._start
        piece = self._window[at : at + most]
        self._pos += len(piece)
        return piece

    def _advance(self) -> bool:
        """The next block into the window and its hashing started; False at the end of the file."""
        if self._eof:
            return False
        turn, self._turn = self._turn, (self._turn + 1) % HASH_AHEAD
        pending = self._hashing[turn]
        if pending is not None:
            pending.result()  # its buffer is free once its bytes are hashed
        buf = self._buffers[turn]
        got = self._raw.readinto(buf) or 0
        if not got:
            self._eof = True
            return False
        self._window = memoryview(buf)[:got]
        self._hashing[turn] = self._hasher.submit(self._hash.update, self._window)
        self._start, self._read = self._read, self._read + got
        return True

    def hexdigest(self) -> str:
        """Reads (and hashes) what is left of the file: the digest of all of it."""
        while self._advance():
            pass
        self._pos = self._read
        for pending in self._hashing:
            if pending is not None:
                pending.result()
        return self._hash.hexdigest()

    def close(self) -> None:
        self._hasher.shutdown(wait=True)
        self._raw.close()


def unpack(path: Path, staging_root: Path, sha256: Optional[str] = None, shard: str = "") -> Restored:
    """One pass over the archive: every member checked (:func:`_check_member`) and written into a
    fresh staging folder under ``staging_root`` as it is read, every byte hashed as it is read, the
    end-of-archive marker checked, the manifest read. ``sha256`` (the digest shard ``shard`` recorded,
    :func:`recorded_digest`): an archive whose bytes are not those is refused, and so is one that
    fails a check; either way the staging folder is removed, nothing of it left to adopt. Only the
    caller's :func:`merge_into` adopts a staging folder."""
    refuse_legacy(path)
    staging = Path(tempfile.mkdtemp(prefix="restore-", dir=staging_root))
    try:
        source = _OnePass(path)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(f"{path}: cannot read the archive ({exc.strerror or exc})") from None
    try:
        try:
            manifest = _extract(source, staging, path)
            refusal: Optional[BaseException] = None
        except CuwError as exc:
            refusal = exc
        except _CORRUPT as exc:
            refusal = InputError(f"{path}: corrupted or truncated archive ({exc})")
        if sha256 is not None:
            try:
                got = source.hexdigest()
            except OSError:
                got = None  # the read error stands as the refusal
            if got is not None:
                _refuse_digest(path, got, sha256, shard)  # not the shard's bytes: that, before what is wrong in them
        if refusal is not None:
            raise refusal
        digest = source.hexdigest()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        source.close()
    return Restored(path, manifest, staging / CACHE_PREFIX, digest)


def _extract(source: _OnePass, staging: Path, where: Path) -> Manifest:
    """Reads the archive's members in order from ``source`` and writes each, checked first (plain files
    and folders with safe relative names, see :func:`_check_member`), into the fresh ``staging``: a file
    is created exclusively (a name twice is refused, nothing is followed), its bytes copied straight
    from the hashed blocks, no per-file sync (the merge's rename is the step that counts). tarfile's
    ``extractall`` with the "data" filter does the checks again per member (a realpath, about 16 lstat
    calls) and sets owner, mode and times: 3x tar's time on a cache of small files. Returns the
    manifest, once the end-of-archive marker is found after the last member."""
    made: set[str] = set()
    root = str(staging)
    manifest: Optional[Manifest] = None
    # TarFile itself over the one-pass reader: it parses the headers (pax and GNU names included)
    tar = tarfile.TarFile(fileobj=source, mode="r", copybufsize=COPY_BUFSIZE)  # type: ignore[arg-type]
    for member in tar:
        _check_member(member, where)
        name = member.name.replace("\\", "/")
        if name == MANIFEST:
            if manifest is not None or member.size > MANIFEST_MOST:
                raise InputError(f"{where}: {MANIFEST} appears twice or is over {MANIFEST_MOST >> 20} MiB; refusing the archive")
            source.seek(member.offset_data)
            data = source.read(member.size)
            if len(data) != member.size:
                raise EOFError(f"member {name!r} is cut short")
            manifest = Manifest.from_json(json.loads(data), str(where))
            continue
        target = os.path.join(root, *name.split("/"))
        if member.isdir():
            os.makedirs(target, exist_ok=True)
            made.add(target)
            continue
        folder = os.path.dirname(target)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
        except FileExistsError:
            raise InputError(f"{where}: member {member.name!r} appears twice; refusing the archive") from None
        try:
            source.seek(member.offset_data)
            source.copy_to(fd, member.size, member.name)
        finally:
            os.close(fd)
    _check_complete(tar, where)
    if manifest is None:
        raise InputError(f"{where}: no {MANIFEST} inside: not a shard archive")
    return manifest


def merge_into(restored: list[Restored], cache_dir: Path) -> int:
    """Unions every restored cache into ``cache_dir``; returns files added.

    Entries are content-addressed, so a name present twice holds the same bytes.
    """
    added = 0
    cache_dir.mkdir(parents=True, exist_ok=True)
    for item in restored:
        if item.staging.is_dir():
            added += _merge_tree(item.staging, cache_dir)
    return added


def _merge_tree(src: Path, dest: Path) -> int:
    """Moves ``src``'s files under ``dest``; a folder ``dest`` lacks moves whole (one rename, not one per file)."""
    added = 0
    for child in sorted(src.iterdir()):
        target = dest / child.name
        if child.is_dir():
            if target.exists():
                added += _merge_tree(child, target)
                continue
            count = sum(len(files) for _, _, files in os.walk(child))
        elif child.is_file() and not target.exists():
            count = 1
        else:
            continue
        shutil.move(str(child), target)
        added += count
    return added


def expect(manifest: Manifest, path: Path, cell: Cell, job_cache: Cache, count: Optional[int], builder: Builder) -> None:
    """An archive from another recipe, cell, cache tool/version/remote, shard count or builder (``builder``:
    the job's: :func:`cuw.toolchain.builder.current_builder` of its settings) is refused by name."""
    if manifest.cell.get("recipe") != cell.recipe:
        raise InputError(f"{path}: archive is for recipe {manifest.cell.get('recipe')!r}, not {cell.recipe!r}")
    theirs = Cell(**manifest.cell)
    if theirs != cell:
        raise InputError(f"{path}: archive is for cell {theirs.id}, this link builds {cell.id}")
    tool, version = job_cache.tool, job_cache.version()
    if manifest.cache_tool != tool or manifest.cache_version != version:
        raise InputError(
            f"{path}: archive was made with {manifest.cache_tool} {manifest.cache_version}; "
            f"this link uses {tool} {version} (shards and link must run the same tool and version)"
        )
    if manifest.cache_remote != job_cache.remote:
        raise InputError(
            f"{path}: shard used remote cache {manifest.cache_remote or 'none'}, this link uses {job_cache.remote or 'none'}"
        )
    if count is not None and manifest.shard_count != count:
        raise InputError(f"{path}: archive is shard {manifest.shard_index}/{manifest.shard_count}, others are of {count}")
    if manifest.format != FORMAT:
        raise InputError(f"{path}: archive format {manifest.format}, this forge reads {FORMAT} (forge {__version__})")
    check_builder(manifest, path, builder)


def check_builder(manifest: Manifest, path: Path, here: Builder) -> None:
    """A cache compiled in another image (or on the host, for a link in an image) is refused:
    its objects carry that builder's glibc and compiler, and the wheel gets this builder's floor."""
    theirs = Builder.from_dict(manifest.builder, str(path))
    if not here.same_as(theirs):
        raise InputError(
            f"{path}: shard {manifest.shard_index}/{manifest.shard_count} was compiled {theirs.describe()}; "
            f"this link runs {here.describe()}: run shards and link in one image (--image)"
        )
