"""SIGTERM, the signal a CI cancel and `timeout` send: every verb ends with one `cuw:` line and
exit 143, what it started is stopped, and no temporary file is left half-written."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO
from cuw.base import files
from cuw.base.errors import Terminated


def _silent_server() -> tuple[socket.socket, int]:
    """A server that accepts connections and never answers (a hung index)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(8)], daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.parametrize("front", ["python -m cuw", "cuw"])
def test_sigterm_while_a_verb_waits_ends_in_one_line_and_143(front, tmp_path):
    server, port = _silent_server()
    exe = [sys.executable, "-m", "cuw"] if front == "python -m cuw" else [str(Path(sys.executable).parent / "cuw")]
    proc = subprocess.Popen(
        [*exe, "matrix", "--package", "example", "--published", f"http://127.0.0.1:{port}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3.0)  # parsing, planning, then the read that never returns
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    server.close()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("cuw: terminated (SIGTERM)") and "Traceback" not in err
    assert out == ""


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
