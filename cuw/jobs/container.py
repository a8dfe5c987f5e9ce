"""A job run inside a build image: the same ``cuw`` verb, in a container of that image.

``cuw shard example 2/4 --image REF`` starts a container of REF and runs ``cuw shard example 2/4``
in it with the image's own Python (``/opt/python/<abi>``), compiler and glibc. Nothing of the
host's Python, compilers or site-packages goes in. What is mounted, each at the path it has on
the host (so every path a report, a seat log or the cache names means the same inside and out):

* the forge's checkout, read-only (on ``PYTHONPATH``: the forge runs from source);
* the job folders (``--work``, ``--artifacts``, ``--dist``), read-write;
* the recipes folder and a git mirror when given, and the CUDA toolkit, read-only;
* a venv made once per image and Python from the image's interpreter, holding the forge's
  pinned requirements (the same ccache, CMake and build backends as every other job);
* a home folder per image (pip's and the forge's caches), and the host's CA bundle.

The container is on the host network, runs as the caller's user, and is stopped with the
job: Ctrl-C or SIGTERM reach the forge inside (``--init`` forwards them), which stops its build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import cuw
from cuw.base.errors import ToolError
from cuw.base.files import held, only_one
from cuw.base.settings import Settings
from cuw.jobs.cell_env import forge_requirements
from cuw.toolchain.builder import IMAGE_VAR, linux_machine
from cuw.config.lanes import linux_lane
from cuw.toolchain.engine import Engine, find_engine, image_machine, require_image

FORGE_ROOT = Path(cuw.FORGE_ROOT)
READY = ".cuw-image-env.json"
CA_IN_CONTAINER = "/etc/cuw-ca.pem"  # where a container finds the host's CA bundle
Say = Callable[[str], None]


@dataclass(frozen=True)
class ImageJob:
    engine: Engine
    ref: str  # as the user gave it
    id: str  # sha256:… (what a shard's archive records, and what the link compares)
    machine: str  # what its programs run on: x86_64, aarch64
    settings: Settings = field(compare=False, repr=False)
    """The run's: its toolkit, cache choice and folders reach the job in the container."""

    @property
    def lane(self) -> str:
        return linux_lane(self.machine)

    @property
    def foreign(self) -> bool:
        """Another machine than this one's (run under emulation): the host's CUDA toolkit cannot run
        in it, so its jobs install NVIDIA's pinned wheels for its machine (``--toolkit wheels``)."""
        return self.machine != linux_machine()

    @property
    def short(self) -> str:
        return self.id.split(":", 1)[-1][:12]

    @property
    def identity(self) -> str:
        return f"{self.ref}@{self.id}"


def open_image(ref: str, engine: Optional[str] = None, *, settings: Settings) -> ImageJob:
    """The image a job will run in; refused in one line when the engine or the image is missing.
    ``settings``: the run's (its engine, and what its jobs in the container get)."""
    found = find_engine(engine or settings.engine)
    return ImageJob(found, ref, require_image(found, ref), image_machine(found, ref), settings)


