"""``cuw``: the command line every entry point (nox, invoke, CI) goes through."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from cuw.gates import report
from cuw.toolchain.cache import TOOLS
from cuw.base.errors import CuwError
from cuw.base.files import check_destination, writable_dir, write_text
from cuw.config.limits import check_count
from cuw.partition.rules import parse_shard_spec
from cuw.jobs.paths import Paths
from cuw.config.grid import cell_archs
from cuw.config.policy import CacheChoice, cache_choice, load_policy
from cuw.config.recipe import Recipe, default_recipes_dir, known_recipes, load_recipe

if TYPE_CHECKING:
    from cuw.ci import matrix


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise CuwError(message)


def _common(p: argparse.ArgumentParser, dist: bool = True) -> None:
    p.add_argument("--recipes", type=Path, default=None, help="recipes folder (default: $CUW_RECIPES or ./recipes)")
    p.add_argument("--work", type=Path, default=Paths.work, help="job folders (default: %(default)s)")
    p.add_argument("--artifacts", type=Path, default=Paths.artifacts, help="shard archives, per cell (default: %(default)s)")
    if dist:
        p.add_argument("--dist", type=Path, default=Paths.dist, help="wheels that passed the link gate (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=None, help="parallel compile jobs inside one build (default: cores)")
    p.add_argument("--cache-tool", choices=TOOLS, default=None,
                   help="compiler cache (default: $CUW_CACHE_TOOL, else the lane's in recipes/defaults.yml)")
    p.add_argument("--cache-remote", default=None, metavar="URL",
                   help="shared ccache remote (redis://, http://, file:); replaces the archives "
                        "(default: $CUW_CACHE_REMOTE, else recipes/defaults.yml)")  # fmt: skip
    p.add_argument("--backend", choices=("pip", "cibuildwheel"), default="pip",
                   help="pip: build here (default); cibuildwheel: the same job inside cibuildwheel's "
                        "manylinux container or Windows build")  # fmt: skip
    p.add_argument("--cell", default=None, metavar="LANE/PY/CUDA[/TORCH]",
                   help="with --backend cibuildwheel: the cell to build (default: this machine's)")
    _toolkit_option(p)


def _toolkit_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--toolkit", default=None, metavar="system|wheels|PATH",
                   help="the CUDA toolkit for this run: system (CUW_CUDA_HOME, CUDA_HOME, nvcc on PATH, "
                        "/usr/local/cuda-13.0), wheels (NVIDIA's wheels pinned in recipes/defaults.yml toolkit_wheels, "
                        "installed once under $CUW_TOOLKITS) or a toolkit folder "
                        "(default: $CUW_TOOLKIT, else toolkits.<line> in recipes/defaults.yml, else system)")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="cuw", description="Build a CUDA wheel as N compile shards and a link job.")
    sub = top.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    p = sub.add_parser("shard", help="compile one shard (I/N, 1-based) and write its cache archive")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("shard", help="I/N, 1-based: 3/23 is shard 3 of 23")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _common(p, dist=False)

    p = sub.add_parser("link", help="restore every shard archive, rebuild with all hits, gate, write the wheel")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    _common(p)

    p = sub.add_parser("build", help="the whole cell here: all shards in parallel, then the link")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--shards", type=int, default=None, help="N (default: the recipe's sharding.count)")
    p.add_argument("--matrix", action="store_true",
                   help="every cell of the recipe's matrix this machine can build; the others are listed as skipped")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"with --matrix: only these {flag} values")  # fmt: skip
    _common(p)

    p = sub.add_parser("lint-guards", help="CMake consumers of targets that exist only when their sources do, "
                                           "not under if(TARGET ...) (exit 1 on findings)")  # fmt: skip
    p.add_argument("target", help="a source folder or CMake file, or a recipe name (its fetched, patched source)")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("verify", help="the verify gate on a finished wheel (exit 0 pass, 1 fail, 2 cannot run)")
    p.add_argument("wheel", type=Path)
    p.add_argument("--recipe", default=None, help="recipe name (default: the recipe whose name matches the wheel)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument("--no-import", action="store_true", help="skip importing the modules")
    p.add_argument("--torch-patches", action="store_true",
                   help="also import the wheel under every patch release of the cell's torch line the index offers, "
                        "each in a clean venv (made once under $CUW_TORCH_VENVS or ~/.cache/cuw/torch-venvs)")
    p.add_argument("--torch-index", default=None, metavar="URL",
                   help="with --torch-patches: the simple index to take torch from (default: the CUDA line's torch_index)")

    p = sub.add_parser("index", help="a PEP 503 index (flat root and per-CUDA/torch channels) from a folder of wheels")
    p.add_argument("wheel_dir", type=Path)
    p.add_argument("out_dir", type=Path)

    p = sub.add_parser("matrix", help="the GitHub matrix JSON, in chunks of <= 256 jobs and < 1 MB")
    p.add_argument("--package", default="all", help="a recipe, or all (default)")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"only these {flag} values (repeat or comma-separate)")
    p.add_argument("--chunk", default=None, help="print only this chunk (its id from the plan)")
    p.add_argument("--output", type=Path, default=None, help="write the JSON here instead of stdout")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("recipes", help="list the recipes: source, torch axis, sharding, platforms, cells")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("toolkit", help="provision or find the CUDA toolkit of a line (system, a path, or pinned wheels) "
                                       "and print its folder")  # fmt: skip
    p.add_argument("--cuda", default=None, metavar="X.Y", help="the CUDA line (default: the system toolkit's)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument("--github-env", action="store_true",
                   help="in a workflow: append CUW_CUDA_HOME/CUDA_HOME to $GITHUB_ENV and source=system|wheels|path "
                        "to $GITHUB_OUTPUT; a system line is left to the install step that follows")  # fmt: skip
    _toolkit_option(p)

    p = sub.add_parser("show", help="the merged, resolved configuration of a recipe for one cell (JSON)")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--recipes", type=Path, default=None)
    p.add_argument("--cell", default=None, metavar="LANE/PY/CUDA[/TORCH]",
                   help="for example linux/3.11/13.0/2.14 (default: this machine's cell)")  # fmt: skip

    p = sub.add_parser("plan", help="per N: TUs and families per shard, jobs per lane, predicted times; "
                                    "a recommended N and the checklist (no compile)")  # fmt: skip
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--shards", type=int, default=None, help="plan this N only")
    p.add_argument("--range", default=None, metavar="A..B", help="plan every N from A to B (default: 2..64)")
    p.add_argument("--costs", type=Path, default=None, help="a cost table (default: the recipe's costs.json)")
    p.add_argument("--from-log", type=Path, default=None, help="seat filter: the TUs of this recorded seat log")
    p.add_argument("--check", type=int, default=None, metavar="N", help="run the checklist at N (default: sharding.count)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (same as --format json)")
    p.add_argument("--format", choices=("text", "json", "markdown", "html"), default=None,
                   help="text (default), json, markdown (a table for a step summary) or html (a page with the curve)")
    p.add_argument("--output", type=Path, default=None, help="write the plan here instead of stdout")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("grid", help="the build grid; --check asks the torch indexes what the grid lacks (exit 1 then)")
    p.add_argument("--check", action="store_true", help="compare grid.torch with each CUDA line's torch_index")
    p.add_argument("--index", action="append", default=[], metavar="CUDA=URL",
                   help="ask this simple index for a CUDA line instead of torch_index (repeatable)")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("report", help="a cell's shard timeline as one self-contained HTML file (inline SVG, no network)")
    p.add_argument("cell_dir", type=Path, help="the cell's work folder, e.g. .cuw/work/example-linux-py3.11-cu13.0-notorch")
    p.add_argument("--artifacts", type=Path, default=Paths.artifacts, help="where the shard gate reports are (default: %(default)s)")
    p.add_argument("--dist", type=Path, default=Paths.dist, help="where the link report is (default: %(default)s)")
    p.add_argument("--output", type=Path, default=None, help="the HTML file (default: <cell_dir>/report.html)")

    p = sub.add_parser("costs", help="record a recipe's cost table (recipes/<name>/costs.json) from real build logs")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--from", dest="logs", type=Path, action="append", required=True,
                   help="a seat log (logs/seat.jsonl) or a build's .ninja_log; repeat for several shards")  # fmt: skip
    p.add_argument("--source-root", type=Path, default=None, help="with a .ninja_log outside a forge job: the source root")
    p.add_argument("--output", type=Path, default=None, help="write here (default: the recipe's costs.json)")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("record", help="after a passed link: the wheel's build record, dist/<wheel>.build.json")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    p.add_argument("--dist", type=Path, default=Paths.dist, help="where the link put the wheel (default: %(default)s)")
    p.add_argument("--artifacts", type=Path, default=Paths.artifacts, help="the shard reports, per cell (default: %(default)s)")
    p.add_argument("--recipes", type=Path, default=None)

    p = sub.add_parser("publish", help="add every wheel that arrived with its build record to an index (append-only)")
    p.add_argument("incoming", type=Path, help="folder of wheels and their .build.json records (searched recursively)")
    p.add_argument("index", type=Path, help="the index folder (created when new)")
    p.add_argument("--reports", type=Path, default=None, help="the links' gate reports: cells not published are named with why")

    p = sub.add_parser("workflow", help="run .github/workflows/build.yml here with act (host mode) for a recipe's chunk")
    p.add_argument("recipe", help="recipe name (cuw recipes lists them)")
    for flag in ("platform", "cuda", "pytorch", "python"):
        p.add_argument(f"--{flag}", action="append", default=[], help=f"only these {flag} values (repeat or comma-separate)")
    p.add_argument("--chunk", default=None, help="the chunk id, when the filters leave more than one")
    p.add_argument("--index", type=Path, default=None, help="the index folder the publish job adds to (default: .cuw/farm/index)")
    p.add_argument("--fail-shard", default=None, metavar="CELL:I/N",
                   help="fault switch: make this shard job fail (for example example-linux-py3.11-cu13.0-notorch:2/4)")
    p.add_argument("--jobs", type=int, default=None, help="act's concurrent jobs (default: act's, the number of CPUs)")
    p.add_argument("--recipes", type=Path, default=None)
    return top


def _paths(args: argparse.Namespace) -> Paths:
    return Paths(work=args.work, artifacts=args.artifacts, dist=getattr(args, "dist", Paths.dist))


def _cache(args: argparse.Namespace, recipe: Recipe, recipes_dir: Path) -> Optional[CacheChoice]:
    if args.cache_tool is None and args.cache_remote is None:
        return None  # the pipeline reads the policy for the cell's lane
    from cuw.config.cell import local_lane

    return cache_choice(load_policy(recipes_dir), local_lane(), args.cache_tool, args.cache_remote)


def _lint_guards(args: argparse.Namespace, recipes_dir: Path) -> int:
    """A folder or file as it is; a recipe name: its source as the jobs see it (fetched, patched)."""
    import tempfile

    from cuw.tools.cmake_guards import find_unguarded

    given = Path(args.target)
    if given.exists():
        findings, where = find_unguarded(given), str(given)
    elif "/" in args.target or "\\" in args.target:
        raise CuwError(f"lint-guards: {given}: no such file or folder")
    else:
        from cuw.tools.planner import prepare_tree

        recipe = load_recipe(args.target, recipes_dir)
        with tempfile.TemporaryDirectory(prefix="cuw-lint-") as tmp:
            findings = find_unguarded(prepare_tree(recipe, Path(tmp) / "src") / recipe.build_subdir)
        where = f"the patched source of {recipe.key}"
    for finding in findings:
        print(finding)
    if findings:
        report.say(f"lint-guards: {len(findings)} unguarded consumer(s) in {where}")
        return 1
    report.say(f"lint-guards: every consumer of a source-dependent target in {where} is under if(TARGET ...)")
    return 0


def _verify(args: argparse.Namespace, recipes_dir: Path) -> int:
    from packaging.utils import canonicalize_name, parse_wheel_filename

    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit
    from cuw.wheel.verify import verify, write_verify_reports

    if not args.wheel.is_file():
        raise CuwError(f"no such wheel: {args.wheel}")
    key = args.recipe
    if key is None:
        try:
            dist = canonicalize_name(parse_wheel_filename(args.wheel.name)[0])
        except Exception:
            raise CuwError(f"{args.wheel.name} is not a wheel filename") from None
        matches = [k for k in known_recipes(recipes_dir) if canonicalize_name(load_recipe(k, recipes_dir).name) == dist]
        if not matches:
            raise CuwError(f"no recipe builds {dist}; pass --recipe (known: {', '.join(known_recipes(recipes_dir))})")
        key = matches[0]
    recipe = load_recipe(key, recipes_dir)
    _use_toolkit(args, recipes_dir)  # $CUW_TOOLKIT and the policy's toolkits, as the build had them
    toolkit = find_toolkit()
    cell = local_cell(recipe, toolkit)
    policy = load_policy(recipes_dir)
    archs = cell_archs(recipe, policy.archs, cell)
    patches = None
    if args.torch_index and not args.torch_patches:
        raise CuwError("--torch-index goes with --torch-patches")
    if args.torch_patches:
        from cuw.wheel import torch_venvs
        from cuw.wheel.verify import TorchPatches

        index = args.torch_index or policy.torch_index.get(cell.cuda)
        if not index:
            raise CuwError(f"--torch-patches: no torch_index for CUDA {cell.cuda} in recipes/defaults.yml; pass --torch-index URL")
        patches = TorchPatches(index, torch_venvs.default_root())
    checked = verify(args.wheel, recipe, cell, toolkit, policy.wheel, archs, import_check=not args.no_import,
                     torch_patches=patches)  # fmt: skip
    for check in checked.checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name:12} {'; '.join(check.details)}")
    as_json, as_md = write_verify_reports(checked, args.wheel)
    report.append_summary(checked.to_markdown())
    report.say(f"{checked.line} (reports: {as_json}, {as_md})")
    return 0 if checked.ok else 1


def _split(values: list[str], flag: str = "filter") -> tuple[str, ...]:
    """Repeated or comma-separated filter values; an empty one is refused (it would match everything)."""
    out = tuple(v.strip() for value in values for v in value.split(","))
    if any(not v for v in out):
        raise CuwError(f"--{flag}: an empty value (give a value like --{flag} {_EXAMPLE.get(flag, 'X')}, or leave the option out)")
    return out


_EXAMPLE = {"platform": "linux", "cuda": "13.0", "pytorch": "2.14", "python": "3.11"}


def _filters(args: argparse.Namespace) -> "matrix.Filters":
    from cuw.ci import matrix

    return matrix.Filters(*(_split(getattr(args, f), f) for f in ("platform", "cuda", "pytorch", "python")))


def _build_matrix(args: argparse.Namespace, recipe: Recipe, recipes_dir: Path) -> int:
    """``build --matrix``: the same cells the workflow gets, each built here in its own environment
    where this machine has its lane, CUDA line and Python (cuw/ci/matrix_build.py)."""
    from cuw.ci import matrix, matrix_build
    from cuw.config.cell import local_lane
    from cuw.toolchain.toolkit import find_toolkit

    filters = _filters(args)
    policy = load_policy(recipes_dir)
    selected = matrix.select(recipe, policy.grid, filters)
    note = matrix.collapse_note(recipe, policy.grid)
    if note:
        report.say(f"matrix: {recipe.key}: {note}")
    toolkit = find_toolkit()
    build, skipped = matrix_build.plan_local(recipe, selected, local_lane(), toolkit.version, str(toolkit.home))
    for row in skipped:
        report.say(f"skipped {row.cell.id}: needs {row.why}")
    if not build:
        raise CuwError(f"none of the {len(selected)} selected cells of {recipe.key} can be built on this machine: "
                       + "; ".join(f"{r.cell.id}: {r.why}" for r in skipped[:3]))  # fmt: skip
    paths = _paths(args)
    child = ["--work", str(paths.work.resolve()), "--artifacts", str(paths.artifacts.resolve()),
             "--dist", str(paths.dist.resolve()), "--recipes", str(recipes_dir.resolve())]  # fmt: skip
    if args.shards is not None:
        child += ["--shards", str(args.shards)]
    if args.cache_tool:
        child += ["--cache-tool", args.cache_tool]
    if args.cache_remote:
        child += ["--cache-remote", args.cache_remote]
    rows = matrix_build.run_matrix(recipe, policy.grid, policy.torch_index, build, child, paths.work, args.jobs, report.say)
    order = {cell: i for i, cell in enumerate(selected)}
    rows = sorted(rows + skipped, key=lambda r: order[r.cell])
    print(matrix_build.table(rows, f"{recipe.key}: {note}" if note else ""))
    built = [r for r in rows if r.status == "built"]
    attempted = [r for r in rows if r.status != "skipped" or r.wall]
    report.say(f"matrix: {len(built)}/{len(attempted)} built cells passed, {len(rows) - len(attempted)} skipped")
    return 0 if len(built) == len(attempted) and built else 1


def _cibuildwheel(args: argparse.Namespace, recipe: Recipe, recipes_dir: Path) -> int:
    """``--backend cibuildwheel``: the verb's jobs, each run by cibuildwheel (cuw/ci/cibw.py)."""
    from cuw.ci import cibw
    from cuw.config.cell import local_cell, parse_cell
    from cuw.toolchain.toolkit import find_toolkit

    if getattr(args, "matrix", False):
        raise CuwError("build --matrix builds with the pip backend; with cibuildwheel pass one --cell")
    cell = parse_cell(recipe, args.cell) if args.cell else local_cell(recipe, find_toolkit())
    choice = cache_choice(load_policy(recipes_dir), cell.lane, args.cache_tool, args.cache_remote)
    specs = cibw.job_specs(recipe, args.verb, getattr(args, "shard", None), getattr(args, "shards", None))
    return 0 if cibw.run_jobs(recipe, recipes_dir, cell, specs, _paths(args), choice, args.jobs) else 1


