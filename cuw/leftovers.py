"""What a killed job leaves running: its build, still working in the job folder.

A job runs its build in a session of its own (so it can stop the whole build on
an error or a SIGTERM), and ninja gives every compile a process group of its
own. A job killed with SIGKILL cannot stop anything: pip, CMake, ninja and the
compilers keep running, orphaned, and keep writing into the job folder. A new
run of the same job must not wipe that folder under them (the wipe fails, or
the orphans write into the new run's cache and seat log), so it finds every
process working inside the folder (its cwd is there: every build process
inherits one) and kills it first. Linux only (``/proc``); elsewhere a no-op.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .errors import CuwError

PROC = Path("/proc")


def working_in(folders: list[Path]) -> list[int]:
    """Processes (not this one nor its parent) whose current folder lies inside one of ``folders``."""
    if not PROC.is_dir():
        return []
    roots = [str(f.resolve()) for f in folders]
    me = {os.getpid(), os.getppid()}
    found = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit() or int(entry.name) in me:
            continue
        try:
            cwd = os.readlink(f"{PROC}/{entry.name}/cwd")  # a zombie has none: it is done
        except OSError:
            continue
        if any(cwd == root or cwd.startswith(root + os.sep) for root in roots):
            found.append(int(entry.name))
    return sorted(found)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    try:
        return (PROC / str(pid) / "stat").read_text().split(") ", 1)[1][:1] != "Z" if PROC.is_dir() else True
    except (OSError, IndexError):
        return False


def stop_orphans(folders: list[Path], what: str, timeout: float = 30.0) -> list[int]:
    """Kills every process working inside ``folders`` (an earlier, killed run's build) until none is left."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = working_in(folders)
        if not pids:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise CuwError(f"{what}: processes {', '.join(map(str, pids[:5]))} still work in {folders[0]} and did not "
                           "stop when killed; stop them and run again")  # fmt: skip
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
