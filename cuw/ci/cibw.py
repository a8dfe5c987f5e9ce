"""The cibuildwheel backend: one shard or link job of a cell, built by cibuildwheel.

cibuildwheel builds a wheel per build identifier, in a manylinux container on
Linux and on the host on Windows. The forge gives it a small *driver* project
whose PEP 517 backend (:mod:`cuw.cli.cibw_backend`) runs the forge's own
``python -m cuw shard|link`` in the build Python, so the seat, the compiler
cache and the gates are the ones every other job uses; cibuildwheel only
supplies the image, the Python and the toolkit install.

The whole configuration is the driver's ``pyproject.toml`` (``[tool.cibuildwheel]``,
read with ``--config-file``); ``CIBW_*`` variables of the calling environment
are dropped so that file is all cibuildwheel reads. Inside a Linux container the
host's file system is at ``/host`` (cibuildwheel mounts it), so the job folders,
the compiler cache and the shard archives are the host's own, at ``/host/<path>``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

import tomli_w

import cuw
from cuw.jobs import archive
from cuw.gates import report
from cuw.jobs.backends import build_env
from cuw.toolchain.cache import tool_class
from cuw.config.cell import Cell
from cuw.base.errors import InputError, ToolError
from cuw.base.settings import Settings
from cuw.config import lanes, toolkits
from cuw.config.grid import cell_archs, require_in_grid
from cuw.partition.rules import ShardSpec, parse_shard_spec
from cuw.config.paths import Paths
from cuw.jobs.context import check_lane
from cuw.config.policy import CacheChoice, Policy, load_policy
from cuw.config.recipe import Recipe
from cuw.jobs.workspace import Workspace

COMMAND_VAR = "CUW_CIBW_COMMAND"
"""The job's cuw argv, shell-quoted: the PEP 517 backend (:mod:`cuw.cli.cibw_backend`) runs it."""

HOST_MOUNT = PurePosixPath("/host")
"""Where cibuildwheel mounts the host's ``/`` inside its Linux containers."""
CONFIG_NAME = "pyproject.toml"
ENGINE = "docker"
# cibuildwheel exits 7 when the container engine does not work (no daemon, too old).
_ENGINE_BROKEN_RC = 7
# The forge files the container needs: the package, its metadata, the pinned install scripts.
_FORGE_FILES = ("cuw", "pyproject.toml", "README.md", ".github/scripts")
FORGE_ROOT = Path(cuw.FORGE_ROOT)


@dataclass(frozen=True)
class LaneTarget:
    platform: str  # cibuildwheel's --platform
    arch: str  # CIBW_ARCHS
    tag: str  # the build identifier's platform part


LANES = {name: LaneTarget(lane.os, lane.machine, lane.cibw_tag) for name, lane in lanes.LANES.items()}


def lane_target(lane: str) -> LaneTarget:
    try:
        return LANES[lane]
    except KeyError:
        raise InputError(f"the cibuildwheel backend has no target for lane {lane!r} (known: {', '.join(LANES)})") from None


def build_identifier(cell: Cell) -> str:
    """``cp311-manylinux_x86_64``, ``cp311-manylinux_aarch64``, ``cp311-win_amd64``."""
    return f"cp{cell.python.replace('.', '')}-{lane_target(cell.lane).tag}"


def manylinux_image(policy: Policy, lane: str) -> str:
    """The lane's build image (``images.<lane>.ref``, pinned by digest): the same image the pip
    backend's ``--image`` and the workflow's ``container:`` run."""
    image = policy.images.get(lane)
    if image is None:
        raise InputError(f"recipes/defaults.yml: images has no build image for lane {lane} (images.{lane}.ref)")
    return image.ref


WHEEL_TOOLKITS_IN_CONTAINER = "/opt/cuw-toolkits"  # $CUW_TOOLKITS there: the pinned toolkit wheels


def toolkit_home(cell: Cell) -> str:
    """Where the pinned install scripts put the cell's CUDA line."""
    if cell.lane == "windows":
        return rf"C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v{cell.cuda}"  # install-cuda.ps1
    return f"/usr/local/cuda-{cell.cuda}"  # install-cuda.sh


