"""nox sessions: thin wrappers over ``cuw`` (CI calls these same sessions).

They run in the current environment (``pip install -e '.[test,torch]'``):
the build backends, torch and the pinned ccache installed there are the ones
every shard and link must share.
"""

import sys

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]


@nox.session
def shard(session: nox.Session) -> None:
    """Compile one shard: nox -s shard -- <recipe> I/N (1-based)."""
    session.run(sys.executable, "-m", "cuw", "shard", *session.posargs)


@nox.session
def link(session: nox.Session) -> None:
    """Restore all shard caches, rebuild with every compile a hit, gate: nox -s link -- <recipe>."""
    session.run(sys.executable, "-m", "cuw", "link", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Build a whole cell here, all shards then the link: nox -s build -- <recipe> [--shards N]."""
    session.run(sys.executable, "-m", "cuw", "build", *(session.posargs or ["example"]))


@nox.session
def matrix(session: nox.Session) -> None:
    """The GitHub matrix JSON in chunks: nox -s matrix -- [--package P|all] [--platform …] [--cuda …] [--pytorch …]."""
    session.run(sys.executable, "-m", "cuw", "matrix", *session.posargs)


@nox.session
def verify(session: nox.Session) -> None:
    """The verify gate on a wheel: nox -s verify -- <wheel> [--recipe R]."""
    session.run(sys.executable, "-m", "cuw", "verify", *session.posargs)


@nox.session
def index(session: nox.Session) -> None:
    """A PEP 503 index from a folder of wheels: nox -s index -- <wheel-dir> <out-dir>."""
    session.run(sys.executable, "-m", "cuw", "index", *session.posargs)


@nox.session
def lint_guards(session: nox.Session) -> None:
    """CMake consumers of source-dependent targets not under if(TARGET ...): nox -s lint_guards -- <dir|recipe>."""
    session.run(sys.executable, "-m", "cuw", "lint-guards", *session.posargs)


@nox.session
def recipes(session: nox.Session) -> None:
    """List the recipes."""
    session.run(sys.executable, "-m", "cuw", "recipes", *session.posargs)


@nox.session
def toolkit(session: nox.Session) -> None:
    """A CUDA line's toolkit (system, a path or the pinned wheels, installed once): nox -s toolkit -- [--cuda 13.0] [--toolkit wheels]."""
    session.run(sys.executable, "-m", "cuw", "toolkit", *session.posargs)


@nox.session
def show(session: nox.Session) -> None:
    """A recipe's resolved configuration for a cell: nox -s show -- <recipe> [--cell linux/3.11/13.0/2.14]."""
    session.run(sys.executable, "-m", "cuw", "show", *session.posargs)


@nox.session
def plan(session: nox.Session) -> None:
    """Choose N without compiling: nox -s plan -- <recipe> [--shards N | --range 2..64] [--costs FILE] [--json]."""
    session.run(sys.executable, "-m", "cuw", "plan", *session.posargs)


@nox.session
def costs(session: nox.Session) -> None:
    """Record a recipe's cost table from real logs: nox -s costs -- <recipe> --from <seat log | .ninja_log> [...]."""
    session.run(sys.executable, "-m", "cuw", "costs", *session.posargs)


@nox.session
def grid(session: nox.Session) -> None:
    """The build grid; --check asks each CUDA line's torch index what it lacks: nox -s grid -- --check."""
    session.run(sys.executable, "-m", "cuw", "grid", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """A cell's shard timeline as one HTML file: nox -s report -- <cell work dir> [--output F]."""
    session.run(sys.executable, "-m", "cuw", "report", *session.posargs)


@nox.session
def record(session: nox.Session) -> None:
    """After a passed link: the wheel's build record, dist/<wheel>.build.json: nox -s record -- <recipe>."""
    session.run(sys.executable, "-m", "cuw", "record", *session.posargs)


@nox.session
def publish(session: nox.Session) -> None:
    """Add the wheels that arrived with build records to an index: nox -s publish -- <incoming> <index> [--reports DIR]."""
    session.run(sys.executable, "-m", "cuw", "publish", *session.posargs)


@nox.session
def workflow(session: nox.Session) -> None:
    """Run .github/workflows/build.yml here with act: nox -s workflow -- <recipe> [--platform …] [--cuda …] [--python …]."""
    session.run(sys.executable, "-m", "cuw", "workflow", *session.posargs)


@nox.session
def farm(session: nox.Session) -> None:
    """The farm tier: the real workflow under act, publish, pip install from the index (pytest -m farm)."""
    session.run(sys.executable, "-m", "pytest", "-m", "farm", "-v", "-s", "tests/test_farm.py", *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """Real packages from their sdists, sharded, linked and verified: nox -s e2e -- [<recipe> ...].

    Without recipes it also imports a torch wheel under every patch release of its line."""
    recipes = [f"--e2e-recipe={name}" for name in session.posargs]
    files = ["tests/test_real_packages.py", *([] if recipes else ["tests/test_torch_patches.py"])]
    session.run(sys.executable, "-m", "pytest", "-m", "e2e", "-v", "-s", *files, *recipes)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (real nvcc, real ccache): nox -s tests [-- pytest args]."""
    session.run(sys.executable, "-m", "pytest", *(session.posargs or ["-q"]))
