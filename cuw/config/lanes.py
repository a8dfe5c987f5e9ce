"""The lanes (a platform the farm builds wheels for): the one definition every other place reads.

A lane fixes its OS and machine, the platform suffix its wheels' tags end with, cibuildwheel's
target, the GitHub runner that builds it and its default compiler cache. The recipe schema's
lane names, the policy's default tools, finish, verify, the cibuildwheel driver and (checked by
tests/test_workflows.py) the workflow's ``runs-on`` all come from here.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from cuw.base.errors import InputError


@dataclass(frozen=True)
class Lane:
    name: str
    os: str
    """``linux`` or ``windows`` (cibuildwheel's --platform)."""
    machine: str
    """cibuildwheel's CIBW_ARCHS: ``x86_64``, ``aarch64``, ``AMD64``."""
    wheel_platform: str
    """What the wheel's platform tags end with: ``x86_64``, ``aarch64``, ``win_amd64``."""
    cibw_tag: str
    """The build identifier's platform part: ``manylinux_x86_64``, ``win_amd64``."""
    runner: str
    """The GitHub-hosted runner label that builds it."""
    cache_tool: str
    """The compiler cache it hands off by default (Windows: sccache, docs/compiler-caches.md)."""


LANES: dict[str, Lane] = {
    lane.name: lane
    for lane in (
        Lane("linux", "linux", "x86_64", "x86_64", "manylinux_x86_64", "ubuntu-24.04", "ccache"),
        Lane("linux_aarch64", "linux", "aarch64", "aarch64", "manylinux_aarch64", "ubuntu-24.04-arm", "ccache"),
        Lane("windows", "windows", "AMD64", "win_amd64", "win_amd64", "windows-2022", "sccache"),
    )
}
LANE_NAMES = tuple(LANES)


def lane(name: str) -> Lane:
    try:
        return LANES[name]
    except KeyError:
        raise InputError(f"unknown lane {name!r} (lanes: {', '.join(LANE_NAMES)})") from None


def linux_lane(machine: str) -> str:
    """The Linux lane of a machine name as Linux (``aarch64``) or a container engine (``arm64``) says it."""
    return "linux_aarch64" if machine.lower() in ("aarch64", "arm64") else "linux"


def local_lane() -> str:
    """The lane of this machine."""
    if sys.platform.startswith("win"):
        return "windows"
    return linux_lane(platform.machine())
