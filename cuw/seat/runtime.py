"""The seat: an nvcc stand-in placed where builds look for the compiler.

It is reached through CUDACXX (CMake), PYTORCH_NVCC (torch's ninja path) and
the shadow CUDA_HOME's bin/nvcc (torch's distutils path, and anything that
runs ``$CUDA_HOME/bin/nvcc`` by path). For each call:

* not a compile (device link, --version, CMake's compiler-id run): the real
  nvcc, untouched and uncached;
* a build-system probe (CMake try_compile, meson, conftest): the real nvcc,
  uncached -- a stubbed probe kills configure;
* a TU another shard owns: a valid empty object (and a depfile if asked);
* otherwise: ``ccache <real nvcc> ...`` with -dc/-dw spelled out.

The host compilers (gcc, g++, cc, c++) get a seat too, reached through PATH
(the shadow CUDA_HOME's bin comes first): a host TU under the source root is
compiled through the same cache, so the link job replays it, and on lanes
whose shards may leave host symbols undefined (not Windows, where the
module-init symbol must be in every shard) it is partitioned like a CUDA TU.
Host compiles of anything else (nvcc's own ``tmpxft`` intermediates, files
in the build tree, probes, links) run the real compiler untouched.

Each decision is one JSON line in the seat log, which the gates read. A compile's line carries
its wall ``seconds`` and, where the compiler runs as the seat's child (not under sccache, whose
server runs it; not on Windows, which has no ``resource``), its ``cpu_s`` (user + system of the
whole compile tree) and ``peak_mb`` (its largest process's peak RSS): what cost tables learn.
The configuration is a JSON file written by :func:`cuw.seat.install.install`; a seat with a
partition refuses to run when the ``source`` filter is also active.

On Linux jobs, :func:`cuw.seat.native.install_native` puts a native stub (``cuw/seat/seat_stub.c``)
in front of these scripts: from a table of the keys with their owners and of what an owned
compile needs (:func:`cuw.seat.native.seat_table`, written from the materialized source tree
and the configuration with the partition rule here), it stubs a foreign TU and compiles an
owned one through the cache (:func:`_stub_or_compile`, :func:`_compile_cached`: the same
command, environment and log line) the way :func:`run` and :func:`run_host` do, without
starting Python, and hands every other call, with the same argv, to the scripts (moved to
``<seat>/python/``). A change to what these functions run or log must be made there too
(tests/test_seat_stub.py compares the two).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from cuw.toolchain.nvcc_args import HOST_VALUE_OPTIONS, SOURCE_SUFFIXES, NvccCall, parse
from cuw.partition.globs import glob_match
from cuw.partition.rules import Assignment, tu_key

# Every build TU starts a Python here, and on a shard most of them are stubs: the stub path
# imports only json, os, the argv parser and the partition; subprocess, shutil, tempfile,
# pathlib and the cache module are imported where a real compile needs them; the installer,
# the native stub and the log reader are modules of their own (install, native, seat_log).

PROBE_MARKERS = ("CMakeScratch", "CompilerId", "CMakeTmp", "cmTC_", "meson-private", "conftest")
SOURCE_FILTER_VARS = ("CUDA_WHEELS_SHARD_INDEX", "CUDA_WHEELS_SHARD_COUNT")
DOUBLE_PARTITION_EXIT = 90
HOST_COMPILERS = ("gcc", "g++", "cc", "c++")
HOST_SCRIPT = "host-cc"
DEADLINE_AFTER_VAR = "CUW_SEAT_DEADLINE_AFTER"
"""Tests only: with a deadline set, it counts as passed once this many compiles are in the seat log
(a part that stops after exactly k compiles, whatever the machine's speed, with ``--jobs 1``)."""


@dataclass(frozen=True)
class SeatPartition:
    index: int  # 1-based
    count: int
    assignment: dict[str, int] = field(default_factory=dict)
    """Key -> shard from the recipe's rule (cuw.partition.assignment); keys outside it fall back to the hash rule."""
    filter_globs: list[str] = field(default_factory=list)
    """Under ``filter: source``: the filter's globs. A key they match (or that is in
    ``filter_keys``) is the filter's to partition, never the seat's: the seat compiles it."""
    filter_keys: list[str] = field(default_factory=list)
    """Under ``filter: source``: the files the filter partitioned, as keys."""

    def owner(self, key: str) -> int:
        """The 1-based shard that compiles the TU with this key."""
        return Assignment(self.count, table=self.assignment).owner(key)

    @property
    def beside_filter(self) -> bool:
        """Whether this seat partitions a source-filter recipe's rest (it knows the filter's files)."""
        return bool(self.filter_globs)

    def partitions(self, key: str) -> bool:
        """Whether the seat decides this key's owner (False: the source filter's file, compiled here)."""
        if not self.filter_globs:
            return True
        return key not in self.filter_keys and not any(glob_match(key, g) for g in self.filter_globs)


@dataclass(frozen=True)
class SeatConfig:
    real_nvcc: str
    cache_cmd: str
    """The cache tool's binary (ccache or sccache)."""
    cache_env: dict[str, str]
    statslog_var: Optional[str]
    """The tool's per-call stats log variable, when it has one (ccache)."""
    source_root: str
    empty_object: str
    log: str
    partition: Optional[SeatPartition]
    """None: the seat is a pure cache pass-through (unsharded, link, or ``source`` filter)."""
    extra_args: list[str] = field(default_factory=list)
    """The recipe's nvcc_flags and ``--threads N``, appended to every owned compile."""
    real_compilers: dict[str, str] = field(default_factory=dict)
    """Host compiler name -> the real executable behind the host seat."""
    partition_host: bool = True
    """Whether host TUs are partitioned too (False on Windows lanes)."""
    tree: str = ""
    """The folder holding the job's source and build trees: probe markers count below it only."""
    deadline: Optional[float] = None
    """Unix time after which an owned compile is not started: its TU gets the empty object and is
    logged ``deferred``, left to the shard's continuation (``cuw shard --deadline``). None: no deadline."""

    @staticmethod
    def read(path: str) -> "SeatConfig":
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        part = data.pop("partition")
        return SeatConfig(partition=SeatPartition(**part) if part else None, **data)


def is_probe(call: NvccCall, cwd: str, tree: str = "") -> bool:
    """A build-system probe: a marker in a path component of the source, the output or the working
    folder, below the job's tree when the path is under it (a work folder named ``conftest`` above
    the tree is not a probe; ``build/CMakeFiles/CMakeScratch/TryCompile-x`` is)."""
    for path in filter(None, [call.source, call.output, cwd]):
        if tree and (path == tree or path.startswith(tree.rstrip("/") + "/")):
            path = path[len(tree.rstrip("/")) + 1 :]
        if any(marker in part for part in path.replace("\\", "/").split("/") for marker in PROBE_MARKERS):
            return True
    return False


def _log(config: SeatConfig, **entry: object) -> None:
    entry["pid"] = os.getpid()
    with open(config.log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def _stub(call: NvccCall, config: SeatConfig) -> None:
    assert call.output is not None
    os.makedirs(os.path.dirname(os.path.abspath(call.output)), exist_ok=True)
    with open(config.empty_object, "rb") as src, open(call.output, "wb") as out:
        out.write(src.read())
    if call.depfile:
        os.makedirs(os.path.dirname(os.path.abspath(call.depfile)), exist_ok=True)
        with open(call.depfile, "w", encoding="utf-8") as dep:
            dep.write(f"{call.output.replace(' ', chr(92) + ' ')}:\n")


def _call(cmd: list[str], env: Optional[dict[str, str]] = None) -> int:
    import subprocess

    return subprocess.call(cmd, env=env)


def _children_usage() -> Optional[tuple[float, int]]:
    """CPU seconds (user + system) and the largest peak RSS in KiB of the waited-for children so
    far; None where there is no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def _measured(config: SeatConfig, before: Optional[tuple[float, int]]) -> dict[str, object]:
    """The log line's ``cpu_s`` and ``peak_mb`` of the compile just waited for: the children's CPU
    since ``before``, and the largest child's peak RSS (Linux counts KiB; the seat runs one compile
    per process, so it is this compile's). Absent without ``resource``, and under sccache, whose
    server, not a child of the seat, runs the compiler."""
    after = _children_usage()
    if before is None or after is None or os.path.basename(config.cache_cmd).startswith("sccache"):
        return {}
    return {"cpu_s": round(after[0] - before[0], 3), "peak_mb": after[1] // 1024}


def _compile_cached(cmd_tail: list[str], config: SeatConfig) -> tuple[int, str]:
    import tempfile

    from cuw.toolchain import cache

    env = cache.scrub(dict(os.environ))
    env.update(config.cache_env)
    cmd = [config.cache_cmd, *cmd_tail]
    if not config.statslog_var:
        return _call(cmd, env=env), "unknown"
    fd, statslog = tempfile.mkstemp(prefix="cuw-statslog-", dir=os.path.dirname(config.log))
    os.close(fd)
    env[config.statslog_var] = statslog
    try:
        rc = _call(cmd, env=env)
        with open(statslog, encoding="utf-8", errors="replace") as fh:
            outcome = cache.Ccache.call_outcome(fh.read())
    finally:
        os.unlink(statslog)
    return rc, outcome


_CCBIN = ("-ccbin", "--compiler-bindir")


def _unseated_ccbin(args: list[str], config: SeatConfig) -> list[str]:
    """``args`` with a ``-ccbin`` that names a host seat (CMake passes its CXX compiler, which is
    the job's own shadow ``bin/c++``) pointed at the real compiler: the seat's path differs per
    job, and the cache hashes it verbatim."""

    def real(value: str) -> str:
        if os.path.basename(os.path.realpath(value)) != HOST_SCRIPT:
            return value
        return config.real_compilers.get(os.path.basename(value)) or config.real_compilers.get("g++") or value

    out: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in _CCBIN and eq:
            out.append(f"{name}={real(value)}")
        elif args[i] in _CCBIN and i + 1 < len(args):
            out += [args[i], real(args[i + 1])]
            i += 1
        else:
            out.append(args[i])
        i += 1
    return out


def _host_compiler_args(argv: list[str], config: SeatConfig) -> list[str]:
    """``-ccbin <real g++>`` unless the build chose one: nvcc would otherwise find the host
    seat on PATH, a path that differs per job (sccache hashes it) and costs a Python start
    per host pass."""
    if any(arg.split("=", 1)[0] in _CCBIN for arg in argv):
        return []
    real = config.real_compilers.get("g++") or config.real_compilers.get("gcc")
    return ["-ccbin", real] if real else []


def _double_partition(config: SeatConfig) -> bool:
    """A partitioning seat refuses to run under the source filter when it would partition the
    filter's files too (each shard would get ~1/N^2 of them): when it does not know which files
    the filter covers, or when the filter's shard is not its own. A seat that knows the filter's
    globs partitions only the rest (:meth:`SeatPartition.partitions`), disjoint by construction."""
    part = config.partition
    if not part or not any(os.environ.get(v) for v in SOURCE_FILTER_VARS):
        return False
    if not part.beside_filter:
        sys.stderr.write(
            "cuw seat: refusing to partition: the source filter is active too "
            "(CUDA_WHEELS_SHARD_COUNT is set), so each shard would get ~1/N^2 of the work\n"
        )
        return True
    filtered = f"{os.environ.get(SOURCE_FILTER_VARS[0], '')}/{os.environ.get(SOURCE_FILTER_VARS[1], '')}"
    if filtered != f"{part.index}/{part.count}":
        sys.stderr.write(
            f"cuw seat: refusing to partition: the source filter is shard {filtered}, this seat is shard "
            f"{part.index}/{part.count}; one job, one shard\n"
        )
        return True
    return False


def past_deadline(config: SeatConfig) -> bool:
    """Whether an owned compile starting now would start after the job's deadline."""
    if config.deadline is None:
        return False
    after = os.environ.get(DEADLINE_AFTER_VAR, "")
    if after.isdigit():
        try:
            with open(config.log, encoding="utf-8", errors="replace") as fh:
                done = fh.read().count('"action": "compiled"')
        except FileNotFoundError:
            done = 0
        if done >= int(after):
            return True
    return time.time() >= config.deadline


def _stub_or_compile(call: NvccCall, config: SeatConfig, part: Optional[SeatPartition], cmd: list[str], **kind: str) -> int:
    """One TU of the build: a foreign one gets the empty object, an owned one goes through the cache
    (or, past the job's deadline, gets the empty object too and is left to the continuation)."""
    assert call.source is not None
    key = tu_key(call.source, config.source_root)
    tu_owner = part.owner(key) if part and part.partitions(key) else None
    if part and tu_owner is not None and tu_owner != part.index:
        _stub(call, config)
        _log(config, action="stubbed", **kind, key=key, owner=tu_owner, output=call.output)
        return 0
    if past_deadline(config):
        _stub(call, config)
        _log(config, action="deferred", **kind, key=key, owner=tu_owner, output=call.output)
        return 0
    start, usage = time.monotonic(), _children_usage()
    rc, outcome = _compile_cached(cmd, config)
    _log(
        config,
        action="compiled",
        **kind,
        key=key,
        owner=tu_owner,
        output=call.output,
        rc=rc,
        outcome=outcome,
        seconds=round(time.monotonic() - start, 3),
        at=round(time.time(), 3),  # when the compile ended: a timeline bar is [at - seconds, at]
        **_measured(config, usage),
    )
    return rc


def run(argv: list[str], config: SeatConfig) -> int:
    if _double_partition(config):
        return DOUBLE_PARTITION_EXIT
    call = parse(argv)
    cwd = os.getcwd()
    real = [config.real_nvcc, *argv]
    if not call.is_compile or call.source is None:
        _log(config, action="passthrough", argv=argv[:6])
        return _call(real)
    if is_probe(call, cwd, config.tree):
        _log(config, action="probe", source=call.source)
        return _call(real)
    args = _unseated_ccbin(call.cache_safe_args(), config)
    cmd = [config.real_nvcc, *args, *_host_compiler_args(argv, config), *config.extra_args]
    return _stub_or_compile(call, config, config.partition, cmd)


def _under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)
    except ValueError:  # different drives
        return False


def run_host(argv: list[str], config: SeatConfig, tool: str) -> int:
    """One call of a host compiler (gcc, g++, cc, c++) through the seat."""
    real = [config.real_compilers[tool], *argv]
    call = parse(argv, HOST_VALUE_OPTIONS)
    cwd = os.getcwd()
    if (
        not call.is_compile
        or call.source is None
        or not _under(call.source, config.source_root)
        or "tmpxft" in call.source
        or "tmpxft" in os.path.basename(call.output or "")
        or os.path.basename(call.source) in SOURCE_SUFFIXES
        or is_probe(call, cwd, config.tree)
    ):
        # Links, preprocessing, nvcc's intermediates (its tmpxft files, the nameless ``.c`` of
        # ggml's ``nvcc .c -Xcompiler --version`` probe), build-tree files, probes: not the build's TUs.
        return _call(real)
    part = config.partition if config.partition_host else None
    if part and _double_partition(config):
        return DOUBLE_PARTITION_EXIT
    return _stub_or_compile(call, config, part, real, kind="host")


def main(argv: list[str], config_path: str, tool: str = "nvcc") -> int:
    config = SeatConfig.read(config_path)
    if tool == "nvcc":
        return run(argv, config)
    return run_host(argv, config, tool)
