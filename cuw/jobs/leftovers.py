"""What a killed job leaves running: its build, still working in the job folder.

A job runs its build in a session of its own (so it can stop the whole build on
an error or a SIGTERM), and ninja gives every compile a process group of its
own. A job killed with SIGKILL cannot stop anything: pip, CMake, ninja and the
compilers keep running, orphaned, and keep writing into the job folder. A new
run of the same job must not wipe that folder under them (the wipe fails, or
the orphans write into the new run's cache and seat log), so it kills them
first. They are found by their environment: every process of a job's build
inherits ``CUDA_HOME=<the job's shadow CUDA_HOME>``, a path no other job and no
shell of the user's has (read through psutil: Linux, macOS and Windows).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cuw.base.errors import CuwError
from cuw.base.processes import with_environment


def job_processes(cuda_home: Path) -> list[int]:
    """Processes (not this one) whose environment has ``CUDA_HOME=cuda_home``: a job's build."""
    return with_environment("CUDA_HOME", str(cuda_home))


def stop_orphans(cuda_home: Path, what: str, timeout: float = 30.0) -> list[int]:
    """Kills every process of the build whose shadow CUDA_HOME is ``cuda_home``, until none is left."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = job_processes(cuda_home)
        if not pids:
            return sorted(killed)
        if time.monotonic() > deadline:
            raise CuwError(
                f"{what}: processes {', '.join(map(str, pids[:5]))} of an earlier build in "
                f"{cuda_home.parent} did not stop when killed; stop them and run again"
            )
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