@dataclass(frozen=True)
class CibwJob:
    """One job of a cell: shard ``spec``, or the link when ``spec`` is None."""

    recipe: Recipe
    recipes_dir: Path
    cell: Cell
    spec: Optional[ShardSpec]
    work: Path
    artifacts: Path
    dist: Path
    cache: CacheChoice
    jobs: int
    toolkit: str = "system"  # system | wheels | a folder (cuw/config/toolkits.py for_container)
    git_mirror: Optional[Path] = None  # the run's (checked by the verb), for the forge inside

    @property
    def verb(self) -> str:
        return "link" if self.spec is None else "shard"

    @property
    def job_name(self) -> str:
        """The forge's own folder name for this job (cuw.jobs.shard.run_shard / cuw.jobs.link.run_link)."""
        return "link" if self.spec is None else f"shard-{self.spec.tag}"

    @property
    def driver_dir(self) -> Path:
        return self.work / self.cell.id / f"cibw-{self.job_name}"

    @property
    def config_path(self) -> Path:
        return self.driver_dir / CONFIG_NAME

    @property
    def output_dir(self) -> Path:
        return self.driver_dir / "wheelhouse"

    @property
    def in_container(self) -> bool:
        return lane_target(self.cell.lane).platform == "linux"

    def seen(self, host_path: Path) -> str:
        """A host path as the build sees it: under /host in a container, as is on Windows."""
        if not self.in_container:
            return str(host_path)
        return str(HOST_MOUNT / PurePosixPath(host_path.resolve().as_posix()).relative_to("/"))

    def forge_args(self) -> list[str]:
        """The ``cuw`` command the build runs: the same verb, folders and cache as a direct job."""
        args = [self.verb, self.recipe.key, *([str(self.spec)] if self.spec else [])]
        args += [
            "--recipes",
            self.seen(self.recipes_dir),
            "--work",
            self.seen(self.work),
            "--artifacts",
            self.seen(self.artifacts),
            "--jobs",
            str(self.jobs),
            "--cache-tool",
            self.cache.tool,
        ]
        if self.spec is None:
            args += ["--dist", self.seen(self.dist)]
        if self.cache.remote:
            args += ["--cache-remote", self.cache.remote]
        if self.git_mirror is not None:  # the verb checked it; the container sees it under the host mount
            args += ["--git-mirror", self.seen(self.git_mirror)]
        return args

    def environment(self) -> dict[str, str]:
        """What the build sees: build_env's values for the job's folders, as the build
        sees them (the forge inside sets the same), the toolkit and the command."""
        cell_dir = Path(self.seen(self.work)) / self.cell.id
        ws = Workspace.for_job(cell_dir, self.job_name, tool_class(self.cache.tool).shared_tree)
        source_filter = self.recipe.sharding.filter == "source"
        archs = cell_archs(self.recipe, load_policy(self.recipes_dir).archs, self.cell)
        env = build_env(
            self.recipe,
            ws.cuda_home,
            ws.build,
            self.jobs,
            self.spec if source_filter and self.spec else None,
            base={},
            lane=self.cell.lane,
            shard=self.spec,
            archs=archs,
            deps_dir=ws.deps if self.recipe.extra_deps else None,
        )
        env.pop("PATH")  # the image's own PATH: cibuildwheel puts the build Python first
        env[f"{self.cache.tool.upper()}_DIR"] = str(ws.cache_dir)
        if self.toolkit == "system":
            env["CUW_CUDA_HOME"] = toolkit_home(self.cell)
        elif self.toolkit == "wheels":  # provisioned by before_build, into a folder the job keeps
            env["CUW_TOOLKIT"] = "wheels"
            env["CUW_TOOLKITS"] = WHEEL_TOOLKITS_IN_CONTAINER if self.in_container else str(self.work / "toolkits")
        else:
            env["CUW_TOOLKIT"] = env["CUW_CUDA_HOME"] = self.seen(Path(self.toolkit))
        env[COMMAND_VAR] = shlex.join(self.forge_args())
        return env

    def before_all(self) -> list[str]:
        """The pinned toolkit (the CI install scripts) and the pinned cache tool."""
        tool = tool_class(self.cache.tool)
        pin = f"pipx install {tool.package}=={tool.pinned}"
        if self.toolkit != "system":  # the pinned wheels (before_build) or a folder: no system install
            return [pin]
        if self.in_container:
            return [f"bash {{project}}/forge/.github/scripts/install-cuda.sh {self.cell.cuda}", pin]
        script = r"{project}\forge\.github\scripts\install-cuda.ps1"
        return [f'powershell -NoProfile -ExecutionPolicy Bypass -File "{script}" -Line {self.cell.cuda}', pin]

    def before_build(self) -> list[str]:
        """The forge (with torch for the cell, through install-forge.sh) and the recipe's extra deps."""
        torch = f"TORCH={self.cell.torch} " if self.cell.torch else ""
        steps = [f'bash -c "cd forge && {torch}CUDA_LINE={self.cell.cuda} bash .github/scripts/install-forge.sh"']
        if self.toolkit == "wheels":  # the forge's own install of the pinned toolkit wheels, checked
            steps.append(
                f'python -m cuw toolkit --toolkit wheels --cuda {self.cell.cuda} --recipes "{self.seen(self.recipes_dir)}"'
            )
        if self.recipe.extra_deps:
            steps.append("python -m pip install " + " ".join(f'"{dep}"' for dep in self.recipe.extra_deps))
        return steps

    def config(self) -> dict:
        """The ``[tool.cibuildwheel]`` table."""
        target = lane_target(self.cell.lane)
        table: dict = {
            "build": build_identifier(self.cell),
            "archs": [target.arch],
            "build-frontend": {"name": "pip", "args": ["--no-build-isolation"]},
            "environment": self.environment(),
            "before-all": self.before_all(),
            "before-build": self.before_build(),
            # The link already finished the wheel (retag, auditwheel repair to the
            # policy's tag) and verified it; repairing again would re-graft.
            "repair-wheel-command": "python -m cuw.cli.cibw_backend repair {wheel} {dest_dir}",
            "test-command": "",
        }
        if self.in_container:
            table[f"manylinux-{target.arch}-image"] = manylinux_image(load_policy(self.recipes_dir), self.cell.lane)
            # The host mount carries the job folders, the cache and the archives: never disable it.
            table["container-engine"] = {"name": ENGINE, "disable-host-mount": False}
        return table


