"""What a job's machine had left while it built: memory, swap, disk, load, the largest processes.

A hosted runner has 4 cores, 16 GB and about 14 GB of free disk, and one heavy TU (natten's
peak at 11.5 GB) is enough to get a compiler killed. A background thread samples the machine
every ``CUW_SAMPLE_S`` seconds (default 30) from ``/proc`` and ``statvfs`` (no psutil: the forge
adds no dependency for this); the record goes into the shard and link reports, the timeline
draws it, and the gates can say "out of memory" with numbers. Off Linux (no ``/proc``) only the
disk is read and no samples are taken; nothing fails.

Sizes are decimal megabytes (10^6 bytes); ``/proc`` speaks in KiB.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from cuw.base.errors import InputError
from cuw.gates.conditions import size

SAMPLE_ENV = "CUW_SAMPLE_S"
DEFAULT_SAMPLE_S = 30.0
TOP = 3
MAX_SAMPLES = 720
"""6 h (a hosted runner's cap) at 30 s. Past it every other sample is dropped and later ones are
kept at half the rate, so a long job's report stays small; the peaks are kept apart and never thinned."""

_PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    rss_mb: float


@dataclass(frozen=True)
class Sample:
    at: float
    """Epoch seconds (the seat log's clock, so the timeline can place it)."""
    mem_used_mb: float
    """MemTotal - MemAvailable: what the kernel could not give back without swapping or killing."""
    mem_available_mb: float
    mem_total_mb: float
    swap_used_mb: float
    disk_free_mb: float
    load1: float
    top: list[Proc] = field(default_factory=list)


def sample_interval(raw: str) -> float:
    """``raw``, the run's ``CUW_SAMPLE_S``, in seconds (the default when empty); a bad value is
    refused rather than silently sampling never."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_SAMPLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise InputError(f"{SAMPLE_ENV} must be a number of seconds between 0.1 and 3600, got {raw!r}")
    return value


def _mb(kib: float) -> float:
    return round(kib * 1024 / 1e6, 1)


def disk_free_mb(folder: Path) -> float:
    """Free space (for an unprivileged writer) on the filesystem that holds ``folder``, or the
    nearest folder above it that exists (a job's folder may not be made yet)."""
    probe = folder.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return round(shutil.disk_usage(probe).free / 1e6, 1)


def mount_of(folder: Path) -> Path:
    """The mount point of the filesystem ``folder`` is on (what a person would name: ``/``, ``/mnt``)."""
    probe = folder.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    probe = probe.resolve()
    while not os.path.ismount(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


def read_meminfo(proc: Path = _PROC) -> dict[str, int]:
    """``/proc/meminfo`` as name -> KiB."""
    out: dict[str, int] = {}
    for line in (proc / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0])
    return out


def _stat(pid: str, proc: Path) -> Optional[tuple[str, int]]:
    """(command name, parent pid) of a process, or None when it is gone or unreadable."""
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    # The name sits in parentheses and may itself hold spaces or parentheses: the last ")" ends it.
    close = text.rfind(")")
    fields = text[close + 2 :].split()
    if close < 0 or len(fields) < 2:
        return None
    return text[text.find("(") + 1 : close], int(fields[1])


def _rss_kib(pid: str, proc: Path) -> Optional[int]:
    try:
        for line in (proc / pid / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return 0  # a kernel thread or a zombie: no resident memory of its own


def tree(root: int, proc: Path = _PROC) -> dict[int, str]:
    """pid -> name of ``root`` and every process below it. The job's own tree, not the machine's:
    several shards can share a machine (``cuw build``), and each must name its own compilers."""
    children: dict[int, list[tuple[int, str]]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        stat = _stat(entry, proc)
        if stat is None:
            continue
        names[int(entry)] = stat[0]
        children.setdefault(stat[1], []).append((int(entry), stat[0]))
    found: dict[int, str] = {root: names.get(root, "?")} if root in names else {}
    stack = [root]
    while stack:
        for pid, name in children.get(stack.pop(), []):
            if pid not in found:
                found[pid] = name
                stack.append(pid)
    return found


def largest(root: int, count: int = TOP, proc: Path = _PROC) -> list[Proc]:
    """The ``count`` processes of ``root``'s tree with the most resident memory."""
    sized = []
    for pid, name in tree(root, proc).items():
        kib = _rss_kib(str(pid), proc)
        if kib is not None:
            sized.append(Proc(pid, name, _mb(kib)))
    return sorted(sized, key=lambda p: (-p.rss_mb, p.pid))[:count]


def sample(folder: Path, root: int, proc: Path = _PROC) -> Optional[Sample]:
    """One look at the machine; None where there is no ``/proc`` (not Linux)."""
    if not (proc / "meminfo").is_file():
        return None
    info = read_meminfo(proc)
    total, available = info.get("MemTotal", 0), info.get("MemAvailable", info.get("MemFree", 0))
    swap = info.get("SwapTotal", 0) - info.get("SwapFree", 0)
    try:
        load1 = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load1 = 0.0
    return Sample(
        at=round(time.time(), 1),
        mem_used_mb=_mb(total - available),
        mem_available_mb=_mb(available),
        mem_total_mb=_mb(total),
        swap_used_mb=_mb(swap),
        disk_free_mb=disk_free_mb(folder),
        load1=load1,
        top=largest(root, TOP, proc),
    )


class Sampler:
    """Samples the machine from a daemon thread until :meth:`stop`; :meth:`record` is the report's
    ``resources`` object at any moment. A failed look is skipped: sampling never fails a job."""

    def __init__(self, folder: Path, interval_s: float, root: Optional[int] = None, proc: Path = _PROC) -> None:
        self.folder = folder
        self.proc = proc
        self.interval_s = interval_s
        self.root = os.getpid() if root is None else root
        self.disk_free_start_mb = disk_free_mb(folder)
        self.started_at = time.time()
        self.samples: list[Sample] = []
        self._stride, self._skipped = 1, 0
        self._peaks: dict[str, Optional[float]] = {
            "peak_mem_used_mb": None,
            "min_mem_available_mb": None,
            "min_disk_free_mb": None,
            "max_swap_used_mb": None,
            "peak_load1": None,
            "mem_total_mb": None,
        }
        self._largest: dict[int, Proc] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cuw-resources", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Takes a last sample (a job shorter than the interval still has its end) and ends the thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        self.take()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self.take()
        while not self._stopped.wait(self.interval_s):
            self.take()

    def take(self) -> Optional[Sample]:
        try:
            got = sample(self.folder, self.root, self.proc)
        except (OSError, ValueError):
            return None
        if got is not None:
            with self._lock:
                self._keep(got)
        return got

    def _keep(self, got: Sample) -> None:
        def most(key: str, value: float) -> None:
            old = self._peaks[key]
            self._peaks[key] = value if old is None else max(old, value)

        def least(key: str, value: float) -> None:
            old = self._peaks[key]
            self._peaks[key] = value if old is None else min(old, value)

        most("peak_mem_used_mb", got.mem_used_mb)
        most("max_swap_used_mb", got.swap_used_mb)
        most("peak_load1", got.load1)
        most("mem_total_mb", got.mem_total_mb)
        least("min_mem_available_mb", got.mem_available_mb)
        least("min_disk_free_mb", got.disk_free_mb)
        for p in got.top:
            if p.pid not in self._largest or self._largest[p.pid].rss_mb < p.rss_mb:
                self._largest[p.pid] = p
        self._skipped += 1
        if self._skipped < self._stride:
            return
        self._skipped = 0
        self.samples.append(got)
        if len(self.samples) > MAX_SAMPLES:
            self.samples = self.samples[::2]
            self._stride *= 2

    def record(self) -> dict[str, Any]:
        """The report's ``resources`` object: a fresh sample first, then the peaks and the samples."""
        if not self._stopped.is_set():
            self.take()
        with self._lock:
            top = sorted(self._largest.values(), key=lambda p: (-p.rss_mb, p.pid))[:TOP]
            return {
                "interval_s": self.interval_s,
                "disk_path": str(self.folder),
                "disk_mount": str(mount_of(self.folder)),
                "disk_free_start_mb": self.disk_free_start_mb,
                "started_at": round(self.started_at, 1),
                **self._peaks,
                "largest": [asdict(p) for p in top],
                "samples": [asdict(s) for s in self.samples],
            }


def summary(record: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The record without its samples: what a gate reads to put numbers on a verdict."""
    if not record:
        return None
    return {k: v for k, v in record.items() if k != "samples"}


def disk_line(label: str, sampler: Sampler) -> str:
    """How much room the job had at its start (a hosted runner has ~14 GB), said once it is sure to build."""
    free = size(sampler.disk_free_start_mb)
    return f"{label}: {free} free on {mount_of(sampler.folder)} at the job's start (the work folder's disk)"
