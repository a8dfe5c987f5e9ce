"""How the nox sessions and invoke tasks run a verb: ``python -m cuw VERB ...`` as a child whose
exit code becomes theirs, with Ctrl-C and SIGTERM passed on to it exactly once.

nox and invoke die of a SIGTERM by default and leave the verb running without them; nox also
turns every failure into 1. Here the child gets a process group of its own, so a terminal's
Ctrl-C (sent to the foreground group) or a CI cancel (sent to the wrapper) reaches the verb
once, through the wrapper, and the verb ends the way it would alone: one ``cuw:`` line, its
children stopped, and exit 130 or 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Optional

FORWARDED = (signal.SIGINT, signal.SIGTERM)


def _own_group() -> None:
    """In the verb's child, before it runs: a process group of its own (``process_group=0`` from
    Python 3.11 only), and SIGINT at its default. A wrapper started where SIGINT is ignored (a
    background job, ``nohup``, many CI agents) would hand the verb an ignored SIGINT, and Python
    then never raises KeyboardInterrupt: the Ctrl-C forwarded to it would be lost."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_verb(argv: list[str]) -> int:
    """Runs ``python -m cuw *argv`` and returns its exit code (a signal death as 128 + signal)."""
    child = subprocess.Popen([sys.executable, "-m", "cuw", *argv], preexec_fn=_own_group if os.name == "posix" else None)

    def forward(signum: int, frame: Optional[FrameType]) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        while True:
            try:
                rc = child.wait()
                break
            except KeyboardInterrupt:  # a handler replaced ours meanwhile: pass it on and keep waiting
                forward(signal.SIGINT, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc
