"""The container engine (docker or podman) that runs build images: found once, asked once.

Every container the forge starts is on the host network (``--network host``): the artifact
server, an index server and a Redis cache stay on 127.0.0.1 and nothing goes through the
engine's bridge, whose private-range addresses some machines must not reach.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from cuw.base.errors import InputError, ToolError
from cuw.toolchain.builder import linux_machine

ENGINES = ("docker", "podman")
ENGINE_VAR = "CUW_ENGINE"
# A reference as docker/podman spell it: [registry[:port]/]path[:tag][@sha256:hex], or an image id.
_REF = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*(@sha256:[0-9a-f]{64})?$|^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Engine:
    name: str  # docker | podman
    path: str

    def cmd(self, *args: str) -> list[str]:
        return [self.path, *args]


def check_ref(ref: str, what: str = "--image") -> str:
    """A plausible image reference (no option, no whitespace); refused in one line otherwise."""
    if not ref or not _REF.match(ref) or len(ref) > 512:
        raise InputError(f"{what} {ref!r} is not an image reference (name[:tag][@sha256:digest], as `docker images` lists)")
    return ref


@lru_cache(maxsize=None)
def _answers(path: str) -> Optional[str]:
    """None when the engine answers, else what it said."""
    try:
        out = subprocess.run(
            [path, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return "no answer in 30 s"
    except OSError as exc:
        return str(exc.strerror or exc)
    if out.returncode != 0 or not out.stdout.strip():
        return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    return None


def find_engine(name: Optional[str] = None) -> Engine:
    """``name`` (``--engine``, else the run's ``$CUW_ENGINE``), else docker, then podman on PATH; it must answer."""
    wanted = name or None
    if wanted is not None and wanted not in ENGINES:
        raise InputError(f"--engine {wanted!r}: choose docker or podman (or set {ENGINE_VAR})")
    for candidate in [wanted] if wanted else list(ENGINES):
        path = shutil.which(candidate)
        if path is None:
            continue
        why = _answers(path)
        if why is None:
            return Engine(candidate, path)
        if wanted or candidate == ENGINES[-1] or not shutil.which(ENGINES[-1]):
            hint = " (start it as root: dockerd &)" if candidate == "docker" else ""
            raise ToolError(f"{candidate} is installed but its engine does not answer: {why}{hint}")
    tried = wanted or " or ".join(ENGINES)
    raise ToolError(
        f"no container engine: {tried} is not on PATH (install docker.io and start dockerd as root, or install podman)"
    )


def image_id(engine: Engine, ref: str) -> Optional[str]:
    """The image's content id (``sha256:…``) when the engine has it, else None."""
    out = subprocess.run(
        engine.cmd("image", "inspect", "--format", "{{json .Id}}", ref),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if out.returncode != 0:
        return None
    try:
        found = json.loads(out.stdout.strip())
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, str) and found.startswith("sha256:") else None


def image_machine(engine: Engine, ref: str) -> str:
    """The machine an image's programs run on, as Linux names it (``x86_64``, ``aarch64``): asked
    of the image itself (its metadata can name the engine's machine instead: an imported root)."""
    try:
        out = subprocess.run(
            engine.cmd("run", "--rm", "--network", "host", "--entrypoint", "uname", ref, "-m"),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ToolError(f"--image {ref}: `uname -m` in a container of it did not answer in 120 s") from None
    machine = out.stdout.strip()
    if out.returncode != 0 or not re.fullmatch(r"[a-z0-9_]+", machine):
        why = (out.stderr.strip().splitlines() or ["no answer"])[-1]
        raise ToolError(
            f"--image {ref}: cannot run `uname -m` in it ({why}); an image of another machine needs "
            "qemu-user-static with binfmt_misc (apt-get install qemu-user-static binfmt-support)"
        )
    return linux_machine(machine)


def require_image(engine: Engine, ref: str) -> str:
    """The id of an image the engine has; a clear refusal when it has none (nothing is pulled
    behind the user's back: a pinned reference is pulled by the workflow, a stand-in is built)."""
    found = image_id(engine, check_ref(ref))
    if found is None:
        raise InputError(
            f"--image {ref}: {engine.name} has no such image (build the stand-in with `cuw image`, "
            f"or `{engine.name} pull {ref}` where its registry is reachable)"
        )
    return found
