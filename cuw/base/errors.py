"""The ways a forge command fails, each with its own exit code."""

from __future__ import annotations


class CuwError(Exception):
    """Bad input or a broken environment: one clear line, exit 2."""

    exit_code = 2


class GateFailure(CuwError):
    """A build ran but a gate refused its result: exit 1."""

    exit_code = 1


class Terminated(SystemExit):
    """SIGTERM (a CI cancel, ``timeout``, ``cuw build`` stopping its shards): raised where the
    process is, so it unwinds like Ctrl-C (children stopped, temporary files removed); exit 143."""

    def __init__(self) -> None:
        super().__init__(143)


def raise_terminated(signum: int, frame: object) -> None:
    """The SIGTERM handler that turns the signal into :class:`Terminated`."""
    raise Terminated()