def ca_bundle(ca_files: Sequence[str]) -> Optional[Path]:
    """The CA bundle pip uses here (``ca_files``: the run's $PIP_CERT, $SSL_CERT_FILE; else Python's
    default): TLS inside goes through it."""
    for candidate in (
        *ca_files,
        ssl.get_default_verify_paths().cafile,
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


def _user() -> list[str]:
    return [] if os.name != "posix" or os.geteuid() == 0 else ["--user", f"{os.getuid()}:{os.getgid()}"]


def _run_args(job: ImageJob, name: str, mounts: dict[Path, bool], env: dict[str, str]) -> list[str]:
    args = ["run", "--rm", "--init", "--network", "host", "--name", name, *_user()]
    ca = ca_bundle(job.settings.ca_files)
    if ca is not None:
        args += ["-v", f"{ca}:{CA_IN_CONTAINER}:ro"]
        env = {**env, "PIP_CERT": CA_IN_CONTAINER, "SSL_CERT_FILE": CA_IN_CONTAINER}
    for path, writable in sorted(mounts.items()):
        args += ["-v", f"{path}:{path}:{'rw' if writable else 'ro'}"]
    for key, value in sorted(env.items()):
        args += ["-e", f"{key}={value}"]
    return args


def _abi() -> str:
    """The cell's Python as the image names it: this forge's own version (``cp311-cp311``)."""
    return f"cp3{sys.version_info.minor}-cp3{sys.version_info.minor}"


def _container_name(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", f"cuw-{os.getpid()}-{label}")[:120]


class _Terminated(Exception):
    """SIGTERM (a CI cancel, ``cuw build`` stopping its shards) while the container runs."""


def _run(job: ImageJob, name: str, argv: list[str]) -> int:
    """Runs the container in the foreground. On Ctrl-C or SIGTERM the container is stopped (the
    forge inside gets SIGTERM through ``--init`` and stops its build) before this returns:
    Ctrl-C goes on as KeyboardInterrupt (exit 130), SIGTERM ends with 143."""
    proc = subprocess.Popen(job.engine.cmd(*argv), stdin=subprocess.DEVNULL)

    def on_term(signum: int, frame: object) -> None:
        raise _Terminated

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: the caller stops the container
        previous = None
    try:
        return proc.wait()
    except (KeyboardInterrupt, _Terminated) as exc:
        subprocess.run(job.engine.cmd("stop", "--time", "30", name), capture_output=True, timeout=120)
        proc.wait()
        if isinstance(exc, _Terminated):
            print(f"cuw: terminated; container {name} stopped", file=sys.stderr)
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def image_env(job: ImageJob, say: Say) -> Path:
    """A venv of the image's Python holding the forge's pinned requirements, made once per image,
    Python and requirements under a lock (two shards starting at once: one makes it)."""
    abi = _abi()
    requirements = forge_requirements()
    key = hashlib.sha256(json.dumps([job.id, abi, requirements]).encode()).hexdigest()[:12]
    venv = job.settings.folders.image_state / "envs" / f"{job.short}-{abi}-{key}"
    if (venv / READY).is_file():
        return venv
    with held(venv.parent / f"{venv.name}.lock"):
        if (venv / READY).is_file():
            return venv
        say(f"image: making the forge's environment for {job.ref} ({abi}, {len(requirements)} requirements) in {venv}")
        log = venv.parent / f"{venv.name}.log"
        script = env_script(f"/opt/python/{abi}/bin/python", venv, requirements)
        env = {"HOME": str(_home(job)), "PIP_NO_INPUT": "1"}
        mounts = {venv.parent: True, _home(job): True}
        _home(job).mkdir(parents=True, exist_ok=True)
        argv = _run_args(job, _container_name("env"), mounts, env) + [job.ref, "sh", "-c", script]
        with open(log, "wb") as out:
            rc = subprocess.run(job.engine.cmd(*argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if rc != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ToolError(f"image {job.ref}: the forge's environment could not be made (exit {rc}): {tail}; log {log}")
        (venv / READY).write_text(json.dumps({"image": job.identity, "abi": abi, "requirements": requirements}, indent=2))
    return venv


def env_script(python: str, venv: Path, requirements: Sequence[str]) -> str:
    """The shell line that makes the forge's venv inside the image. Every word is quoted by shlex:
    a requirement's marker carries quotes of its own (``tomli>=2; python_version < '3.11'``)."""
    py, where = shlex.quote(python), shlex.quote(str(venv))
    return (
        f'test -x {py} || {{ echo "no {py} in the image; it has: $(ls /opt/python 2>/dev/null)"; exit 3; }}; '
        f"rm -rf {where} && {py} -m venv {where} && {where}/bin/python -m pip install --quiet "
        "--disable-pip-version-check " + " ".join(shlex.quote(r) for r in requirements)
    )


def _home(job: ImageJob) -> Path:
    return job.settings.folders.image_state / "home" / job.short


def run_verb(
    job: ImageJob, argv: list[str], folders: list[Path], read_only: list[Path], label: str, say: Say, lock: Optional[Path] = None
) -> int:
    """``cuw <argv>`` inside the image; returns its exit code. ``folders`` are mounted read-write
    (made first), ``read_only`` read-only; both at their host paths. ``lock``: held while it runs
    (a second run of the same job is refused)."""
    if lock is not None:
        with only_one(lock, f"{label} in a container"):
            return run_verb(job, argv, folders, read_only, label, say)
    venv = image_env(job, say)
    mounts: dict[Path, bool] = {FORGE_ROOT: False, venv: False, _home(job): True}
    env: dict[str, str] = {}
    if not job.foreign:
        from cuw.toolchain.toolkit import find_toolkit

        toolkit = find_toolkit(homes=job.settings.homes)
        mounts[toolkit.home] = False
        env["CUW_CUDA_HOME"] = str(toolkit.home)
    for folder in read_only:
        mounts.setdefault(folder.resolve(), False)
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        mounts[folder.resolve()] = True
    env = {
        **env,
        IMAGE_VAR: job.identity,
        "PYTHONPATH": str(FORGE_ROOT),
        "HOME": str(_home(job)),
        "PYTHONUNBUFFERED": "1",
        # An internal error's traceback lands where the host can read it, not in the container's /tmp.
        "CUW_LOG_DIR": str((folders[0] if folders else _home(job)).resolve()),
        **{k: v for k, v in job.settings.environ.items() if k in ("CUW_CACHE_TOOL", "CUW_CACHE_REMOTE")},
    }
    name = _container_name(label)
    say(f"{label}: in image {job.ref} ({job.engine.name}, container {name})")
    cwd = folders[0].resolve() if folders else _home(job)
    argv = _run_args(job, name, mounts, env) + ["-w", str(cwd), job.ref, str(venv / "bin" / "python"), "-m", "cuw", *argv]
    return _run(job, name, argv)
