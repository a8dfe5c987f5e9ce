"""invoke tasks: the same verbs as the nox sessions, calling the same ``cuw`` CLI."""

import shlex
import sys

from invoke import Context, task


def _cuw(c: Context, *args: str) -> None:
    c.run(shlex.join([sys.executable, "-m", "cuw", *args]), pty=False)


_BACKEND_HELP = {"backend": "pip (default) or cibuildwheel", "cell": "with cibuildwheel: LANE/PY/CUDA[/TORCH]"}


def _backend(backend: str, cell: str) -> list[str]:
    return ["--backend", backend, *(["--cell", cell] if cell else [])]


@task(help={"recipe": "recipe name", "spec": "I/N, 1-based (for example 3/23)", **_BACKEND_HELP})
def shard(c, recipe, spec, backend="pip", cell=""):
    """Compile one shard of a recipe and write its cache archive."""
    _cuw(c, "shard", recipe, spec, *_backend(backend, cell))


@task(help={"recipe": "recipe name", **_BACKEND_HELP})
def link(c, recipe, backend="pip", cell=""):
    """Restore all shard caches, rebuild with every compile a hit, gate, write the wheel."""
    _cuw(c, "link", recipe, *_backend(backend, cell))


# Numbers are passed on as text: the cuw CLI checks them and says what is wrong in one line.


@task(help={"recipe": "recipe name", "shards": "N (default: the recipe's sharding.count)", **_BACKEND_HELP})
def build(c, recipe="example", shards="", backend="pip", cell=""):
    """Build a whole cell here: every shard in parallel, then the link."""
    _cuw(c, "build", recipe, *(["--shards", shards] if shards else []), *_backend(backend, cell))


@task(help={"wheel": "path to a wheel", "recipe": "recipe name (default: matched by the wheel's name)"})
def verify(c, wheel, recipe=""):
    """The verify gate on a finished wheel."""
    _cuw(c, "verify", wheel, *(["--recipe", recipe] if recipe else []))


@task(help={"wheel_dir": "folder of finished wheels", "out_dir": "where the index goes"})
def index(c, wheel_dir, out_dir):
    """A PEP 503 index (flat root and per-CUDA/torch channels) from a folder of wheels."""
    _cuw(c, "index", wheel_dir, out_dir)


@task(help={"package": "a recipe, or all", "chunk": "print only this chunk"})
def matrix(c, package="all", chunk=""):
    """The GitHub matrix JSON in dispatchable chunks."""
    _cuw(c, "matrix", "--package", package, *(["--chunk", chunk] if chunk else []))


@task
def recipes(c):
    """List the recipes."""
    _cuw(c, "recipes")


@task(help={"cuda": "the CUDA line (default: the system toolkit's)", "toolkit": "system, wheels or a toolkit folder"})
def toolkit(c, cuda="", toolkit=""):
    """A CUDA line's toolkit: the system's, a path, or NVIDIA's pinned wheels (installed once)."""
    _cuw(c, "toolkit", *(["--cuda", cuda] if cuda else []), *(["--toolkit", toolkit] if toolkit else []))


@task(help={"recipe": "recipe name", "cell": "LANE/PY/CUDA[/TORCH] (default: this machine's cell)"})
def show(c, recipe, cell=""):
    """A recipe's merged, resolved configuration for one cell."""
    _cuw(c, "show", recipe, *(["--cell", cell] if cell else []))


@task(help={"recipe": "recipe name", "shards": "plan this N only", "range": "A..B (default 2..64)",
            "costs": "a cost table (default: the recipe's costs.json)", "json": "print JSON"})  # fmt: skip
def plan(c, recipe, shards="", range="", costs="", json=False):
    """Per N: TUs and families per shard, jobs per lane, predicted times; a recommended N and the checklist."""
    _cuw(c, "plan", recipe, *(["--shards", shards] if shards else []), *(["--range", range] if range else []),
         *(["--costs", costs] if costs else []), *(["--json"] if json else []))  # fmt: skip


@task(help={"recipe": "recipe name", "log": "a seat log or .ninja_log (comma-separate several)"})
def costs(c, recipe, log):
    """Record a recipe's cost table (recipes/<name>/costs.json) from real build logs."""
    _cuw(c, "costs", recipe, *[a for item in log.split(",") for a in ("--from", item)])


@task(help={"check": "ask each CUDA line's torch index what the grid lacks (exit 1 then)"})
def grid(c, check=False):
    """The build grid, or with --check what the torch indexes publish that it lacks."""
    _cuw(c, "grid", *(["--check"] if check else []))


@task(help={"cell_dir": "the cell's work folder (.cuw/work/<cell id>)", "output": "the HTML file"})
def report(c, cell_dir, output=""):
    """A cell's shard timeline as one self-contained HTML file."""
    _cuw(c, "report", cell_dir, *(["--output", output] if output else []))


@task(help={"target": "a source folder or CMake file, or a recipe name (its fetched, patched source)"})
def lint_guards(c, target):
    """CMake consumers of source-dependent targets not under if(TARGET ...)."""
    _cuw(c, "lint-guards", target)


@task(help={"recipe": "recipe name", "platform": "lanes (comma-separated)", "cuda": "CUDA lines", "python": "Pythons",
            "pytorch": "torch releases", "chunk": "the chunk id when the filters leave several",
            "index": "the index folder (default .cuw/farm/index)", "fail_shard": "fault switch: CELL:I/N fails"})  # fmt: skip
def workflow(c, recipe, platform="", cuda="", python="", pytorch="", chunk="", index="", fail_shard=""):
    """Run .github/workflows/build.yml here with act (host mode) for the recipe's chunk, publish into an index."""
    opts = {"--platform": platform, "--cuda": cuda, "--python": python, "--pytorch": pytorch, "--chunk": chunk,
            "--index": index, "--fail-shard": fail_shard}  # fmt: skip
    _cuw(c, "workflow", recipe, *[a for flag, value in opts.items() if value for a in (flag, value)])


@task
def tests(c):
    """Run the test suite (real nvcc, real ccache)."""
    c.run(shlex.join([sys.executable, "-m", "pytest", "-q"]))
