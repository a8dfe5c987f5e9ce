"""``cuw``: the command line every entry point (nox, invoke, CI) goes through, and its one
error boundary."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional, TextIO, TypeVar

from cuw.base.errors import INTERNAL_ERROR_EXIT, CuwError, GateFailure, OutputError, Terminated, raise_terminated
from cuw.base.settings import Settings


def _one_line(message: str) -> str:
    """An error message as one line (a YAML or subprocess message may span several)."""
    return " ".join(message.split())


def _crash_log(exc: BaseException, settings: Settings) -> Optional[Path]:
    """Writes the traceback of an internal error to a log file; returns its path."""
    import tempfile
    import time
    import traceback

    folder = Path(settings.log_dir or tempfile.gettempdir())
    path = folder / f"cuw-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        path.write_text(f"cuw {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


_T = TypeVar("_T")


class _NamedOutput:
    """Standard output whose failures say they are standard output's (a full disk behind a
    redirect, a closed pipe), and, when the process started without one, a write that says so
    instead of vanishing (Python drops every print when fd 1 was closed)."""

    def __init__(self, stream: Optional[TextIO]) -> None:
        self._stream = stream
        self.failed: Optional[OutputError] = None
        """The first write that failed, kept: argparse swallows an OSError while printing --help."""

    def _open(self) -> TextIO:
        if self._stream is None:
            self.failed = self.failed or OutputError("standard output is closed; the result had nowhere to go")
            raise self.failed
        return self._stream

    def _named(self, call: Callable[..., _T], *args: Any) -> _T:
        try:
            return call(*args)
        except OSError as exc:
            self.failed = self.failed or OutputError(f"cannot write to standard output ({exc.strerror or exc})")
            raise self.failed from None

    def write(self, text: str) -> int:
        return self._named(self._open().write, text)

    def flush(self) -> None:
        if self._stream is not None:
            self._named(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Optional[list[str]] = None) -> int:
    """The one error boundary: exit 0 pass, 1 a gate refused the result, 2 bad input or environment,
    70 a bug in the forge (the line names its crash log).

    Whatever goes wrong ends in one line on stderr; an internal bug says so and leaves its
    traceback in a log file instead of on the terminal.
    """
    plain = sys.stdout
    sys.stdout = _NamedOutput(plain)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, raise_terminated)  # unwinds like Ctrl-C
    try:
        return _run_once(argv)
    finally:
        sys.stdout = plain
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_once(argv: Optional[list[str]]) -> int:
    settings = Settings.from_env()  # the run's configuration: read here, once, and passed down
    try:
        # Imported here, after main() installed the SIGTERM handler: the verbs' imports take the
        # better part of the start-up, and a CI cancel in it must still end in one line and 143.
        from cuw.cli.verbs import run

        try:
            code = run(sys.argv[1:] if argv is None else argv, settings)
        except SystemExit as exc:  # --help: argparse printed it and exits 0, even when it went nowhere
            if exc.code not in (0, None):
                raise
            code = 0
        sys.stdout.flush()  # a full or broken stdout must not pass for a written result
        failed = getattr(sys.stdout, "failed", None)
        if failed is not None:
            raise failed
        return code
    except GateFailure as exc:  # a refusal: said once, by its verdict or here
        if not exc.said:
            print(f"cuw: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except CuwError as exc:
        print(f"cuw: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cuw: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("cuw: terminated (SIGTERM); what was started is stopped, nothing is half-written", file=sys.stderr)
        return 143
    except OSError as exc:  # the environment: a full disk, a read-only folder, a vanished file
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"cuw: error: {_one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug must still end in one line
        log = _crash_log(exc, settings)
        where = f"traceback in {log}" if log else "no log could be written"
        print(
            f"cuw: internal error (a bug in the forge, please report it): {type(exc).__name__}: {_one_line(str(exc))} ({where})",
            file=sys.stderr,
        )
        return INTERNAL_ERROR_EXIT
