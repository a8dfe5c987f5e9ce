"""Other processes on this machine: whether one is alive, and which carry a given environment
entry. One place for both, through psutil, so they mean the same everywhere and work on Windows."""

from __future__ import annotations

import os

import psutil


def pid_alive(pid: int) -> bool:
    """A process with this pid exists and has not finished (a zombie has: it only waits to be reaped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # it exists, owned by someone else


def with_environment(name: str, value: str) -> list[int]:
    """Processes other than this one whose environment has ``name=value`` (those we may read)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(name) == value:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue  # gone, not ours to read, or a zombie (done)
    return sorted(found)
