"""The command line's grammar: every verb and option, parsed without importing a job.

The one definition of the verbs: the nox sessions and invoke tasks are made from
:func:`verb_specs` (noxfile.py, tasks.py), so a verb or option exists everywhere or nowhere.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from cuw.base.errors import InputError
from cuw.config.paths import Paths
from cuw.toolchain.cache import TOOLS

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _git_mirror(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--git-mirror",
        default=None,
        metavar="PATH",
        help="take a git source from here instead of its URL: a git repository, a folder of mirrors "
        "(<name>.git, <name>, <owner>/<name>[.git], <name>-<version>.tar.gz) or a `git archive` "
        "tarball checked against source.archive_sha256 (default: $CUW_GIT_MIRROR)",
    )


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are the forge's one line and exit 2 (a bad choice, an unknown option,
    a missing argument), not its usage block: the line names the verb and where its options are."""

    def error(self, message: str) -> NoReturn:
        raise _usage_error(self.prog, message)


def _usage_error(prog: str, message: str) -> InputError:
    verb = prog.removeprefix("cuw").strip()
    return InputError(f"{verb + ': ' if verb else ''}{message}; `{prog} --help` lists {'its options' if verb else 'the verbs'}")


def parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an option the verb does not take is named with the verb (argparse names the
    top-level parser, which knows no options)."""
    args, extras = parser().parse_known_args(argv)
    if extras:
        raise _usage_error(f"cuw {args.verb}", f"unrecognized arguments: {' '.join(extras)}")
    return args


def _common(p: argparse.ArgumentParser, dist: bool = True) -> None:
    p.add_argument("--recipes", type=Path, default=None, help="recipes folder (default: $CUW_RECIPES or ./recipes)")
    p.add_argument("--work", type=Path, default=Paths.work, help="job folders (default: %(default)s)")
    p.add_argument("--artifacts", type=Path, default=Paths.artifacts, help="shard archives, per cell (default: %(default)s)")
    if dist:
        p.add_argument("--dist", type=Path, default=Paths.dist, help="wheels that passed the link gate (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=None, help="parallel compile jobs inside one build (default: cores)")
    p.add_argument(
        "--cache-tool",
        choices=TOOLS,
        default=None,
        help="compiler cache (default: $CUW_CACHE_TOOL, else the lane's in recipes/defaults.yml)",
    )
    p.add_argument(
        "--cache-remote",
        default=None,
        metavar="URL",
        help="shared ccache remote (redis://, http://, file:); replaces the archives "
        "(default: $CUW_CACHE_REMOTE, else recipes/defaults.yml)",
    )
    p.add_argument(
        "--backend",
        choices=("pip", "cibuildwheel"),
        default="pip",
        help="pip: build here (default; the job calls the project's PEP 517 backend, as pip wheel --no-build-isolation "
        "would); cibuildwheel: the same job inside cibuildwheel's manylinux container or Windows build",
    )
    p.add_argument(
        "--cell",
        default=None,
        metavar="LANE/PY/CUDA[/TORCH]",
        help="with --backend cibuildwheel: the cell to build (default: this machine's)",
    )
    p.add_argument(
        "--image",
        default=None,
        metavar="REF",
        help="run each job in a container of this build image (its /opt/python, compiler and glibc; "
        "the wheel gets its floor): a reference the engine has, e.g. the one `cuw image` prints",
    )
    _engine_option(p)
    _git_mirror(p)
    _toolkit_option(p)


def _engine_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=("docker", "podman"),
        default=None,
        help="the container engine (default: $CUW_ENGINE, else docker, then podman on PATH)",
    )


def _toolkit_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--toolkit",
        default=None,
        metavar="system|wheels|PATH",
        help="the CUDA toolkit for this run: system (CUW_CUDA_HOME, CUDA_HOME, nvcc on PATH, "
        "/usr/local/cuda-13.0), wheels (NVIDIA's wheels pinned in recipes/defaults.yml toolkit_wheels, "
        "installed once under $CUW_TOOLKITS) or a toolkit folder "
        "(default: $CUW_TOOLKIT, else toolkits.<line> in recipes/defaults.yml, else system)",
    )


def _shard_verb(sub: Subparsers) -> None:
    p = sub.add_parser("shard", help="compile one shard (I/N, 1-based) and write its cache archive")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("shard", help="I/N, 1-based: 3/23 is shard 3 of 23")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument(
        "--deadline",
        default=None,
        metavar="WHEN",
        help="start no compile after WHEN (+SECONDS from the job's start, a Unix time, or an ISO-8601 UTC time): "
        "the job packs what it has as a partial part and says how to continue (exit 0)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="ARCHIVE",
        help="continue this shard from its partial archive (the previous part's, its report beside it): "
        "restored before the build; every TU finished there must be a cache hit",
    )
    _common(p, dist=False)


def _build_number_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--build-number",
        default=None,
        metavar="K|VERSION=K",
        help="the wheel's build number (PEP 427 build tag, WHEEL's Build:; 0, the default, is untagged): K, or "
        "VERSION=K[,VERSION=K] for a wheel of that upstream version (another version is build 0): what the plan "
        "gives a rebuild",
    )
    p.add_argument(
        "--published",
        default=None,
        metavar="FOLDER|URL",
        help="the published index (a folder, or the URL it is served at): the wheel takes the next free build "
        "number of its version there (the published one's, when its record names today's inputs)",
    )


def _link_verb(sub: Subparsers) -> None:
    p = sub.add_parser("link", help="restore every shard archive, rebuild with all hits, gate, write the wheel")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    _common(p)
    _build_number_options(p)


def _build_verb(sub: Subparsers) -> None:
    p = sub.add_parser("build", help="the whole cell here: all shards in parallel, then the link")
    p.add_argument("recipe", nargs="?", default="example", help="recipe name (default: %(default)s, the built-in example)")
    p.add_argument("--shards", type=int, default=None, help="N (default: the recipe's sharding.count)")
    p.add_argument(
        "--matrix",
        action="store_true",
        help="every cell of the recipe's matrix this machine can build; the others are listed as skipped",
    )
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"with --matrix: only these {flag} values")
    _common(p)
    _build_number_options(p)


def _lint_guards_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lint-guards",
        help="CMake consumers of targets that exist only when their sources do, not under if(TARGET ...) (exit 1 on findings)",
    )
    p.add_argument("target", help="a source folder or CMake file, or a recipe name (its fetched, patched source)")
    p.add_argument("--recipes", type=Path, default=None)
    _git_mirror(p)


def _verify_verb(sub: Subparsers) -> None:
    p = sub.add_parser("verify", help="the verify gate on a finished wheel (exit 0 pass, 1 fail, 2 cannot run)")
    p.add_argument("wheel", type=Path)
    p.add_argument("--recipe", default=None, help="recipe name (default: the recipe whose name matches the wheel)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument("--no-import", action="store_true", help="skip importing the modules")
    p.add_argument(
        "--torch-patches",
        action="store_true",
        help="also import the wheel under every patch release of the cell's torch line the index offers, "
        "each in a clean venv (made once under $CUW_TORCH_VENVS or ~/.cache/cuw/torch-venvs)",
    )
    p.add_argument(
        "--torch-index",
        default=None,
        metavar="URL",
        help="with --torch-patches: the simple index to take torch from (default: the CUDA line's torch_index)",
    )


def _gpu_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "gpu",
        help="each wheel's GPU smoke (verify.gpu) on this machine's GPU, its shipped SASS only; the builds compared bit for bit",
    )
    p.add_argument(
        "wheels",
        nargs="+",
        help="wheels, folders (searched for *.whl; a subfolder per build: sharded/, unsharded/), "
        "or an index folder or URL (its listed wheels)",
    )
    p.add_argument("--package", default=None, metavar="NAME", help="only this package's wheels")
    p.add_argument("--recipe", default=None, help="recipe name (default: the recipe whose name matches each wheel)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="where <label>.gpu.json and .gpu.log go (default: beside the wheel)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="every step but the launches, with the GPUs hidden (runs without a GPU; its reports are never published)",
    )
    p.add_argument(
        "--into-index",
        type=Path,
        default=None,
        metavar="SITE",
        help="add each passing report to the index folder SITE beside its published wheel (append-only)",
    )
    p.add_argument("--timeout", type=float, default=240.0, metavar="S", help="one wheel's smoke at most (default: %(default)s s)")


def _index_verb(sub: Subparsers) -> None:
    p = sub.add_parser("index", help="a PEP 503 index (flat root and per-CUDA/torch channels) from a folder of wheels")
    p.add_argument("wheel_dir", type=Path)
    p.add_argument("out_dir", type=Path)


def _yank_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "yank", help="mark a published wheel yanked (PEP 592: installers skip it unless pinned with ==); its file stays"
    )
    p.add_argument("wheel", help="the wheel's file name, as the index lists it (packages.json)")
    p.add_argument("--index", type=Path, required=True, help="the index folder (cuw index or publish made it)")
    p.add_argument("--reason", default=None, metavar="TEXT", help="why (required to yank): the pages, pip and uv show it")
    p.add_argument("--undo", action="store_true", help="take the yank back: the wheel is offered again")
    p.add_argument(
        "--from-url",
        default=None,
        metavar="URL",
        help="first continue the index served at URL into --index, a new folder (an index on GitHub Pages: "
        "deploy the folder afterwards, as the pages job deploys a publish)",
    )


def _matrix_verb(sub: Subparsers) -> None:
    p = sub.add_parser("matrix", help="the GitHub matrix JSON, in chunks of <= 256 jobs and < 1 MB")
    p.add_argument("--package", default="all", help="a recipe, or all (default)")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"only these {flag} values (repeat or comma-separate)")
    p.add_argument("--chunk", default=None, help="print only this chunk (its id from the plan)")
    p.add_argument("--output", type=Path, default=None, help="write the JSON here instead of stdout")
    p.add_argument(
        "--on-host",
        action="store_true",
        help="jobs run on the runner itself, not in their lane's build image (images.<lane> in "
        "recipes/defaults.yml): for a local run of the workflow in act's host mode",
    )
    p.add_argument(
        "--published",
        default=None,
        metavar="FOLDER|URL",
        help="the published index (a folder, or the URL it is served at): cells whose build record there "
        "names today's inputs (recipe.yml's build settings, patch, source, archs, image, toolkit, wheel policy) are left out",
    )
    p.add_argument(
        "--rebuild",
        choices=("missing", "stale", "all"),
        default=None,
        help="with --published: plan the missing cells only, the stale ones too (default), or all (also those "
        "whose records, of an older inputs scheme, cannot be compared)",
    )
    p.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="LANE=REF",
        help="the jobs of this Linux lane run in REF (pinned by digest) instead of images.<lane>.ref: "
        "a local run's stand-in (repeat or comma-separate)",
    )
    p.add_argument("--recipes", type=Path, default=None)


def _audit_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "audit",
        help="check a published index against the grid and the policy: gaps, stale wheels, "
        "and every wheel through verify (names, RECORD, size, device code); exit 1 on findings",
    )
    p.add_argument(
        "--index", required=True, metavar="FOLDER|URL", help="the published index (a folder, or the URL it is served at)"
    )
    p.add_argument("--package", default="all", help="a recipe, or all (default)")
    p.add_argument("--format", choices=("md", "html"), default="md", help="the report's format (default md)")
    p.add_argument("--output", type=Path, default=None, help="write the report here instead of stdout")
    p.add_argument("--on-host", action="store_true", help="the wheels were built on their runners, not in the lanes' images")
    p.add_argument(
        "--image", action="append", default=[], metavar="LANE=REF", help="the build image a lane's wheels were built in"
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="the longest the wheels' reads may take together; a wheel not read by then is a finding (default: %(default)s)",
    )
    p.add_argument("--recipes", type=Path, default=None)


def _recipes_verb(sub: Subparsers) -> None:
    p = sub.add_parser("recipes", help="list the recipes: source, torch axis, sharding, platforms, cells")
    p.add_argument("--recipes", type=Path, default=None)


def _toolkit_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "toolkit", help="provision or find the CUDA toolkit of a line (system, a path, or pinned wheels) and print its folder"
    )
    p.add_argument("--cuda", default=None, metavar="X.Y", help="the CUDA line (default: the system toolkit's)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument(
        "--github-env",
        action="store_true",
        help="in a workflow: append CUW_CUDA_HOME/CUDA_HOME to $GITHUB_ENV and source=system|wheels|path "
        "to $GITHUB_OUTPUT; a system line is left to the install step that follows",
    )
    _toolkit_option(p)


def _show_verb(sub: Subparsers) -> None:
    p = sub.add_parser("show", help="the merged, resolved configuration of a recipe for one cell (JSON)")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument(
        "--cell",
        default=None,
        metavar="LANE/PY/CUDA[/TORCH]",
        help="for example linux/3.11/13.0/2.14 (default: this machine's cell)",
    )


def _plan_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plan",
        help="per N: TUs and families per shard, jobs per lane, predicted times; "
        "a recommended N and the checklist (no compile); --farm: the whole grid",
    )
    p.add_argument("recipe", nargs="?", default=None, help="recipe name (cuw recipes lists them); none with --farm")
    p.add_argument(
        "--farm",
        action="store_true",
        help="the whole grid from every recipe's cost table: runner-hours per lane and the wall time under "
        "--concurrency limits, shard jobs over GitHub's 6 h cap",
    )
    p.add_argument(
        "--concurrency",
        default=None,
        metavar="C,C",
        help="with --farm: concurrent jobs to plan for (default 20,60: GitHub Free and Team)",
    )
    p.add_argument(
        "--count",
        action="append",
        default=[],
        metavar="RECIPE=N",
        help="with --farm: plan RECIPE at N shards instead of its sharding.count (repeatable)",
    )
    p.add_argument("--shards", type=int, default=None, help="plan this N only (one recipe; --count with --farm)")
    p.add_argument("--range", default=None, metavar="A..B", help="plan every N from A to B (default: 2..64)")
    p.add_argument("--costs", type=Path, default=None, help="a cost table (default: the recipe's costs.json)")
    p.add_argument("--from-log", type=Path, default=None, help="seat filter: the TUs of this recorded seat log")
    p.add_argument("--check", type=int, default=None, metavar="N", help="run the checklist at N (default: sharding.count)")
    p.add_argument(
        "--cap",
        type=float,
        default=None,
        metavar="MINUTES",
        help="a job's limit in minutes instead of jobs.limit_minutes in recipes/defaults.yml (also with --farm): "
        "a shard's build gets it less jobs.margin_minutes; a shard predicted past that is flagged with "
        "the chain it needs or the smallest N that needs none",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON (same as --format json; one recipe only)")
    p.add_argument(
        "--format",
        choices=("text", "json", "markdown", "html"),
        default=None,
        help="text (default), json, markdown (a table for a step summary) or html (a page with the curve); "
        "--farm prints text only",
    )
    p.add_argument("--output", type=Path, default=None, help="write the plan here instead of stdout")
    p.add_argument("--recipes", type=Path, default=None)
    _git_mirror(p)


def _grid_verb(sub: Subparsers) -> None:
    p = sub.add_parser("grid", help="the build grid; --check asks the torch indexes what the grid lacks (exit 1 then)")
    p.add_argument("--check", action="store_true", help="compare grid.torch with each CUDA line's torch_index")
    p.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="CUDA=URL",
        help="ask this simple index for a CUDA line instead of torch_index (repeatable)",
    )
    p.add_argument("--recipes", type=Path, default=None)


def _report_verb(sub: Subparsers) -> None:
    p = sub.add_parser("report", help="a cell's shard timeline as one self-contained HTML file (inline SVG, no network)")
    p.add_argument("cell_dir", type=Path, help="the cell's work folder, e.g. .cuw/work/example-linux-py3.11-cu13.0-notorch")
    p.add_argument(
        "--artifacts", type=Path, default=Paths.artifacts, help="where the shard gate reports are (default: %(default)s)"
    )
    p.add_argument("--dist", type=Path, default=Paths.dist, help="where the link report is (default: %(default)s)")
    p.add_argument("--output", type=Path, default=None, help="the HTML file (default: <cell_dir>/report.html)")


def _costs_verb(sub: Subparsers) -> None:
    p = sub.add_parser("costs", help="record a recipe's cost table (recipes/<name>/costs.json) from real build logs")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument(
        "--from",
        dest="logs",
        type=Path,
        action="append",
        required=True,
        help=(
            "a seat log (logs/seat.jsonl), a build's .ninja_log, a shard report (cuw-shard-*.report.json: "
            "its seat log's TUs, and the shard's cost beside its compiles) or a link report (link.report.json, "
            "<wheel>.link.json: the link's cost beside its replays, for the planner); repeat for several"
        ),
    )
    p.add_argument("--source-root", type=Path, default=None, help="with a .ninja_log outside a forge job: the source root")
    p.add_argument("--output", type=Path, default=None, help="write here (default: the recipe's costs.json)")
    p.add_argument("--recipes", type=Path, default=None)


def _record_verb(sub: Subparsers) -> None:
    p = sub.add_parser("record", help="after a passed link: the wheel's build record, dist/<wheel>.build.json")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--dist", type=Path, default=Paths.dist, help="where the link put the wheel (default: %(default)s)")
    p.add_argument("--artifacts", type=Path, default=Paths.artifacts, help="the shard reports, per cell (default: %(default)s)")
    p.add_argument("--recipes", type=Path, default=None)


def _publish_verb(sub: Subparsers) -> None:
    p = sub.add_parser("publish", help="add every wheel that arrived with its build record to an index (append-only)")
    p.add_argument("incoming", type=Path, help="folder of wheels and their .build.json records (searched recursively)")
    p.add_argument("index", type=Path, help="the index folder (created when new)")
    p.add_argument("--reports", type=Path, default=None, help="the links' gate reports: cells not published are named with why")
    p.add_argument(
        "--from-url",
        default=None,
        metavar="URL",
        help="continue the index served at URL (its cuw-index.json and build records, fetched into INDEX, "
        "a new folder): a runner that starts empty never publishes from nothing, nor fewer wheels",
    )
    p.add_argument(
        "--asset-url",
        default=None,
        metavar="TEMPLATE",
        help="keep the wheels elsewhere (release assets): the pages link TEMPLATE with {recipe} and {wheel} "
        "filled in, and the new wheels go to --upload for the upload step",
    )
    p.add_argument("--upload", type=Path, default=None, metavar="DIR", help="with --asset-url: where the new wheels go")
    p.add_argument(
        "--first",
        action="store_true",
        help="the first publish: the site --from-url names serves no index yet (its cuw-index.json answers 404), "
        "so INDEX starts empty; refused where the site serves one",
    )


def _upload_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "upload",
        help="the files publish --upload left, as GitHub release assets (absent ones uploaded, the same bytes skipped, "
        "none replaced), then every asset the index lists verified; exit 1 otherwise",
    )
    p.add_argument(
        "folder", type=Path, help="the files publish --upload left: wheels, their records, any file named after its wheel"
    )
    p.add_argument("site", type=Path, help="the index publish wrote: its cuw-index.json names each wheel's release and asset")
    p.add_argument(
        "--repo",
        default=None,
        metavar="OWNER/NAME",
        help="the releases' repository (default: $GITHUB_REPOSITORY); the API is $GITHUB_API_URL, the token $GH_TOKEN "
        "or $GITHUB_TOKEN",
    )


def _image_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "image", help="build the local stand-in build image from its recipe (once per recipe digest) and print its reference"
    )
    p.add_argument(
        "--from",
        dest="yml",
        type=Path,
        default=None,
        metavar="YML",
        help="the image recipe (default: images/standin-<this machine's arch>.yml)",
    )
    _engine_option(p)


def _workflow_verb(sub: Subparsers) -> None:
    p = sub.add_parser(
        "workflow",
        help="run .github/workflows/build.yml here with act for a recipe's chunk: host mode, "
        "or with --engine docker every job in a container of its own",
    )
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"only these {flag} values (repeat or comma-separate)")
    p.add_argument("--chunk", default=None, help="the chunk id, when the filters leave more than one")
    p.add_argument("--index", type=Path, default=None, help="the index folder the publish job adds to (default: .cuw/farm/index)")
    p.add_argument(
        "--fail-shard",
        default=None,
        metavar="CELL:I/N",
        help="fault switch: make this shard job fail (for example example-linux-py3.11-cu13.0-notorch:2/4)",
    )
    p.add_argument("--jobs", type=int, default=None, help="act's concurrent jobs (default: act's, the number of CPUs)")
    p.add_argument(
        "--engine",
        choices=("docker",),
        default=None,
        help="act in docker mode: the plan and publish jobs in the runner image (images/runner-<arch>.yml), "
        "the Linux build jobs in the stand-in build image pinned through a registry on 127.0.0.1, "
        "each job in its own container (default: host mode, every job a process tree here)",
    )
    p.add_argument("--recipes", type=Path, default=None)


def parser() -> argparse.ArgumentParser:
    """The whole grammar: the top parser and each verb's, in the order ``cuw --help`` lists them."""
    top = _Parser(prog="cuw", description="Build a CUDA wheel as N compile shards and a link job.")
    sub = top.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for add_verb in _VERBS:
        add_verb(sub)
    return top


