"""The local stand-in build image: a manylinux-shaped image built from Debian's registry.

Where ``quay.io/pypa/manylinux_2_28_*`` cannot be pulled, ``cuw image`` builds an image with
the same layout from an image recipe (``images/standin-<arch>.yml``): a Debian root made by
``debootstrap`` (imported as the base layer), then CPython compiled from pinned, checksummed
tarballs into ``/opt/python/<abi>``. The image is tagged with the digest of its recipe, so it
is built once and again only when the recipe (or this builder) changes. Its floor is not
written down anywhere: jobs compute it inside the image (:mod:`cuw.toolchain.builder`).
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional


import cuw
from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.yamlfile import read_yaml
from cuw.base.files import held, sha256_of
from cuw.toolchain.builder import PLATFORM_ARCH, linux_machine
from cuw.toolchain.engine import Engine, image_id

IMAGES_DIR = Path(cuw.FORGE_ROOT) / "images"
_ABI = re.compile(r"^cp3\d{1,2}-cp3\d{1,2}t?$")
_KEYS = {"name", "arch", "suite", "mirror", "packages", "python", "tool_cache"}
Say = Callable[[str], None]


@dataclass(frozen=True)
class PythonSource:
    """A CPython compiled from a pinned tarball (url, sha256), or the distribution's own
    interpreter (``debian``: its package, linked into /opt/python): an image under emulation
    cannot afford hours of compiling CPython, and it proves a lane, not a floor."""

    abi: str  # cp311-cp311
    url: str = ""
    sha256: str = ""
    debian: str = ""  # python3.11

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ImageRecipe:
    path: Path
    name: str
    arch: str
    suite: str
    mirror: str
    packages: tuple[str, ...]
    pythons: tuple[PythonSource, ...]
    tool_cache: str = ""  # a runner image: each /opt/python linked where actions/setup-python looks

    def digest(self) -> str:
        """What the image is a function of: the recipe's bytes and the steps that build from it."""
        h = hashlib.sha256(self.path.read_bytes())
        h.update(_steps(self).encode())
        return h.hexdigest()

    @property
    def ref(self) -> str:
        return f"{self.name}-{self.arch}:{self.digest()[:16]}"


def _need(data: dict, key: str, kind: type, where: Path) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (isinstance(value, (str, list, dict)) and not value):
        raise InputError(f"{where}: {key} must be a non-empty {kind.__name__}")
    return value


def load_image_recipe(path: Path) -> ImageRecipe:
    """An image recipe, strictly: unknown keys, wrong types and unpinned sources are refused."""
    if path.is_dir():
        raise InputError(f"image recipe {path} is a folder; give the recipe's .yml file (images/standin-x86_64.yml)")
    data = read_yaml(path, "image recipe")
    if not isinstance(data, dict):
        raise InputError(f"image recipe {path}: a mapping of {', '.join(sorted(_KEYS))} expected")
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise InputError(f"image recipe {path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    for key in ("name", "arch", "suite"):
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.\-]*", str(_need(data, key, str, path))):
            raise InputError(f"image recipe {path}: {key} {data[key]!r} must be lowercase letters, digits, '.', '_' or '-'")
    packages = _need(data, "packages", list, path)
    if not all(isinstance(p, str) and re.fullmatch(r"[a-z0-9][a-z0-9+.\-]*", p) for p in packages):
        raise InputError(f"image recipe {path}: packages must be Debian package names")
    pythons = []
    for abi, source in _need(data, "python", dict, path).items():
        if not _ABI.match(str(abi)) or not isinstance(source, dict) or set(source) not in ({"url", "sha256"}, {"debian"}):
            raise InputError(f"image recipe {path}: python.{abi} must be cpXY-cpXY with url and sha256, or with debian")
        if "debian" in source:
            version = f"{str(abi)[2]}.{str(abi).split('-')[0][3:]}"
            if source["debian"] != f"python{version}" or source["debian"] not in packages:
                raise InputError(f"image recipe {path}: python.{abi}.debian must be python{version}, listed in packages")
            pythons.append(PythonSource(str(abi), debian=str(source["debian"])))
            continue
        if not re.fullmatch(r"[0-9a-f]{64}", str(source["sha256"])) or not str(source["url"]).startswith(("http://", "https://")):
            raise InputError(f"image recipe {path}: python.{abi}: an http(s) url and a sha256 of 64 hex digits")
        pythons.append(PythonSource(str(abi), str(source["url"]), str(source["sha256"])))
    tool_cache = data.get("tool_cache", "")
    if tool_cache and not (isinstance(tool_cache, str) and re.fullmatch(r"(/[a-zA-Z0-9_.\-]+)+", tool_cache)):
        raise InputError(f"image recipe {path}: tool_cache must be an absolute folder path (/opt/hostedtoolcache)")
    return ImageRecipe(
        path,
        data["name"],
        data["arch"],
        data["suite"],
        _need(data, "mirror", str, path),
        tuple(packages),
        tuple(pythons),
        tool_cache,
    )


