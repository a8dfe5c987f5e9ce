"""A cell's disk need against its runner's free disk: the one rule ``cuw matrix`` and ``cuw plan`` share.

The need is measured (a cost table's ``shard.disk_gb`` and ``link.disk_gb``, learned from the jobs'
reports by ``cuw costs``); the runner's free disk is policy (``runners.<lane>.free_disk_gb`` in
recipes/defaults.yml). A job whose need, with :data:`MARGIN` more, exceeds it gets the workflow's
free-disk step, which deletes the runner's large preinstalled folders (:data:`FREE_DISK_FOLDERS`)
before anything is installed. It acts on any Linux runner: on the bare runner it deletes them; a job
in its lane's build image (the workflow's ``container:``) cannot see the host's folders, so its
matrix row carries the container options that mount them at :data:`HOST_MOUNT`, and the step empties
them there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from cuw.config.lanes import lane as lane_of
from cuw.config.policy import Runner
from cuw.partition.costs import CostTable

FREE_DISK_FOLDERS = (
    "/usr/local/lib/android",
    "/usr/share/dotnet",
    "/opt/ghc",
    "/usr/local/.ghcup",
    "/opt/hostedtoolcache/CodeQL",
    "/usr/local/share/boost",
)
"""The hosted Linux runner's large preinstalled folders the forge never uses (Android SDK, .NET,
Haskell, CodeQL's bundles, Boost: together well over 14 GB on ubuntu-24.04). The tool cache's
Pythons stay: setup-python reads them. ``.github/scripts/free-disk.sh`` holds the same list (a test
holds the two equal)."""

HOST_MOUNT = "/cuw-host"
"""Where a job in a build image sees :data:`FREE_DISK_FOLDERS` (``/cuw-host/usr/share/dotnet``...)."""


def container_mounts(host_root: str = "") -> str:
    """The job container's options that mount every folder of :data:`FREE_DISK_FOLDERS` at
    :data:`HOST_MOUNT` for the free-disk step (``host_root``: a prefix of the host's paths, "" on a runner)."""
    return " ".join(f"-v {host_root}{folder}:{HOST_MOUNT}{folder}" for folder in FREE_DISK_FOLDERS)


MARGIN = 0.25
"""What the need is raised by before it is compared: one build's measure, taken from the forge job's
start, leaves out what the steps before it install (the CUDA toolkit, the forge, torch's wheels) and
varies with what the cache and the sources take from run to run."""


def needs_free_disk(need_gb: Optional[float], runner: Optional[Runner]) -> bool:
    """Whether a job that used ``need_gb`` (None: never measured) needs more than ``runner`` has free
    (None, or no ``free_disk_gb``: the farm does not know, so no)."""
    if need_gb is None or runner is None or runner.free_disk_gb is None:
        return False
    return need_gb * (1 + MARGIN) > runner.free_disk_gb


@dataclass(frozen=True)
class DiskNeed:
    """A cell's measured disk need per job kind (GB; None: not measured) on a lane's runner."""

    shard_gb: Optional[float]
    link_gb: Optional[float]
    runner: Optional[Runner]
    linux: bool
    """The jobs run on a Linux runner (bare or in a build image): where the free-disk step can act."""

    def free_disk(self, kind: str) -> bool:
        """Whether a ``kind`` job (shard, link; a build job is both) gets the free-disk step."""
        return self.linux and self.exceeds(kind)

    def exceeds(self, kind: str) -> bool:
        """Whether a ``kind`` job's need with its margin exceeds the runner's free disk, wherever it runs."""
        needs = {"shard": [self.shard_gb], "link": [self.link_gb], "build": [self.shard_gb, self.link_gb]}[kind]
        return any(needs_free_disk(need, self.runner) for need in needs)


def disk_need(table: Optional[CostTable], runner: Optional[Runner], linux: bool) -> DiskNeed:
    """The need ``table`` measured (none without a table) on ``runner``; ``linux``: the jobs run on a
    Linux runner."""
    shard = table.shard.disk_gb if table is not None and table.shard is not None else None
    link = table.link.disk_gb if table is not None and table.link is not None else None
    return DiskNeed(shard, link, runner, linux)


def on_linux_runner(lane: str) -> bool:
    """Whether ``lane``'s jobs run on a Linux runner, where the free-disk step frees the host's folders."""
    return lane_of(lane).os == "linux"


def _used(kind: str, value: Optional[float]) -> str:
    return f"{kind} used {value:.2f} GB" if value is not None else f"{kind}'s use not measured"


def disk_line(need: DiskNeed, lane: str, image: str) -> str:
    """What ``cuw plan`` says of the disk: each job's need, the runner's free disk, and whether the
    free-disk step runs (and why not where it cannot)."""
    if need.shard_gb is None and need.link_gb is None:
        return (
            "disk: not measured (cuw costs <recipe> --from <shard and link reports> learns it): the free-disk step does not run"
        )
    said = f"disk: a {_used('shard', need.shard_gb)}, the {_used('link', need.link_gb)}"
    runner = need.runner
    if runner is None or runner.free_disk_gb is None:
        return f"{said}; lane {lane}'s runner has no free_disk_gb in the policy (runners.{lane}): the free-disk step never runs"
    held = f"{said}; with {MARGIN:.0%} margin against lane {lane}'s {runner.free_disk_gb} GB free"
    over = [kind for kind in ("shard", "link") if need.exceeds(kind)]
    if not over:
        return f"{held}: it fits, the free-disk step does not run"
    jobs = " and ".join(f"{kind} jobs" for kind in over)
    if not need.linux:
        return f"{held}: the {jobs} need more, but run on a {lane} runner that is not Linux, where the free-disk step cannot act"
    if image:
        return (
            f"{held}: the {jobs} need more; the free-disk step runs on them (in the build image {image}, "
            f"it empties the runner's preinstalled folders, mounted at {HOST_MOUNT})"
        )
    return f"{held}: the {jobs} need more; the free-disk step runs on them (it deletes the runner's preinstalled folders)"
