"""A registry on 127.0.0.1 for the length of a local run: it gives an image built here a digest
reference (``127.0.0.1:PORT/name@sha256:…``), the form the policy pins and a workflow's
``container:`` takes, so a local run passes the same kind of reference a GitHub run does.

The registry is Debian's ``docker-registry`` (the distribution project's registry 2.x), listening
on the loopback only; the engine pushes to it without TLS (127.0.0.0/8 is trusted by default).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cuw.base.errors import ToolError
from cuw.base.ports import free_port
from cuw.toolchain.engine import Engine, check_ref

BINARIES = ("docker-registry", "registry")
Say = Callable[[str], None]


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT


TOKEN_HEADER = "X-Cuw-Registry"  # sent by the registry started here, with a token of its start only
PORT_TRIES = 3  # a port found free can be taken before the registry binds it


def _config(folder: Path, port: int, token: str = "") -> str:
    return json.dumps(
        {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": f"127.0.0.1:{port}", "headers": {TOKEN_HEADER: [token]}},
        }
    )  # JSON is YAML: the registry reads it as its config file


def _answers(host: str, token: str) -> bool:
    """Whether the registry started here answers on ``host``: another server on the port (it took
    the port first) is never taken for it, whatever it answers."""
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as response:
            return response.status == 200 and response.headers.get(TOKEN_HEADER) == token
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _start(binary: str, folder: Path, wait_s: float) -> tuple[subprocess.Popen, str] | None:
    """The registry on a free port, answering; None when another server took the port first."""
    port, token = free_port(), secrets.token_hex(16)
    config = folder / "config.yml"
    config.write_text(_config(folder, port, token))
    host, log_path = f"127.0.0.1:{port}", folder / "registry.log"
    with open(log_path, "ab") as log:
        offset = log.tell()
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait_s
        while not _answers(host, token):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log_path, "rb") as log:
                    log.seek(offset)
                    said = log.read().decode(errors="replace").strip().splitlines()
                if proc.poll() is not None and any("address already in use" in line for line in said):
                    _stop(proc)
                    return None
                tail = " | ".join(said[-2:])
                raise ToolError(
                    f"the local registry ({binary}) did not answer on {host} in {wait_s:.0f} s: "
                    f"{tail or 'no output'}; log {log_path}"
                )
            time.sleep(0.2)
    except BaseException:
        _stop(proc)
        raise
    return proc, host


@contextmanager
def local_registry(folder: Path, say: Say, wait_s: float = 30.0) -> Iterator[Registry]:
    """A registry storing under ``folder``, stopped when the block ends (also on Ctrl-C)."""
    binary = next((found for name in BINARIES if (found := shutil.which(name))), None)
    if binary is None:
        raise ToolError("no image registry to pin a local image by digest: apt-get install docker-registry")
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(PORT_TRIES):
        started = _start(binary, folder, wait_s)
        if started is not None:
            break
    else:
        raise ToolError(
            f"the local registry ({binary}) lost its port to another server {PORT_TRIES} times; log {folder / 'registry.log'}"
        )
    proc, host = started
    try:
        say(f"registry: {binary} on {host} (storage {folder / 'data'})")
        yield Registry(host)
    finally:
        _stop(proc)


def _repo_digests(engine: Engine, ref: str) -> list[str]:
    out = subprocess.run(
        engine.cmd("image", "inspect", "--format", "{{json .RepoDigests}}", ref),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    try:
        found = json.loads(out.stdout.strip() or "null") if out.returncode == 0 else None
    except (ValueError, RecursionError):
        found = None
    return [d for d in found or [] if isinstance(d, str)]


def pin(engine: Engine, registry: Registry, ref: str, say: Say) -> str:
    """``ref`` (a local image: ``name:tag``) pushed to the registry; its digest reference
    (``127.0.0.1:PORT/name@sha256:…``), which the engine then resolves locally without a pull."""
    check_ref(ref, "image")
    name = ref.rsplit("@", 1)[0]
    repo, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
    target = f"{registry.host}/{repo.rsplit('/', 1)[-1]}:{tag}"
    started = time.monotonic()
    for cmd in (("tag", ref, target), ("push", target)):
        out = subprocess.run(
            engine.cmd(*cmd), capture_output=True, text=True, errors="replace", timeout=1800, stdin=subprocess.DEVNULL
        )
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise ToolError(f"cannot push {ref} to the local registry {registry.host}: {engine.name} {cmd[0]}: {why}")
    prefix = target.rsplit(":", 1)[0] + "@sha256:"
    pinned = [d for d in _repo_digests(engine, target) if d.startswith(prefix)]
    if not pinned:
        raise ToolError(f"{engine.name} pushed {target} but names no digest for it in {registry.host}")
    say(f"registry: {ref} is {pinned[0]} ({time.monotonic() - started:.0f} s)")
    return pinned[0]
