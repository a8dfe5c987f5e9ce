"""Running a build as a child process group: started, watched with progress from the seat log,
stopped with everything it started on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any, ContextManager, Iterator, Mapping, Optional

from cuw.base.errors import raise_terminated
from cuw.seat import seat_log
from cuw.jobs import frontend
from cuw.base.progress import Meter
from cuw.config.recipe import Recipe
from cuw.jobs.workspace import Workspace


from cuw.jobs.context import Progress


def spawn(cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    """A child in a process group of its own (POSIX), so it and everything it starts (the build
    backend, CMake, ninja, the compilers) can be stopped together, and a Ctrl-C reaches the forge first."""
    return subprocess.Popen(cmd, start_new_session=os.name == "posix", **kwargs)


def _signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Sends ``sig`` to the child's process group (the child alone off POSIX); False when none is left."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)
        else:
            return False
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    """Stops children started by :func:`spawn` and everything in their groups: terminate,
    wait up to ``grace`` seconds, then kill. Every child is reaped."""
    import signal

    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        # What is left of each group (a leader that ignored SIGTERM, a compiler it started) is killed.
        while _signal_group(proc, 0) and time.monotonic() < deadline and os.name == "posix":
            time.sleep(0.05)
        _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        proc.wait()


def _sigterm_raises() -> ContextManager[None]:
    """A context in which SIGTERM raises :class:`cuw.base.errors.Terminated`, so the build child is stopped
    and reaped on the way out (only the main thread can set a handler; elsewhere nothing changes)."""
    import contextlib
    import signal
    import threading

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        previous = signal.signal(signal.SIGTERM, raise_terminated)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    return scope()


def watch(
    proc: subprocess.Popen,
    ws: Workspace,
    label: str,
    owned: Optional[int],
    progress: Optional[Progress],
    poll_s: float = 1.0,
    count_host: bool = False,
) -> int:
    """Waits for the build child, printing progress from the seat log (read incrementally: only
    what was appended, a half-written last line waits for the next look). On any error or
    interrupt the child and its process group are stopped before the exception goes on.
    ``count_host``: host compiles count too (``owned`` counts them)."""
    reader = seat_log.LogReader(ws.seat_log, count_host=count_host)
    meter = Meter(f"{label}: compiled", owned, "TUs", say=progress) if progress is not None else None
    try:
        while True:
            try:
                rc = proc.wait(timeout=poll_s)
                if meter is not None:
                    meter.update(reader.compiled_count())
                    meter.close()
                return rc
            except subprocess.TimeoutExpired:
                pass
            if meter is not None:
                meter.update(reader.compiled_count())
    except BaseException:
        stop([proc])
        raise


def build(
    ws: Workspace,
    recipe: Recipe,
    env: dict[str, str],
    label: str,
    owned: Optional[int],
    progress: Optional[Progress],
    count_host: bool = False,
) -> int:
    project = ws.src / recipe.build_subdir
    system = frontend.build_system(project)  # refused already, before the job started, if broken (workspace.prepare)
    with _sigterm_raises():
        if recipe.pre_build:
            # Inside the seat and cache environment: its compiles are cached like the build's.
            with open(ws.build_log, "ab") as fh:
                fh.write(f"$ (pre_build) {recipe.pre_build}\n".encode())
                fh.flush()
                pre = spawn(
                    ["bash", "-c", recipe.pre_build],
                    env=env,
                    cwd=project,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
                rc = watch(pre, ws, label, owned, None)
            if rc != 0:
                return rc
        with open(ws.build_log, "ab") as fh:

            def run_hook(cmd: list[str], cwd: str, hook_env: Mapping[str, str]) -> int:
                fh.write(f"$ ({system.backend} build_wheel) {' '.join(cmd)}\n".encode())
                fh.flush()
                proc = spawn(cmd, env={**env, **hook_env}, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                return watch(proc, ws, label, owned, progress, count_host=count_host)

            def note(line: str) -> None:
                fh.write(f"cuw: {line}\n".encode())

            return frontend.build_wheel(project, ws.wheel_dir, system, run_hook, note)
