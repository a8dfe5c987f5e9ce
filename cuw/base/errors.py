"""The ways a forge command fails, each kind with its own exit code.

Raise the kind that says what went wrong (tests match the kind, not the prose); every kind is a
:class:`CuwError`, so a caller that handles any failure keeps handling it. The exit codes are
listed, class by class, in docs/verbs.md ("Exit codes and errors"; tests/test_errors.py holds
that table equal to these classes).
"""

from __future__ import annotations


INTERNAL_ERROR_EXIT = 70
"""A bug in the forge itself (sysexits' ``EX_SOFTWARE``): its own code, so a caller tells a bug from a
typo (2); the one line names the crash log that holds the traceback."""


class CuwError(Exception):
    """Bad input or a broken environment: one clear line, exit 2. The base of every kind below;
    raised as itself where no kind fits (a full disk, an unreachable index)."""

    exit_code = 2


class InputError(CuwError):
    """Input the user gave is wrong: a recipe, a file, an option or its value (exit 2). The line
    names the file or option and the fix."""


class ToolError(CuwError):
    """A tool the forge runs is missing, hung or broken (a CUDA toolkit, the cache tool, a
    container engine, act), or a check cannot run on this machine (exit 2)."""


class OutputError(CuwError, OSError):
    """A result with nowhere to go: standard output closed or full, an output file or folder that
    cannot be written (exit 2). Also an :class:`OSError`, as a failed write always was, for code
    that handles one."""


class GateFailure(CuwError):
    """A build ran but a gate refused its result (or a check found what it looks for): exit 1. Every
    verb that ends in such a refusal raises it. ``said``: the verdict is already on the terminal (a
    gate's FAIL line, the findings), so the boundary adds no line of its own."""

    exit_code = 1

    def __init__(self, message: str, said: bool = False) -> None:
        super().__init__(message)
        self.said = said


def refused_unless(ok: bool, what: str) -> int:
    """0 when ``ok``; else :class:`GateFailure` for ``what``, whose verdict the verb has said."""
    if not ok:
        raise GateFailure(what, said=True)
    return 0


class Terminated(SystemExit):
    """SIGTERM (a CI cancel, ``timeout``, ``cuw build`` stopping its shards): raised where the
    process is, so it unwinds like Ctrl-C (children stopped, temporary files removed); exit 143."""

    exit_code = 143

    def __init__(self) -> None:
        super().__init__(self.exit_code)


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler that turns the signal into :class:`Terminated`."""
    raise Terminated()