def _matrix(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.ci import matrix

    if args.output is not None:
        check_destination(args.output, "--output")
    keys = known_recipes(recipes_dir) if args.package == "all" else [args.package]
    recipes = [load_recipe(k, recipes_dir) for k in keys]
    filters = _filters(args)
    result = matrix.plan(recipes, load_policy(recipes_dir).grid, filters)
    text = matrix.dumps(matrix.chunk(result, args.chunk))  # an unknown chunk fails before any output
    if args.output:
        write_text(args.output, text, "--output")
    print(matrix.summary(result), file=sys.stderr)
    if not args.output:
        sys.stdout.write(text)
    return 0


def _show(args: argparse.Namespace, recipes_dir: Path) -> int:
    import dataclasses
    import json

    from cuw.config.cell import local_cell, parse_cell
    from cuw.wheel.finish import local_label
    from cuw.toolchain.toolkit import find_toolkit

    recipe = load_recipe(args.recipe, recipes_dir)
    policy = load_policy(recipes_dir)
    if args.cell:
        cell = parse_cell(recipe, args.cell)
    else:
        cell = local_cell(recipe, find_toolkit())
    from cuw.config.grid import require_in_grid

    require_in_grid(recipe, policy.grid, cell)
    shown = dataclasses.asdict(recipe)
    shown.update(
        cell=cell.to_dict(),
        cell_id=cell.id,
        local_version_label=local_label(cell),
        resolved_archs=cell_archs(recipe, policy.archs, cell),
        cache=dataclasses.asdict(cache_choice(policy, cell.lane)),
        manylinux=policy.wheel.manylinux.get(cell.lane),
    )
    print(json.dumps(shown, indent=2, sort_keys=True))
    return 0


def _plan(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.tools import planner

    recipe = load_recipe(args.recipe, recipes_dir)
    counts = planner.parse_counts(args.shards, args.range)
    if args.check is not None:
        check_count(args.check, "--check")
    if args.json and args.format not in (None, "json"):
        raise CuwError(f"--json and --format {args.format} ask for two formats; give one")
    fmt = "json" if args.json else args.format or "text"
    if args.output is not None:
        check_destination(args.output, "--output")
    result = planner.plan(recipe, counts, args.costs, args.from_log, checked_n=args.check)
    from cuw.tools import plan_views

    text = {"json": result.to_json, "markdown": lambda: plan_views.markdown(result), "html": lambda: plan_views.html(result),
            "text": lambda: planner.render(result) + "\n"}[fmt]()  # fmt: skip
    if args.output is not None:
        write_text(args.output, text, "--output")
        report.say(f"plan: {args.output}")
    else:
        sys.stdout.write(text)
    return 0 if result.ok else 1


def _costs(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.partition import costs
    from cuw.toolchain.nvcc_args import SOURCE_SUFFIXES
    from cuw.partition.globs import glob_match
    from cuw.config.recipe import costs_path

    recipe = load_recipe(args.recipe, recipes_dir)
    # The source filter partitions only its globs; the seat every source it compiles (host ones too).
    out = args.output or costs_path(Path(recipe.folder))
    check_destination(out, "--output")
    if args.source_root is not None and not args.source_root.is_dir():
        raise CuwError(f"--source-root {args.source_root} is not a folder")
    if recipe.sharding.filter == "source":
        globs = recipe.sharding.source.globs
        keep = lambda key: any(glob_match(key, g) for g in globs)  # noqa: E731
    else:
        keep = lambda key: key.endswith(SOURCE_SUFFIXES) and not key.startswith("../")  # noqa: E731
    table = costs.record(args.logs, out, args.source_root, keep)
    report.say(f"cost table: {len(table.costs)} TUs, {table.total:.1f} s in all, longest {table.longest:.1f} s -> {out}")
    return 0


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.verb == "publish":
        from cuw.wheel.publish import run_publish

        return run_publish(args.incoming, args.index, args.reports)
    if args.verb == "workflow":
        from cuw.ci.workflow_run import run_workflow

        return run_workflow(args)
    if args.verb == "record":
        from cuw.wheel.publish import record

        record(load_recipe(args.recipe, args.recipes or default_recipes_dir()), args.dist.resolve(), args.artifacts.resolve())
        return 0
    if args.verb == "index":
        from cuw.wheel.index import build_index

        kept = build_index(args.wheel_dir, args.out_dir)
        report.say(f"index of {len(kept)} wheels in {args.out_dir} (flat root: {args.out_dir / 'simple'})")
        return 0
    if args.verb == "report":
        paths = Paths(artifacts=args.artifacts, dist=args.dist)
        out = write_timeline(args.cell_dir, paths, args.output)
        report.say(f"report: {out}")
        return 0
    recipes_dir = args.recipes or default_recipes_dir()
    if args.verb == "lint-guards":
        return _lint_guards(args, recipes_dir)
    if args.verb == "verify":
        return _verify(args, recipes_dir)
    if args.verb == "recipes":
        from cuw.config.grid import cells

        grid = load_policy(recipes_dir).grid
        print(f"{'recipe':16} {'source':28} {'backend':18} {'torch':10} {'sharding':14} {'shards on':26} cells")
        for key in known_recipes(recipes_dir):
            r = load_recipe(key, recipes_dir)
            src = r.source.path or r.source.pypi or f"{r.source.git}@{r.source.tag}"
            torch = "links" if r.links_torch else "torch-free"
            sharding = f"{r.sharding.count} ({r.sharding.filter})"
            print(f"{key:16} {src[:28]:28} {r.backend:18} {torch:10} {sharding:14} "
                  f"{','.join(r.sharding.platforms):26} {len(cells(r, grid))}")  # fmt: skip
        return 0
    if args.verb == "show":
        return _show(args, recipes_dir)
    if args.verb == "plan":
        return _plan(args, recipes_dir)
    if args.verb == "costs":
        return _costs(args, recipes_dir)
    if args.verb == "grid":
        return _grid(args, recipes_dir)
    if args.verb == "matrix":
        return _matrix(args, recipes_dir)
    if args.verb == "toolkit":
        return _toolkit(args, recipes_dir)
    if args.jobs is not None and not 1 <= args.jobs <= 1024:
        raise CuwError(f"--jobs must be between 1 and 1024, got {args.jobs}")
    if args.verb == "build":
        if args.shards is not None:
            check_count(args.shards, "--shards")
        given = [f"--{f}" for f in ("platform", "cuda", "pytorch", "python") if getattr(args, f)]
        if given and not args.matrix:
            raise CuwError(
                f"{', '.join(given)} select cells of --matrix; without --matrix, build makes this machine's cell "
                f"(add --matrix, or see `cuw show {args.recipe}` for the cell built here)"
            )
    spec = parse_shard_spec(args.shard) if args.verb == "shard" else None
    recipe = load_recipe(args.recipe, recipes_dir)
    from cuw.jobs.pipeline import run_build, run_link, run_shard  # the build verbs only: the others start faster
    if args.backend == "cibuildwheel":
        return _cibuildwheel(args, recipe, recipes_dir)
    # Every option is checked before an output folder is created.
    if args.cell:
        raise CuwError("--cell goes with --backend cibuildwheel; the pip backend builds this machine's cell")
    if getattr(args, "matrix", False):
        _filters(args)
    cache = _cache(args, recipe, recipes_dir)
    from cuw.toolchain.cache import check_remote
    from cuw.config.cell import local_lane

    remote = (cache or cache_choice(load_policy(recipes_dir), local_lane())).remote
    if remote:
        check_remote(remote)  # an unreachable remote fails before any folder is made
    for option in ("work", "artifacts", "dist"):
        if hasattr(args, option):
            writable_dir(getattr(args, option), f"--{option}")
    _use_toolkit(args, recipes_dir)
    if spec is not None:
        result = run_shard(recipe, spec, _paths(args), args.jobs, progress=None if args.quiet else report.say,
                           cache=cache)  # fmt: skip
        return 0 if result.verdict.ok else 1
    if args.verb == "link":
        linked = run_link(recipe, _paths(args), args.jobs, cache=cache)
        _cell_report(recipe, _paths(args))
        return 0 if linked.ok else 1
    if args.verb == "build":
        if args.matrix:
            return _build_matrix(args, recipe, recipes_dir)
        outcomes, link = run_build(recipe, _paths(args), args.shards, args.recipes, cache=cache)
        _cell_report(recipe, _paths(args))
        return 0 if link.ok and all(outcomes) else 1
    raise AssertionError(args.verb)


def _use_toolkit(args: argparse.Namespace, recipes_dir: Path) -> None:
    """A forced toolkit or a policy entry that is not system: chosen (provisioned) once and exported."""
    from cuw.config import toolkits

    policy = load_policy(recipes_dir)
    option = getattr(args, "toolkit", None)
    if toolkits.needs_choice(policy, option):
        chosen = toolkits.choose(policy, option)
        toolkits.export(chosen.toolkit)
        report.say(f"toolkit: {chosen.how}")


def _toolkit(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.config import toolkits

    policy = load_policy(recipes_dir)
    line = args.cuda
    if line is not None and line not in policy.grid.cuda:
        raise CuwError(f"--cuda {line}: not a CUDA line of the grid ({', '.join(policy.grid.cuda)} in recipes/defaults.yml)")
    forced = toolkits.requested(args.toolkit)[0]
    choice = forced or (toolkits.policy_choice(policy, line) if line else None)
    outputs: dict[str, str] = {}
    if args.github_env and choice in (None, "system"):
        # The pinned system install (install-cuda.sh / .ps1) is the next step of the job.
        report.say(f"toolkit: CUDA {line or '(the system line)'}: system toolkit, installed by the workflow's install step")
        outputs["source"] = "system"
    else:
        chosen = toolkits.choose(policy, args.toolkit, line)
        report.say(f"toolkit: {chosen.how}")
        print(chosen.toolkit.home)
        outputs["source"] = chosen.source
        if args.github_env:
            _github_file("GITHUB_ENV", {"CUW_CUDA_HOME": str(chosen.toolkit.home), "CUDA_HOME": str(chosen.toolkit.home)})
    if args.github_env:
        _github_file("GITHUB_OUTPUT", outputs)
    return 0


def _github_file(var: str, values: dict[str, str]) -> None:
    target = os.environ.get(var)
    if not target:
        raise CuwError(f"--github-env: ${var} is not set (it is set inside a GitHub Actions step); run without --github-env here")
    with open(target, "a", encoding="utf-8") as out:
        out.writelines(f"{k}={v}\n" for k, v in values.items())


def _grid(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.config import grid_check
    from cuw.config.recipe import check_recipes_dir

    policy = load_policy(check_recipes_dir(recipes_dir))
    indexes = dict(policy.torch_index)
    for item in args.index:
        cuda, eq, url = item.partition("=")
        if not eq or cuda not in policy.grid.cuda or not url.strip():
            raise CuwError(f"--index {item!r} is not CUDA=URL with a CUDA line of the grid ({', '.join(policy.grid.cuda)})")
        indexes[cuda] = url.strip()
    if not args.check:
        for torch, release in sorted(policy.grid.torch.items()):
            print(f"torch {torch}: CUDA {', '.join(release.cuda)}; Python {', '.join(release.python)}")
        return 0
    result = grid_check.check(policy.grid, indexes)
    print(grid_check.render(result, policy.grid))
    if not result.ok:
        return 1
    if result.unreachable and not result.seen:
        raise CuwError(f"no torch index answered ({', '.join(result.unreachable)}): nothing was checked")
    return 0


def write_timeline(cell_dir: Path, paths: Paths, output: Optional[Path] = None) -> Path:
    """The cell's timeline as HTML (``<cell_dir>/report.html`` by default)."""
    from cuw.jobs import timeline

    if output is not None:
        check_destination(output, "--output")
    drawn = timeline.load(cell_dir, [paths.artifacts / cell_dir.name, paths.dist])
    return write_text(output or cell_dir / "report.html", timeline.html(drawn), "report")


def _cell_report(recipe: Recipe, paths: Paths) -> None:
    """After a link or build: the timeline report, named in the verb's last line, and its gantt
    chart in the GitHub step summary."""
    from cuw.jobs import timeline
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    cell_dir = paths.cell_work(local_cell(recipe, find_toolkit()))
    try:
        out = write_timeline(cell_dir, paths)
        report.append_summary(timeline.mermaid(timeline.load(cell_dir, [paths.artifacts / cell_dir.name, paths.dist])))
    except CuwError as exc:  # the verdict stands; the picture is a courtesy
        report.say(f"no timeline report: {exc}")
        return
    report.say(f"report: {out}")


def _one_line(message: str) -> str:
    """An error message as one line (a YAML or subprocess message may span several)."""
    return " ".join(message.split())


def _crash_log(exc: BaseException) -> Optional[Path]:
    """Writes the traceback of an internal error to a log file; returns its path."""
    import tempfile
    import time
    import traceback

    folder = Path(os.environ.get("CUW_LOG_DIR") or tempfile.gettempdir())
    path = folder / f"cuw-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        path.write_text(f"cuw {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def main(argv: Optional[list[str]] = None) -> int:
    """The one error boundary: exit 0 pass, 1 a gate refused the result, 2 bad input or environment.

    Whatever goes wrong ends in one line on stderr; an internal bug says so and leaves its
    traceback in a log file instead of on the terminal.
    """
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except CuwError as exc:
        print(f"cuw: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cuw: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # the environment: a full disk, a read-only folder, a vanished file
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"cuw: error: {_one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug must still end in one line
        log = _crash_log(exc)
        where = f"traceback in {log}" if log else "no log could be written"
        print(f"cuw: internal error (a bug in the forge, please report it): {type(exc).__name__}: "
              f"{_one_line(str(exc))} ({where})",
              file=sys.stderr)  # fmt: skip
        return 2
