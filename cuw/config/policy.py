"""Farm-wide policy (``recipes/defaults.yml``), loaded as strictly as a recipe."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional


from cuw.toolchain.cache import tool_class
from cuw.config.grid import Archs, Grid
from cuw.base.errors import CuwError, InputError
from cuw.base.settings import Settings
from cuw.base.yamlfile import read_yaml
from cuw.config.lanes import LANES
from cuw.config.schema import load_dataclass
from cuw.toolchain.provision import NO_NVCC_WHEEL, check_pins

Tool = Literal["ccache", "sccache"]


def _default_tools() -> dict[str, str]:
    return {name: lane.cache_tool for name, lane in LANES.items()}


@dataclass(frozen=True)
class CachePolicy:
    tool: dict[str, str] = field(default_factory=_default_tools)
    remote: Optional[str] = None


@dataclass(frozen=True)
class BuildImage:
    ref: str
    """The image every shard and link job of the lane runs in, pinned by digest (``name@sha256:…``)."""
    floor: str
    """The manylinux tag that image yields (``manylinux_2_28_x86_64``): what its glibc allows, which
    a job inside it computes and checks against this (:mod:`cuw.toolchain.builder`)."""


@dataclass(frozen=True)
class Runner:
    """The machine a lane's shard and link jobs run on: what a shard's parallel compile jobs must fit."""

    memory_gb: int
    """Its memory (GitHub's hosted runners: 16 GB)."""
    cores: int
    """Its cores (GitHub's hosted runners: 4): the most parallel compile jobs the planner assumes."""
    headroom_gb: int = 2
    """Memory kept free of compiles: the system, the build's own Python, ninja and the link steps."""
    free_disk_gb: Optional[int] = None
    """Free disk (GB) at a job's start (GitHub's hosted Linux runners: 14). A cell whose measured disk
    need, with its margin, is more gets the workflow's free-disk step (:mod:`cuw.partition.disk_need`);
    None: the farm does not know, and the step never runs."""

    @property
    def budget_mb(self) -> float:
        """What the compiles' peaks may sum to."""
        return (self.memory_gb - self.headroom_gb) * 1024


@dataclass(frozen=True)
class WheelPolicy:
    exclude: list[str] = field(default_factory=list)
    """Libraries never grafted into a wheel (the CUDA runtime and driver, torch)."""
    max_size_mb: dict[str, int] = field(default_factory=dict)
    """Per lane, the largest wheel (MB) the index it publishes to accepts; verify fails above it."""
    cuda_runtime_rpath: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line, the folders (relative to site-packages) where NVIDIA's runtime wheels put the
    CUDA libraries (``nvidia/cu13/lib``). A torch-free wheel's ELF files that need one of the excluded
    CUDA libraries get an ``$ORIGIN``-relative RPATH to each, so pip-installed nvidia-* wheels are
    found without LD_LIBRARY_PATH (a torch-linked wheel gets them through torch, which loads them)."""
    variants: bool = False
    """Wheel variants (PEP 825, a draft; opt-in): each wheel gets ``*.dist-info/variant.json`` naming its
    CUDA line (``nvidia :: cuda_version_lower_bound``) and the SASS/PTX the verify gate lists (``nvidia ::
    sm_arch``), a variant label in its file name (``-cu130_<hash>.whl``), and the index a
    ``{name}-{version}-variants.json``. Only an installer that reads variants (uv with ``--preview-features
    wheel-variants``) installs such a wheel; pip skips it (docs/finish-verify-publish.md)."""


@dataclass(frozen=True)
class JobPolicy:
    """How long a shard or link job may run: the one place for the job cap (``cuw plan``, ``cuw matrix``)."""

    limit_minutes: int = 355
    """Every compile and link job's ``timeout-minutes`` in .github/workflows/build.yml (a test holds them
    equal): under GitHub's 6 h (360 min) cap on a hosted job."""
    margin_minutes: int = 20
    """Of the limit, what a shard job spends beside its build: its container and setup steps before,
    packing and uploading its archive after. A shard's build gets the rest; its deadline is there."""