_VERBS = (
    _shard_verb,
    _link_verb,
    _build_verb,
    _lint_guards_verb,
    _verify_verb,
    _gpu_verb,
    _index_verb,
    _yank_verb,
    _matrix_verb,
    _audit_verb,
    _recipes_verb,
    _toolkit_verb,
    _show_verb,
    _plan_verb,
    _grid_verb,
    _report_verb,
    _costs_verb,
    _record_verb,
    _publish_verb,
    _upload_verb,
    _image_verb,
    _workflow_verb,
)


@dataclass(frozen=True)
class OptionSpec:
    flag: str
    """``--shards``; a positional argument has its name here and ``positional`` set."""
    dest: str
    help: str
    positional: bool = False
    switch: bool = False
    """A flag without a value (``--quiet``)."""
    repeat: bool = False
    """May be given several times (``--from``): a wrapper passes comma-separated values one by one."""
    required: bool = True
    path: bool = False
    """Names a file or folder (its type is a path, or its metavar says PATH, DIR, FOLDER, SITE,
    YML or ARCHIVE): what the tests of special files (a FIFO, a device, a link) walk."""


_PATH_METAVARS = ("PATH", "DIR", "FOLDER", "SITE", "YML", "ARCHIVE")


def _names_a_path(action: argparse.Action) -> bool:
    return action.type is Path or any(word in str(action.metavar or "") for word in _PATH_METAVARS)


@dataclass(frozen=True)
class VerbSpec:
    name: str
    help: str
    options: tuple[OptionSpec, ...]


def verb_specs() -> list[VerbSpec]:
    """Every verb with its arguments, read from :func:`parser` (what the wrappers are made from)."""
    top = parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    specs = []
    for name, p in sub.choices.items():
        options = []
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            positional = not action.option_strings
            flag = action.dest if positional else max(action.option_strings, key=len)
            options.append(
                OptionSpec(
                    flag=flag,
                    dest=action.dest,
                    help=(action.help or "").replace("%(default)s", str(action.default)),
                    positional=positional,
                    switch=isinstance(action, argparse._StoreTrueAction),
                    repeat=isinstance(action, argparse._AppendAction),
                    required=positional and action.nargs not in ("?", "*"),
                    path=_names_a_path(action),
                )
            )
        specs.append(VerbSpec(name, helps.get(name, ""), tuple(options)))
    return specs
