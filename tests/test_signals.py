"""SIGTERM, the signal a CI cancel and `timeout` send: every verb ends with one `cuw:` line and
exit 143, what it started is stopped, and no temporary file is left half-written.

These tests pass however pytest was started: each verb is started while the test process ignores
SIGINT, as a background job (``nohup nox -s tests &``, ``( trap '' INT; pytest )``) and many CI
agents start it, through :func:`conftest.start_child`, which gives the child SIGINT at its default."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, catch_ignored_sigint, start_child
from cuw.base import files
from cuw.base.errors import Terminated


def _silent_server() -> tuple[socket.socket, int, list[socket.socket]]:
    """A server that accepts connections and never answers (a hung index); ``held`` fills as
    clients connect, so a test knows the verb is waiting on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(8)], daemon=True).start()
    return server, server.getsockname()[1], held


def _front(front: str, port: int) -> list[str]:
    """The same verb (a matrix that waits on a silent index) through each front end."""
    url = f"http://127.0.0.1:{port}"
    return {
        "cuw": [str(Path(sys.executable).parent / "cuw"), "matrix", "--package", "example", "--published", url],
        "python -m cuw": [sys.executable, "-m", "cuw", "matrix", "--package", "example", "--published", url],
        "nox": [sys.executable, "-m", "nox", "-s", "matrix", "--", "--package", "example", "--published", url],
        "invoke": [sys.executable, "-m", "invoke", "matrix", "--package", "example", "--published", url],
    }[front]


def _verbs_left(port: int) -> list[str]:
    """Processes still running the verb (its command line names the silent server's port)."""
    left = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"127.0.0.1:{port}" in cmdline and "-m cuw" in cmdline:
            left.append(f"{proc.name}: {cmdline}")
    return left


@contextmanager
def _sigint_ignored_here() -> Iterator[None]:
    """This process ignores SIGINT meanwhile, as one started as a background job does (its children
    inherit that through exec unless they are started with it at its default)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_waiting(front: str, as_started: tuple[str, ...] = ()) -> tuple[subprocess.Popen, socket.socket, int]:
    """The verb through ``front`` (after ``as_started``, a command that execs it), in a session of its
    own, once it waits on the silent server. Started while this process ignores SIGINT."""
    server, port, held = _silent_server()
    with _sigint_ignored_here():
        proc = start_child(
            [*as_started, *_front(front, port)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while not held and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # parsing, planning, then the read that never returns
    assert held and proc.poll() is None, proc.communicate()
    return proc, server, port


SIGNALS = {"SIGTERM": (signal.SIGTERM, 143, "cuw: terminated (SIGTERM)"), "SIGINT": (signal.SIGINT, 130, "cuw: interrupted")}


@pytest.mark.parametrize("signame", sorted(SIGNALS))
@pytest.mark.parametrize("front", ["cuw", "python -m cuw", "nox", "invoke"])
def test_a_signal_while_a_verb_waits_ends_in_one_line_and_its_code_through_every_front_end(front, signame):
    """A CI cancel (SIGTERM) or Ctrl-C sent to whatever CI or a person started: the verb ends with
    one ``cuw:`` line and 143 or 130, and no verb is left running behind a wrapper that died."""
    sig, code, line = SIGNALS[signame]
    proc, server, port = _start_waiting(front)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    server.close()
    assert proc.returncode == code, err
    assert [x for x in err.splitlines() if x.startswith("cuw:")] == [line] or (
        len([x for x in err.splitlines() if x.startswith("cuw:")]) == 1 and err.count(line) == 1
    ), err
    assert "Traceback" not in err and out == "", (out, err)
    time.sleep(0.5)
    assert _verbs_left(port) == []


def test_ctrl_c_at_a_terminal_reaches_the_verb_behind_nox_once():
    """A terminal's Ctrl-C goes to the whole foreground group: the verb, in a group of its own,
    hears it once (through nox), not twice, and ends the way it ends alone."""
    proc, server, port = _start_waiting("nox")
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    server.close()
    assert proc.returncode == 130 and err.count("cuw: interrupted") == 1 and "Traceback" not in err, err
    assert _verbs_left(port) == []


# A wrapper started with SIGINT ignored, as `nohup nox -s matrix -- … &` starts it: sh ignores it, then execs.
IGNORING_SIGINT = ("sh", "-c", 'trap "" INT; exec "$@"', "sh")


def test_the_child_start_gives_sigint_back_its_default():
    """The control for the case below: what :func:`conftest.start_child` starts hears SIGINT; what
    a shell that ignores it starts has it ignored (the case the wrappers must handle themselves)."""
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"]

    def ignored(*cmd: str) -> str:
        return start_child([*cmd, *probe], stdout=subprocess.PIPE, text=True).communicate(timeout=60)[0].strip()

    with _sigint_ignored_here():
        plain, ignoring = ignored(), ignored(*IGNORING_SIGINT)
    assert (plain, ignoring) == ("False", "True")
    # As a test process started ignoring SIGINT runs (conftest.catch_ignored_sigint): caught, passed over.
    with _sigint_ignored_here():
        catch_ignored_sigint()
        assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # passed over: no KeyboardInterrupt here
        assert (ignored(), ignored(*IGNORING_SIGINT)) == ("False", "True")


@pytest.mark.parametrize("front", ["nox", "invoke"])
def test_a_wrapper_started_ignoring_sigint_still_passes_a_sigint_to_the_verb_once(front):
    """`nohup nox -s … &` and many CI agents start the wrapper with SIGINT ignored: a SIGINT sent to it
    (kill -INT) still reaches the verb, once, with SIGINT at its default there: one line and 130."""
    proc, server, port = _start_waiting(front, IGNORING_SIGINT)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    server.close()
    assert proc.returncode == 130 and err.count("cuw: interrupted") == 1 and "Traceback" not in err, err
    time.sleep(0.5)
    assert _verbs_left(port) == []


def test_a_write_cut_by_sigterm_leaves_neither_the_file_nor_its_temporary(tmp_path):
    dest = tmp_path / "out" / "report.json"
    dest.parent.mkdir()

    def fill(tmp: str) -> None:
        Path(tmp).write_text("half a report")
        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, as a CI cancel would be
        time.sleep(5)

    previous = signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(Terminated()))
    try:
        with pytest.raises(Terminated) as info:
            files._replace(dest, "report", fill)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert info.value.code == 143
    assert list(dest.parent.iterdir()) == [], "no report, no temporary beside it"