@dataclass(frozen=True)
class Policy:
    grid: Grid = field(default_factory=Grid)
    archs: Archs = field(default_factory=Archs)
    cache: CachePolicy = field(default_factory=CachePolicy)
    wheel: WheelPolicy = field(default_factory=WheelPolicy)
    torch_index: dict[str, str] = field(default_factory=dict)
    """Per CUDA line, the simple index publishing its torch wheels (``cuw grid --check`` asks it)."""
    toolkits: dict[str, str] = field(default_factory=dict)
    """Per CUDA line, its toolkit: ``system`` (found as before; the default), ``wheels`` (provisioned
    from ``toolkit_wheels``) or the path of a toolkit folder (holding ``bin/nvcc``)."""
    toolkit_wheels: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line (13 and later), the exact pins of NVIDIA's wheels that make its toolkit."""
    images: dict[str, BuildImage] = field(default_factory=dict)
    """Per Linux lane, the build image its jobs run in and the floor it yields."""
    runners: dict[str, Runner] = field(default_factory=dict)
    """Per lane, the runner's size: a shard's parallel compile jobs are chosen so the predicted
    peak memory fits it (:func:`cuw.partition.parallel_jobs.choose_jobs`). A lane without one keeps
    one job per core."""
    jobs: JobPolicy = field(default_factory=JobPolicy)
    """The job cap: a job's limit and the margin a shard keeps after its deadline."""


def load_policy(recipes_dir: Path) -> Policy:
    path = recipes_dir / "defaults.yml"
    if not path.exists() and not path.is_symlink():
        if os.path.lexists(recipes_dir):  # a FIFO or a file where the folder belongs: refused, not read as empty
            from cuw.config.recipe import check_recipes_dir

            check_recipes_dir(recipes_dir)
        return Policy()
    data = read_yaml(path, "farm policy") or {}
    policy = load_dataclass(Policy, data, str(path))
    from cuw.config.recipe import check_arch

    for line, archs in [*policy.archs.cuda.items(), *policy.archs.aarch64.items()]:
        for arch in archs:
            check_arch(arch, f"{path}: archs ({line})")
    for lane, limit in policy.wheel.max_size_mb.items():
        if not limit > 0:
            raise InputError(f"{path}: wheel.max_size_mb.{lane} = {limit!r} is not a size in MB > 0")
    for line, pins in policy.toolkit_wheels.items():
        check_pins(line, pins, f"{path}: toolkit_wheels.{line}")
    for line, choice in policy.toolkits.items():
        check_toolkit_choice(choice, f"{path}: toolkits.{line}")
        if choice == "wheels" and line not in policy.toolkit_wheels:
            major = line.split(".")[0]
            if major.isdigit() and int(major) < 13:
                raise InputError(
                    f"{path}: toolkits.{line} = wheels: {NO_NVCC_WHEEL.format(major=major, line=line)}; "
                    f"set it to system or a toolkit path"
                )
            raise InputError(
                f"{path}: toolkits.{line} = wheels but toolkit_wheels has no {line!r} pins; add them "
                f"(nvidia-cuda-nvcc=={line}.*'s release and its companions) or use system"
            )
    for line, folders in policy.wheel.cuda_runtime_rpath.items():
        for folder in folders:
            parts = folder.replace("\\", "/").split("/")
            if not folder or folder.startswith(("/", "$")) or ".." in parts or ":" in folder:
                raise InputError(
                    f"{path}: wheel.cuda_runtime_rpath.{line}: {folder!r} must be a folder relative to "
                    "site-packages, like nvidia/cu13/lib (no '..', no absolute path, no $ORIGIN)"
                )
    for lane, image in policy.images.items():
        check_image_policy(lane, image, f"{path}: images.{lane}")
    for lane, runner in policy.runners.items():
        check_runner(lane, runner, f"{path}: runners.{lane}")
    check_job_policy(policy.jobs, f"{path}: jobs")
    from cuw.config.grid import check_torch_rows

    check_torch_rows(policy.grid, str(path))
    for platform in policy.grid.platforms:
        if platform not in LANES:
            raise InputError(f"{path}: grid.platforms names {platform!r}, no lane of the forge (lanes: {', '.join(LANES)})")
    for lane, tool in policy.cache.tool.items():
        try:
            tool_class(tool)
        except CuwError as exc:
            raise InputError(f"{path}: cache.tool.{lane}: {exc}") from None
    return policy


