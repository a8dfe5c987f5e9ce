"""The two ways a forge command fails, each with its own exit code."""

from __future__ import annotations


class CuwError(Exception):
    """Bad input or a broken environment: one clear line, exit 2."""

    exit_code = 2


class GateFailure(CuwError):
    """A build ran but a gate refused its result: exit 1."""

    exit_code = 1
