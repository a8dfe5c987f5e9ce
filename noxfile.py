"""nox sessions: thin wrappers over ``cuw`` (CI calls these same sessions).

One session per ``cuw`` verb, made from the CLI's grammar (:func:`cuw.cli.parser.verb_specs`),
plus the test tiers. They run in the current environment (``pip install -e '.[test,torch]'``):
the build backends, torch and the pinned ccache installed there are the ones
every shard and link must share.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import nox

from cuw.cli.front import run_verb
from cuw.cli.parser import VerbSpec, verb_specs

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]


def _verb_session(verb: VerbSpec) -> None:
    def session_fn(session: nox.Session) -> None:
        # The verb's own exit code, not nox's 1 for any failure: 1 a gate refused, 2 bad input,
        # 130/143 interrupted (README, "Exit codes and errors"); the verb has said why in one line.
        # Ctrl-C and SIGTERM reach the verb once, through run_verb (cuw/cli/front.py).
        rc = run_verb([verb.name, *session.posargs])
        if rc != 0:
            raise SystemExit(rc)

    usage = " ".join(o.flag if o.required else f"[{o.flag}]" for o in verb.options if o.positional)
    session_fn.__doc__ = (
        f"{verb.help[:1].upper()}{verb.help[1:]}: nox -s {verb.name.replace('-', '_')} -- {usage + ' ' if usage else ''}[options]"
    )
    nox.session(name=verb.name.replace("-", "_"))(session_fn)


# One session per cuw verb, made from the CLI's own grammar: `nox -s <verb> -- --help` lists its options.
for _verb in verb_specs():
    _verb_session(_verb)


# One worker more than cores: a worker waiting on a child's I/O, a server or a lock leaves a core idle, and
# the spare one takes it (measured on 2 cores: 9 min 42 s against 10 min 39 s). Whole files per worker
# (--dist loadfile): a file's fixtures are made once and its tests never race each other (the seat-stub
# comparisons read hits as misses when they ran on two workers at once). Not --dist loadgroup: with
# pytest 9.2 and pytest-xdist 3.8 it ignores every xdist_group mark and spreads each test on its own
# (pytest-dev/pytest-xdist#1386). Files in the order collected (--no-loadscope-reorder): xdist would
# otherwise hand out first the files with the most tests, not tests/conftest.py's LONGEST_FILES.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
WORKERS = ["-n", str(CORES + 1), "--dist", "loadfile", "--no-loadscope-reorder"]
# Where the machine sets PYTHONDONTWRITEBYTECODE (CI images often do), every `python -m cuw` a test starts
# would compile the forge's sources again (50 ms of its 210 ms here) and every worker would rewrite every
# test file's asserts: the test tiers let their processes cache bytecode (__pycache__, which git and the
# forge's digests leave out).
BYTECODE = {"PYTHONDONTWRITEBYTECODE": None}


@nox.session
def long(session: nox.Session) -> None:
    """The longest real builds of the examples (pytest -m long), kept out of nox -s tests to hold it within
    8 minutes; CI runs them after it (.ci/run). Workers as in nox -s tests (WORKERS)."""
    args = session.posargs or ["-q", *WORKERS, "--durations=10"]
    session.run(sys.executable, "-m", "pytest", "-rfEs", "-m", "long", *args, env=BYTECODE)


@nox.session
def farm(session: nox.Session) -> None:
    """The farm tier: the real workflow under act, publish, pip install from the index (pytest -m farm)."""
    session.run(sys.executable, "-m", "pytest", "-m", "farm", "-v", "-s", "tests/test_farm.py", *session.posargs)


@nox.session
def arm(session: nox.Session) -> None:
    """The ARM lane under emulation: the example built for linux_aarch64 in the ARM stand-in (pytest -m arm)."""
    session.run(sys.executable, "-m", "pytest", "-m", "arm", "-v", "-s", "tests/test_arm_lane.py", *session.posargs)


@nox.session
def pythons(session: nox.Session) -> None:
    """Every Python the forge claims (pytest -m pythons): build.yml's install and compile steps with each Python of the
    grid, the example's other shards through invoke and cuw and its link through nox, to a verified wheel."""
    args = session.posargs or ["-v", "-n", "2", "--dist", "load"]
    session.run(sys.executable, "-m", "pytest", "-rfEs", "-m", "pythons", "tests/test_pythons.py", *args)