@dataclass(frozen=True)
class CacheChoice:
    tool: str
    remote: Optional[str]


def cache_choice(
    policy: Policy, lane: str, settings: Settings, tool: Optional[str] = None, remote: Optional[str] = None
) -> CacheChoice:
    """The lane's cache tool and remote: command line, then the run's $CUW_CACHE_TOOL /
    $CUW_CACHE_REMOTE (``settings``), then the policy."""
    chosen_tool = tool or settings.cache_tool or policy.cache.tool.get(lane, "ccache")
    tool_class(chosen_tool)
    chosen_remote = remote or settings.cache_remote or policy.cache.remote
    if chosen_remote:
        source = "--cache-remote" if remote else "$CUW_CACHE_REMOTE" if settings.cache_remote else "cache.remote"
        check_remote_url(chosen_remote, source)
    return CacheChoice(chosen_tool, chosen_remote or None)


def check_remote_url(url: str, source: str) -> None:
    """The remote's URL is well formed (scheme, port), checked before anything is created or reached."""
    from urllib.parse import urlparse

    parsed = urlparse(url.split("|", 1)[0])
    if parsed.scheme not in ("redis", "http", "https", "file"):
        raise InputError(
            f"{source} {url!r}: unsupported scheme {parsed.scheme!r} (use redis://host:port, http(s)://host/path or file:/folder)"
        )
    try:
        parsed.port
    except ValueError as exc:
        raise InputError(f"{source} {url!r}: {exc} (a port is 1..65535)") from None
    if parsed.scheme != "file" and not parsed.hostname:
        raise InputError(f"{source} {url!r}: no host (for example redis://localhost:6379)")


def check_runner(lane: str, runner: Runner, source: str) -> None:
    """A known lane, a memory above its headroom, at least one core, a free disk of at least 1 GB."""
    from cuw.config.lanes import lane as lane_of

    try:
        lane_of(lane)
    except CuwError as exc:
        raise InputError(f"{source}: {exc}") from None
    if not runner.cores >= 1:
        raise InputError(f"{source}.cores = {runner.cores!r}: a runner has at least 1 core")
    if runner.free_disk_gb is not None and not runner.free_disk_gb >= 1:
        raise InputError(f"{source}.free_disk_gb = {runner.free_disk_gb!r}: whole GB >= 1 (GitHub's hosted Linux runners: 14)")
    if not 0 <= runner.headroom_gb < runner.memory_gb:
        raise InputError(
            f"{source}: memory_gb {runner.memory_gb!r} must exceed headroom_gb {runner.headroom_gb!r} (>= 0): "
            "give the runner's memory in GB (GitHub's hosted runners: 16)"
        )


def check_image_policy(lane: str, image: BuildImage, source: str) -> None:
    """A Linux lane, an image pinned by digest, and a floor of that lane's architecture."""
    import re

    from cuw.config.lanes import lane as lane_of

    known = lane_of(lane)
    if known.os != "linux":
        raise InputError(f"{source}: only Linux lanes run in a build image (lane {lane} is {known.os})")
    check_pinned(image.ref, f"{source}.ref")
    if not re.fullmatch(rf"manylinux_\d+_\d+_{re.escape(known.wheel_platform)}", image.floor):
        raise InputError(f"{source}.floor {image.floor!r}: a manylinux_X_Y_{known.wheel_platform} tag")