def default_recipe(arch: Optional[str] = None) -> Path:
    machine = arch or linux_machine()
    path = IMAGES_DIR / f"standin-{machine}.yml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem.removeprefix("standin-") for p in IMAGES_DIR.glob("standin-*.yml")))
        raise ToolError(f"no stand-in image recipe for {machine} ({path}); recipes exist for: {known or 'none'}")
    return path


def fetch_source(source: PythonSource, folder: Path, say: Say) -> Path:
    """The tarball, downloaded once into ``folder`` through a temp file and checked against its sha256."""
    target = folder / source.file_name
    if target.is_file() and sha256_of(target) == source.sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    say(f"image: fetching {source.url}")
    fd, tmp = tempfile.mkstemp(prefix=f".{source.file_name}.", suffix=".partial", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(source.url, timeout=120) as response:
            shutil.copyfileobj(response, out, 1 << 20)
        got = sha256_of(Path(tmp))
        if got != source.sha256:
            # The download or the pin: either may be what changed, so no kind names the fault.
            raise CuwError(f"{source.url}: sha256 {got}, the image recipe pins {source.sha256}; refusing it")
        os.replace(tmp, target)
    except OSError as exc:
        raise CuwError(f"cannot fetch {source.url}: {exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def _python_step(source: PythonSource) -> str:
    """One Dockerfile step per CPython (its own layer: a changed 3.13 pin keeps the 3.11 layer)."""
    prefix = f"/opt/python/{source.abi}"
    if source.debian:
        return (
            f"RUN set -e; mkdir -p {prefix}/bin; ln -s /usr/bin/{source.debian} {prefix}/bin/python3; "
            f"ln -s python3 {prefix}/bin/python; "
            f"{prefix}/bin/python -c 'import ssl, zlib, bz2, lzma, ctypes, sqlite3, uuid, venv, ensurepip'\n"
        )
    return (
        f"COPY {source.file_name} /tmp/src/\n"
        "RUN set -e; mkdir /tmp/build; cd /tmp/build; "
        f"tar -xf /tmp/src/{source.file_name} --strip-components=1; "
        f"./configure --prefix={prefix} --with-ensurepip=install > /tmp/configure.log 2>&1 "
        "|| { tail -40 /tmp/configure.log; exit 1; }; "
        'make -j"$(nproc)" > /tmp/make.log 2>&1 || { tail -60 /tmp/make.log; exit 1; }; '
        "make install > /tmp/install.log 2>&1 || { tail -40 /tmp/install.log; exit 1; }; "
        f"cd /; rm -rf /tmp/build /tmp/src /tmp/*.log; ln -sf python3 {prefix}/bin/python; "
        f"{prefix}/bin/python -c 'import ssl, zlib, bz2, lzma, ctypes, sqlite3, uuid, venv'\n"
    )


def _tool_cache_step(folder: str) -> str:
    """Each /opt/python interpreter where actions/setup-python finds a cached one:
    ``<folder>/Python/<X.Y.Z>/x64`` and its ``x64.complete`` marker (what a hosted runner has)."""
    return (
        "RUN set -e; for py in /opt/python/*/bin/python; do "
        "v=$($py -c 'import platform; print(platform.python_version())'); "
        f'mkdir -p {folder}/Python/$v; ln -s "${{py%/bin/python}}" {folder}/Python/$v/x64; '
        f"touch {folder}/Python/$v/x64.complete; done\n"
    )


def _steps(recipe: ImageRecipe) -> str:
    steps = "".join(_python_step(p) for p in recipe.pythons)
    return steps + (_tool_cache_step(recipe.tool_cache) if recipe.tool_cache else "")


def dockerfile(recipe: ImageRecipe, base: str) -> str:
    steps = _steps(recipe)
    return (
        f"FROM {base}\n"
        f"LABEL org.cuda-wheels-forge.image-recipe={recipe.digest()}\n"
        "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"{steps}"
    )


def _pump(stream: IO[bytes], lines: queue.Queue[Optional[bytes]]) -> None:
    """The step's output, line by line, then None at its end (read on a thread: the loop keeps time)."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _run_logged(
    cmd: list[str], log_path: Path, what: str, say: Say, stdin: Optional[IO[bytes]] = None, every_s: float = 60.0
) -> None:
    """Runs a step with its output in the log; says how long it has run every ``every_s`` (a
    CPython build is minutes of silence) and each ``Step i/n`` an image build starts."""
    started = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin if stdin is not None else subprocess.DEVNULL
        )
        assert proc.stdout is not None
        lines: queue.Queue[Optional[bytes]] = queue.Queue()
        reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
        reader.start()
        last_said = started
        while True:
            try:
                line = lines.get(timeout=5.0)
            except queue.Empty:
                line = b""
            if line is None:
                break
            log.write(line)
            step = re.match(rb"Step (\d+/\d+) : (\S+)", line)
            if step:
                say(
                    f"image: {what}: step {step.group(1).decode()} ({step.group(2).decode()}), "
                    f"{time.monotonic() - started:.0f} s in"
                )
                last_said = time.monotonic()
            elif time.monotonic() - last_said >= every_s:
                say(f"image: {what}: {time.monotonic() - started:.0f} s in")
                last_said = time.monotonic()
        rc = proc.wait()
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-3:]
        raise ToolError(f"image: {what} failed (exit {rc}): {' | '.join(tail)}; whole log: {log_path}")
    say(f"image: {what}: {time.monotonic() - started:.0f} s")


def _base_layer(engine: Engine, recipe: ImageRecipe, folder: Path, log: Path, say: Say) -> str:
    """The Debian root (debootstrap, as root) imported as the image's first layer."""
    base = f"{recipe.name}-{recipe.arch}-base:{recipe.digest()[:16]}"
    if image_id(engine, base):
        return base
    if not shutil.which("debootstrap"):
        raise ToolError("image: debootstrap is not installed (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise ToolError("image: debootstrap makes the Debian root as root; run `cuw image` as root")
    root = folder / "rootfs"
    if root.exists():
        shutil.rmtree(root)
    arch = PLATFORM_ARCH.get(recipe.arch, recipe.arch)
    say(f"image: debootstrap {recipe.suite} ({arch}, {len(recipe.packages)} packages) from {recipe.mirror}")
    _run_logged(
        [
            "debootstrap",
            "--variant=minbase",
            f"--arch={arch}",
            f"--include={','.join(recipe.packages)}",
            recipe.suite,
            str(root),
            recipe.mirror,
        ],
        log,
        f"debootstrap {recipe.suite}",
        say,
    )
    for cached in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        cached.unlink()
    tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        # The image metadata then names the engine's machine (docker 20.10 honours `import --platform`
        # only in experimental mode); jobs ask the image itself (`uname -m`, engine.image_machine).
        _run_logged(engine.cmd("import", "-", base), log, "import the root as the base layer", say, stdin=tar.stdout)
    finally:
        if tar.stdout:
            tar.stdout.close()
        tar.wait()
    shutil.rmtree(root)
    return base


def build_image(engine: Engine, recipe: ImageRecipe, say: Say, cache_root: Path) -> tuple[str, bool]:
    """The stand-in's reference and whether it was already built (its tag is its recipe's digest).
    ``cache_root``: the run's ``$CUW_IMAGE_CACHE`` (its build folders and downloaded Pythons)."""
    ref = recipe.ref
    if image_id(engine, ref):
        return ref, True
    folder = cache_root / recipe.digest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    with held(folder / "lock"):  # two builds of one recipe: the second waits and reuses
        if image_id(engine, ref):
            return ref, True
        log = folder / "build.log"
        log.write_bytes(b"")
        say(f"image: building {ref} from {recipe.path} (log {log})")
        base = _base_layer(engine, recipe, folder, log, say)
        context = folder / "context"
        if context.exists():
            shutil.rmtree(context)
        context.mkdir()
        for source in recipe.pythons:
            if source.debian:
                continue
            shutil.copy2(fetch_source(source, cache_root / "sources", say), context / source.file_name)
        (context / "Dockerfile").write_text(dockerfile(recipe, base))
        _run_logged(
            engine.cmd("build", "--network", "host", "-t", ref, str(context)),
            log,
            f"CPython {', '.join(p.abi for p in recipe.pythons)} into /opt/python",
            say,
        )
        shutil.rmtree(context)
    return ref, False