@nox.session
def e2e(session: nox.Session) -> None:
    """Real packages from their sdists, sharded, linked and verified: nox -s e2e -- [<recipe> ...] [--e2e-image=<ref>].

    Without recipes it also builds both examples as 1 and as 12 shards, imports a torch wheel under every
    patch release of its line, builds the example with the CUDA toolkit from NVIDIA's pinned wheels where
    the system one is hidden, and example_torch for two Pythons, each with torch 2.14 in its own environment."""
    recipes = [f"--e2e-recipe={name}" for name in session.posargs if not name.startswith("-")]
    options = [arg for arg in session.posargs if arg.startswith("-")]  # --e2e-image=<ref>: every job in that image
    files = [
        "tests/test_real_packages.py",
        *(
            []
            if recipes
            else [
                "tests/test_e2e.py",
                "tests/test_torch_patches.py",
                "tests/test_toolkit_wheels.py",
                "tests/test_matrix_build.py",
            ]
        ),
    ]
    session.run(sys.executable, "-m", "pytest", "-m", "e2e", "-v", "-s", *files, *recipes, *options)


# What `nox -s lint` reads: the Python ruff formats and checks, the text codespell reads.
PYTHON_PATHS = ["cuw", "tests", "noxfile.py", "tasks.py", "benchmarks"]
SPELLED_PATHS = ["cuw", "docs", "tests", "README.md", "recipes"]


def shell_scripts() -> list[str]:
    """Every tracked shell script: a ``.sh`` file, or one whose first line runs sh or bash (.ci/run)."""
    root = Path(__file__).resolve().parent
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
    found = []
    for name in filter(None, tracked.split("\0")):
        path = root / name
        if not path.is_file():
            continue
        with open(path, "rb") as fh:
            first = fh.readline(200)
        if name.endswith(".sh") or re.match(rb"#!\s*\S*/(env\s+)?(ba)?sh\b", first):
            found.append(name)
    return found


@nox.session
def lint(session: nox.Session) -> None:
    """Lint: ruff format --check, ruff check, mypy over cuw/, shellcheck over the shell scripts, codespell: nox -s lint.

    The tools are the ones pinned in the test extra, found beside this Python (pyproject.toml
    configures each: [tool.ruff], [tool.mypy], [tool.codespell])."""
    bin_dir = Path(sys.executable).parent
    session.run(str(bin_dir / "ruff"), "format", "--check", *PYTHON_PATHS)
    session.run(str(bin_dir / "ruff"), "check", *PYTHON_PATHS)
    session.run(str(bin_dir / "mypy"))
    session.run(str(bin_dir / "shellcheck"), *shell_scripts())
    session.run(str(bin_dir / "codespell"), *SPELLED_PATHS)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site from docs/ (mkdocs.yml) into .docs-site/, strict: a warning, a broken link or anchor fails."""
    if importlib.util.find_spec("mkdocs") is None:
        session.error("mkdocs is not installed here: pip install -e '.[docs]'")
    session.run(sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (real nvcc, real ccache): nox -s tests [-- pytest args].

    Workers as WORKERS says. The ten slowest tests are listed at the end, every skip with its reason (-rfEs),
    and the run's wall time. What a test needs (torch, redis, mingw, ...) is declared in tests/conftest.py
    (NEEDS): a missing one skips, unless $CUW_REQUIRE lists it (CUW_REQUIRE=torch,redis or all): then
    the test fails, saying why."""
    import time

    args = session.posargs or ["-q", *WORKERS, "--durations=10"]
    started = time.monotonic()
    try:
        session.run(sys.executable, "-m", "pytest", "-rfEs", *args, env=BYTECODE)
    finally:
        minutes, seconds = divmod(round(time.monotonic() - started), 60)
        session.log(f"nox -s tests: {minutes} min {seconds:02d} s wall")