def write_driver(job: CibwJob) -> Path:
    """The driver project: its pyproject.toml (build system and cibuildwheel config) and a copy of the forge."""
    folder = job.driver_dir
    if folder.exists():
        shutil.rmtree(folder)
    forge = folder / "forge"
    for name in _FORGE_FILES:
        src = FORGE_ROOT / name
        if src.is_dir():
            shutil.copytree(src, forge / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.is_file():
            (forge / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, forge / name)
    job.config_path.write_text(render(job))
    return job.config_path


def render(job: CibwJob) -> str:
    """The driver's pyproject.toml: its build system, then [tool.cibuildwheel] with the environment
    as its own table (cibuildwheel reads each value as a shell word: quoted, so it arrives verbatim)."""
    table = job.config()
    environment = {key: shlex.quote(value) for key, value in table.pop("environment").items()}
    spec = f" {job.spec}" if job.spec else ""
    document = {
        "build-system": {"requires": [], "build-backend": "cuw.cli.cibw_backend"},
        "tool": {"cibuildwheel": {**table, "environment": environment}},
    }
    header = f"# cibuildwheel configuration for {job.cell.id}, {job.verb}{spec}; written by cuw, read with --config-file.\n"
    return header + tomli_w.dumps(document)


def job_for(
    recipe: Recipe,
    recipes_dir: Path,
    cell: Cell,
    spec: Optional[ShardSpec],
    paths: Paths,
    cache: CacheChoice,
    jobs: Optional[int],
    toolkit: Optional[str] = None,
    *,
    settings: Settings,
) -> CibwJob:
    """A job of a cell the recipe's grid has, on a lane that shards when it is one of N > 1.
    ``toolkit``: ``--toolkit`` (else ``$CUW_TOOLKIT``, else the policy's entry for the cell's line).
    ``settings``: the run's."""
    policy = load_policy(recipes_dir)
    require_in_grid(recipe, policy.grid, cell)
    if spec is not None:
        check_lane(recipe, cell, spec)
    choice = toolkits.for_container(policy, toolkit, cell.cuda, settings)
    return CibwJob(
        recipe,
        recipes_dir.resolve(),
        cell,
        spec,
        paths.work,
        paths.artifacts,
        paths.dist,
        cache,
        jobs or os.cpu_count() or 1,
        choice,
        settings.git_mirror,
    )


def job_specs(recipe: Recipe, verb: str, shard: Optional[str], shards: Optional[int]) -> list[Optional[ShardSpec]]:
    """``shard I/N``: that shard; ``link``: the link (None); ``build``: every shard, then the link."""
    if verb == "shard":
        return [parse_shard_spec(shard or "")]
    if verb == "link":
        return [None]
    count = recipe.sharding.count if shards is None else shards
    if count < 1:
        raise InputError(f"--shards must be at least 1, got {count}")
    return [*(ShardSpec(i, count) for i in range(1, count + 1)), None]


def run_jobs(
    recipe: Recipe,
    recipes_dir: Path,
    cell: Cell,
    specs: list[Optional[ShardSpec]],
    paths: Paths,
    cache: CacheChoice,
    jobs: Optional[int],
    settings: Settings,
    toolkit: Optional[str] = None,
) -> bool:
    """Each job in turn; a failed shard does not stop the link (it restores what arrived)."""
    planned = [job_for(recipe, recipes_dir, cell, spec, paths, cache, jobs, toolkit, settings=settings) for spec in specs]
    results = [run_job(job, settings) for job in planned]
    return all(results)


def _cibuildwheel() -> str:
    found = shutil.which("cibuildwheel") or str(Path(sys.executable).parent / "cibuildwheel")
    if not os.access(found, os.X_OK):
        if sys.version_info < (3, 11):  # the pinned cibuildwheel runs on 3.11 and later only
            raise ToolError(
                f"the cibuildwheel backend needs the forge on Python 3.11 or later (this is {sys.version.split()[0]}; "
                "cibuildwheel 4 runs there only): install the forge into a newer Python, or use --backend pip"
            )
        raise ToolError("cibuildwheel is not installed: pip install -e '.[test]' (pyproject.toml pins it)")
    return found


def _cannot_start(job: CibwJob, why: str) -> ToolError:
    return ToolError(f"{why}; the cibuildwheel configuration is written: {job.config_path}")


def run_job(job: CibwJob, settings: Settings) -> bool:
    """Writes the driver, runs cibuildwheel on it, and checks the job's product arrived."""
    config = write_driver(job)
    platform = lane_target(job.cell.lane).platform
    what = f"shard {job.spec}" if job.spec else "link"
    report.say(f"cibuildwheel: {what} of {job.cell.id} ({build_identifier(job.cell)}); config {config}")
    if platform == "windows" and not sys.platform.startswith("win"):
        raise _cannot_start(job, "cibuildwheel builds windows wheels on a Windows host only")
    if platform == "linux" and shutil.which(ENGINE) is None:
        raise _cannot_start(
            job,
            f"no container engine here ({ENGINE} is not on PATH), "
            f"so cibuildwheel cannot start the {build_identifier(job.cell)} container",
        )
    cmd = [_cibuildwheel(), "--platform", platform, "--config-file", str(config), "--output-dir", str(job.output_dir), "."]
    env = {k: v for k, v in settings.child_env().items() if not k.startswith("CIBW_")}
    log_path = job.driver_dir / "cibuildwheel.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=job.driver_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            sys.stderr.write(line)
        rc = proc.wait()
    if rc == _ENGINE_BROKEN_RC:
        raise _cannot_start(job, f"cibuildwheel could not start a {ENGINE} container (no daemon running? see {log_path})")
    refused = next(
        (
            line.strip()
            for line in log_path.read_text(errors="replace").splitlines()
            if line.lstrip().startswith("Error response from daemon")
        ),
        None,
    )
    if rc != 0 and refused:  # the engine runs but cannot get the image (an unreachable registry)
        raise _cannot_start(job, f"cibuildwheel could not start the {build_identifier(job.cell)} container: {refused}")
    if rc != 0:
        report.say(f"cibuildwheel {job.verb} failed (exit {rc}); log {log_path}")
        return False
    if job.spec is not None:
        shard_archive = job.artifacts / job.cell.id / archive.archive_name(job.cell, job.spec.index, job.spec.count)
        if not shard_archive.is_file():
            report.say(f"cibuildwheel {job.verb} {job.spec} finished but wrote no archive at {shard_archive}")
            return False
        report.say(f"shard archive: {shard_archive}")
    else:
        report.say(f"wheel: {', '.join(str(w) for w in sorted(job.output_dir.glob('*.whl')))}")
    return True