# An image name as the engines read it: [registry[:port]/]path[:tag], path parts of a-z 0-9 joined by . _ __ -.
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_NAME = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*(?::[\w][\w.-]{{0,127}})?"


def check_pinned(ref: str, source: str) -> None:
    """An image reference pinned by digest (``name@sha256:<64 hex>``): a tag can move under the farm."""
    import re

    name, at, digest = ref.rpartition("@")
    if not at or not digest.startswith("sha256:"):
        raise InputError(
            f"{source} {ref!r}: pin the image by digest (name@sha256:<64 hex digits>): a tag can move under the farm"
        )
    if not re.fullmatch(r"[0-9a-f]{64}", digest[len("sha256:") :]):
        raise InputError(
            f"{source} {ref!r}: the digest after @sha256: is 64 lowercase hex digits "
            f"(this one has {len(digest) - len('sha256:')} characters)"
        )
    if not re.fullmatch(IMAGE_NAME, name):
        why = "an image name is lowercase" if name != name.lower() else f"{name!r} is not an image name"
        raise InputError(
            f"{source} {ref!r}: {why} ([registry[:port]/]path[:tag]@sha256:<digest>, path parts of a-z and 0-9 joined by . _ -)"
        )


def image_overrides(values: list[str], policy: "Policy", source: str = "--image") -> dict[str, str]:
    """``LANE=REF`` (repeated or comma-separated): the build image of each named Linux lane for this
    plan instead of images.<lane>.ref; pinned by digest like the policy's own (a local stand-in
    pushed to a registry here)."""
    from cuw.config.lanes import lane as lane_of

    out: dict[str, str] = {}
    for item in (v.strip() for value in values for v in value.split(",")):
        lane, sep, ref = (part.strip() for part in item.partition("="))
        if not sep or not lane or not ref:
            raise InputError(f"{source} {item!r}: LANE=REF (for example linux=registry/image@sha256:<digest>)")
        try:
            known = lane_of(lane)
        except CuwError as exc:
            raise InputError(f"{source} {item!r}: {exc}") from None
        if known.os != "linux":
            raise InputError(f"{source} {item!r}: only Linux lanes run in a build image")
        if lane in out:
            raise InputError(f"{source}: lane {lane} is given twice")
        check_pinned(ref, f"{source} for lane {lane}:")
        out[lane] = ref
    return {**{lane: image.ref for lane, image in policy.images.items()}, **out}


LIMIT_MOST_MINUTES = 7200
"""The longest job limit the forge takes (jobs.limit_minutes, plan --cap): GitHub's own cap on a self-hosted job."""


def check_job_policy(jobs: JobPolicy, source: str) -> None:
    """A limit in minutes and a margin that leaves a shard some build time before its deadline."""
    if not 0 < jobs.limit_minutes <= LIMIT_MOST_MINUTES:
        raise InputError(
            f"{source}.limit_minutes = {jobs.limit_minutes}: minutes, 1..{LIMIT_MOST_MINUTES} (GitHub-hosted jobs stop at 360)"
        )
    if not 0 <= jobs.margin_minutes < jobs.limit_minutes:
        raise InputError(
            f"{source}.margin_minutes = {jobs.margin_minutes}: minutes, at least 0 and under limit_minutes "
            f"({jobs.limit_minutes}), or a shard has no time to build"
        )


def check_toolkit_choice(choice: str, source: str) -> None:
    """``system``, ``wheels`` or an absolute path (a toolkit folder)."""
    if choice in ("system", "wheels"):
        return
    if not choice or not Path(choice).is_absolute():
        raise InputError(f"{source} = {choice!r}: use system, wheels or the absolute path of a toolkit folder (holding bin/nvcc)")
