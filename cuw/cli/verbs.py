"""The verbs: each reads its parsed options, calls the layer that does the work and returns the
exit code (0 done, 1 a gate refused, 2 bad input: docs/verbs.md, "Exit codes and errors")."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from cuw.base.errors import CuwError, InputError, OutputError, ToolError, refused_unless
from cuw.base.files import check_destination, place_text, writable_dir, write_text
from cuw.base.reading import is_regular, optional_folder
from cuw.base.settings import MIRROR_VAR, Settings
from cuw.cli.parser import parse
from cuw.config.grid import cell_archs
from cuw.config.limits import check_count
from cuw.config.paths import Paths
from cuw.config.policy import CacheChoice, Policy, cache_choice, image_overrides, load_policy
from cuw.config.recipe import Recipe, default_recipes_dir, known_recipes, load_recipe
from cuw.gates import report
from cuw.partition.rules import ShardSpec, parse_shard_spec

if TYPE_CHECKING:
    from cuw.ci import matrix
    from cuw.jobs.container import ImageJob


def _paths(args: argparse.Namespace) -> Paths:
    return Paths(work=args.work, artifacts=args.artifacts, dist=getattr(args, "dist", Paths.dist))


def _cache(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> Optional[CacheChoice]:
    if args.cache_tool is None and args.cache_remote is None:
        return None  # the pipeline reads the policy for the cell's lane
    from cuw.config.lanes import local_lane

    return cache_choice(load_policy(recipes_dir), local_lane(), settings, args.cache_tool, args.cache_remote)


def _lint_guards(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    """A folder or file as it is; a recipe name: its source as the jobs see it (fetched, patched)."""
    import tempfile

    from cuw.tools.cmake_guards import find_unguarded

    given = Path(args.target)
    if given.exists():
        findings, where = find_unguarded(given), str(given)
    elif "/" in args.target or "\\" in args.target:
        raise InputError(f"lint-guards: {given}: no such file or folder")
    else:
        from cuw.tools.planner import prepare_tree

        recipe = load_recipe(args.target, recipes_dir)
        with tempfile.TemporaryDirectory(prefix="cuw-lint-") as tmp:
            findings = find_unguarded(prepare_tree(recipe, Path(tmp) / "src", settings=settings) / recipe.build_subdir)
        where = f"the patched source of {recipe.key}"
    for finding in findings:
        print(finding)
    if findings:
        report.say(f"lint-guards: {len(findings)} unguarded consumer(s) in {where}")
        return refused_unless(False, "lint-guards: unguarded consumers")
    report.say(f"lint-guards: every consumer of a source-dependent target in {where} is under if(TARGET ...)")
    return 0


def _verify(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.config.cell import local_cell
    from cuw.config.recipe import recipe_for_wheel
    from cuw.jobs.tests_source import upstream_fetch
    from cuw.toolchain.toolkit import find_toolkit
    from cuw.wheel.verify import verify, write_verify_reports

    if not is_regular(args.wheel, "wheel"):
        raise InputError(f"no such wheel: {args.wheel}")
    recipe = load_recipe(args.recipe or recipe_for_wheel(args.wheel.name, recipes_dir), recipes_dir)
    settings = _use_toolkit(args, recipes_dir, settings)  # $CUW_TOOLKIT and the policy's toolkits, as the build had them
    toolkit = find_toolkit(homes=settings.homes)
    cell = local_cell(recipe, toolkit)
    policy = load_policy(recipes_dir)
    archs = cell_archs(recipe, policy.archs, cell)
    patches = None
    if args.torch_index and not args.torch_patches:
        raise InputError("--torch-index goes with --torch-patches")
    if args.torch_patches:
        from cuw.wheel.verify import TorchPatches

        index = args.torch_index or policy.torch_index.get(cell.cuda)
        if not index:
            raise InputError(
                f"--torch-patches: no torch_index for CUDA {cell.cuda} in recipes/defaults.yml; pass --torch-index URL"
            )
        patches = TorchPatches(index, settings.folders.torch_venvs, settings)
    checked = verify(
        args.wheel,
        recipe,
        cell,
        toolkit,
        policy.wheel,
        archs,
        import_check=not args.no_import,
        torch_patches=patches,
        cuobjdump=settings.cuobjdump,
        tests=upstream_fetch(recipe, settings),
    )
    for check in checked.checks:
        print(f"{'ok  ' if check.ok else 'FAIL'} {check.name:12} {'; '.join(check.details)}")
    as_json, as_md = write_verify_reports(checked, args.wheel)
    report.append_summary(checked.to_markdown(), settings.github.step_summary)
    report.say(f"{checked.line} (reports: {as_json}, {as_md})")
    return refused_unless(checked.ok, "the verify gate")


def _gpu(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    """docs/gpu.md: no GPU and no --dry-run, one line and exit 0; a failed smoke or builds that
    disagree, exit 1."""
    import tempfile

    from cuw.wheel import gpu

    if args.timeout <= 0:
        raise InputError(f"gpu: --timeout {args.timeout:g}: give the seconds one wheel's smoke may take (over 0)")
    if args.out is not None:  # before the environments and smokes: a folder the reports can be written in
        writable_dir(args.out, "--out")
    if args.into_index is not None:
        if args.dry_run:
            raise InputError("gpu: --into-index with --dry-run: a dry run launches nothing, so its reports are never published")
        from cuw.wheel.index import published_files

        if not published_files(args.into_index):
            raise InputError(f"gpu: --into-index {args.into_index}: not an index that publishes wheels (cuw index makes one)")
    device, why = gpu.find_device()
    if device is None and not args.dry_run:
        report.say(f"gpu: {why}: nothing run (--dry-run runs every step but the launches)")
        return 0
    with tempfile.TemporaryDirectory(prefix="cuw-gpu-get-") as download:
        subjects = gpu.collect(args.wheels, args.package, Path(download))
        recipes: dict[str, Recipe] = {}

        def recipe_of(subject: gpu.Subject) -> tuple[str, Optional[str], str]:
            from cuw.config.recipe import recipe_for_wheel

            key = args.recipe or recipe_for_wheel(subject.path.name, recipes_dir)
            if key not in recipes:
                recipes[key] = load_recipe(key, recipes_dir)
            return key, recipes[key].verify.gpu, f"{recipes_dir / key / 'recipe.yml'}: verify.gpu"

        for subject in subjects:
            recipe_of(subject)  # every recipe found and loaded before the first environment is made
        where = "dry run: nothing launched, GPUs hidden" if device is None or args.dry_run else f"{device.name}, {device.sm}"
        report.say(f"gpu: {len(subjects)} wheel(s) on {where}")
        outcomes, findings, paths = gpu.run_tier(subjects, recipe_of, device, args.dry_run, args.out, report.say, args.timeout)
    for finding in findings:
        report.say(f"gpu: FAIL {finding}")
    failed = [o for o in outcomes if not o.passed]
    passed = len(outcomes) - len(failed)
    compared = sum(1 for o in outcomes if o.report.get("compared"))
    if args.into_index is not None and not failed and not findings:
        from cuw.wheel.index import add_gpu_reports

        added = add_gpu_reports(args.into_index, paths)
        report.say(f"gpu: {len(added)} report(s) added to the index at {args.into_index}")
    report.say(
        f"gpu: {passed} of {len(outcomes)} wheel(s) passed, {compared} result(s) compared"
        + (f", {len(findings)} disagreement(s)" if findings else "")
        + f" (reports: {paths[0].parent if len(paths) == 1 else (args.out or 'beside each wheel')})"
    )
    return refused_unless(not failed and not findings, "gpu: a smoke failed or builds disagree")


def _split(values: list[str], flag: str = "filter") -> tuple[str, ...]:
    """Repeated or comma-separated filter values; an empty one is refused (it would match everything)."""
    out = tuple(v.strip() for value in values for v in value.split(","))
    if any(not v for v in out):
        raise InputError(
            f"--{flag}: an empty value (give a value like --{flag} {_EXAMPLE.get(flag, 'X')}, or leave the option out)"
        )
    return out


_EXAMPLE = {"platform": "linux", "cuda": "13.0", "pytorch": "2.14", "python": "3.11"}


def _filters(args: argparse.Namespace) -> "matrix.Filters":
    from cuw.ci import matrix

    return matrix.Filters(*(_split(getattr(args, f), f) for f in ("platform", "cuda", "pytorch", "python")))


def _build_matrix(args: argparse.Namespace, recipe: Recipe, recipes_dir: Path, settings: Settings) -> int:
    """``build --matrix``: the same cells the workflow gets, each built here in its own environment
    where this machine has its lane, CUDA line and Python (cuw/ci/matrix_build.py)."""
    from cuw.ci import matrix, matrix_build
    from cuw.toolchain.pythons import find_python
    from cuw.config import toolkits
    from cuw.config.lanes import local_lane

    filters = _filters(args)
    policy = load_policy(recipes_dir)
    selected = matrix.select(recipe, policy.grid, filters)
    note = matrix.collapse_note(recipe, policy.grid)
    if note:
        report.say(f"matrix: {recipe.key}: {note}")
    here = local_lane()
    lines = toolkits.for_lines(policy, args.toolkit, [c.cuda for c in selected if c.lane == here], settings)
    for line in lines.values():
        if line.chosen is not None:
            report.say(f"toolkit: {line.chosen.how}")
    build, skipped = matrix_build.plan_local(recipe, selected, here, lines, lambda minor: find_python(minor, settings=settings))
    for row in skipped:
        report.say(f"skipped {row.cell.id}: needs {row.why}")
    if not build:
        raise ToolError(
            f"none of the {len(selected)} selected cells of {recipe.key} can be built on this machine: "
            + "; ".join(f"{r.cell.id}: {r.why}" for r in skipped[:3])
        )
    paths = _paths(args)
    child = [
        "--work",
        str(paths.work.resolve()),
        "--artifacts",
        str(paths.artifacts.resolve()),
        "--dist",
        str(paths.dist.resolve()),
        "--recipes",
        str(recipes_dir.resolve()),
    ]
    if args.shards is not None:
        child += ["--shards", str(args.shards)]
    if args.cache_tool:
        child += ["--cache-tool", args.cache_tool]
    if args.cache_remote:
        child += ["--cache-remote", args.cache_remote]
    rows = matrix_build.run_matrix(
        recipe, policy.grid, policy.torch_index, build, child, paths.work, args.jobs, report.say, settings=settings
    )
    order = {cell: i for i, cell in enumerate(selected)}
    rows = sorted(rows + skipped, key=lambda r: order[r.cell])
    print(matrix_build.table(rows, f"{recipe.key}: {note}" if note else ""))
    built = [r for r in rows if r.status == "built"]
    attempted = [r for r in rows if r.status != "skipped" or r.wall]
    report.say(f"matrix: {len(built)}/{len(attempted)} built cells passed, {len(rows) - len(attempted)} skipped")
    return refused_unless(len(built) == len(attempted) and bool(built), "build --matrix: a cell did not pass")


def _cibuildwheel(args: argparse.Namespace, recipe: Recipe, recipes_dir: Path, settings: Settings) -> int:
    """``--backend cibuildwheel``: the verb's jobs, each run by cibuildwheel (cuw/ci/cibw.py)."""
    from cuw.ci import cibw
    from cuw.config.cell import local_cell, parse_cell
    from cuw.toolchain.toolkit import find_toolkit

    if getattr(args, "matrix", False):
        raise InputError("build --matrix builds with the pip backend; with cibuildwheel pass one --cell")
    cell = parse_cell(recipe, args.cell) if args.cell else local_cell(recipe, find_toolkit(homes=settings.homes))
    choice = cache_choice(load_policy(recipes_dir), cell.lane, settings, args.cache_tool, args.cache_remote)
    specs = cibw.job_specs(recipe, args.verb, getattr(args, "shard", None), getattr(args, "shards", None))
    ok = cibw.run_jobs(recipe, recipes_dir, cell, specs, _paths(args), choice, args.jobs, settings, args.toolkit)
    return refused_unless(ok, "a cibuildwheel job's gate")


def _matrix(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.ci import matrix

    if args.output is not None:
        check_destination(args.output, "--output")
        _outside_index(args.output, args.published, "--published")
    keys = known_recipes(recipes_dir) if args.package == "all" else [args.package]
    recipes = [load_recipe(k, recipes_dir) for k in keys]
    filters = _filters(args)
    policy = _policy_with_grid(recipes_dir)
    if args.on_host and args.image:
        raise InputError("--on-host runs every job on its runner; --image names the image a lane's jobs run in: give one")
    images = {} if args.on_host else image_overrides(args.image, policy)
    # An unverified lane is planned only when asked for: by --platform, or by the id of one of its chunks.
    from cuw.partition.job_cap import job_cap

    result = matrix.plan(
        recipes, policy.grid, filters, images, hold_back=args.chunk is None, cap=job_cap(policy.jobs), runners=policy.runners
    )
    if args.published is not None:
        result = _drop_published(result, recipes, policy, args.published, args.rebuild)
    elif args.rebuild is not None:
        raise InputError("--rebuild chooses among the cells --published finds; give --published too")
    text = matrix.dumps(matrix.chunk(result, args.chunk))  # an unknown chunk fails before any output
    if args.output:
        write_text(args.output, text, "--output")
    print(matrix.summary(result), file=sys.stderr)
    if not args.output:
        sys.stdout.write(text)
    return 0


def _audit(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.ci import audit
    from cuw.toolchain.toolkit import find_toolkit

    if args.output is not None:
        check_destination(args.output, "--output")
        _outside_index(args.output, args.index, "--index")
    if args.on_host and args.image:
        raise InputError("--on-host and --image name two builders; give one")
    if not 0 < args.deadline < float("inf"):
        raise InputError(f"--deadline {args.deadline:g}: give the seconds the wheels' reads may take, more than 0")
    keys = known_recipes(recipes_dir) if args.package == "all" else [args.package]
    recipes = [load_recipe(k, recipes_dir) for k in keys]
    policy = load_policy(recipes_dir)
    images = {} if args.on_host else image_overrides(args.image, policy)
    findings = audit.audit(args.index, recipes, policy, find_toolkit(homes=settings.homes), images, report.say, args.deadline)
    text = audit.to_html(args.index, findings) if args.format == "html" else audit.markdown(args.index, findings)
    if args.output is not None:
        write_text(args.output, text, "--output")
        report.say(f"audit: {args.output}")
    else:
        sys.stdout.write(text)
    report.append_summary(audit.markdown(args.index, findings), settings.github.step_summary)
    report.say(f"audit: {len(findings)} finding(s) in {args.index}")
    return refused_unless(not audit.failing(findings), "audit: findings")


def _outside_index(output: Path, location: Optional[str], option: str) -> None:
    """A report never goes into the index folder it reads: the marker overwritten is the index lost."""
    from cuw.ci.published import locate

    where = locate(location, option) if location is not None else None
    if isinstance(where, Path) and where.is_dir():
        try:
            root, out = where.resolve(), output.resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop, before Python 3.13
            raise OutputError(f"--output {output}: cannot write ({exc})") from None
        if out == root or root in out.parents:
            raise InputError(
                f"--output {output} is inside the index {location} ({option}), which is read, never written; "
                "give a path outside it"
            )


def _drop_published(result: dict, recipes: list[Recipe], policy: Policy, location: str, rebuild: Optional[str]) -> dict:
    """The plan less the cells the published index holds with today's inputs (cuw/ci/published.py)."""
    from cuw.ci import matrix
    from cuw.ci.published import cell_status, check_cells, read_records
    from cuw.config.cell import Cell

    by_key = {r.key: r for r in recipes}
    cells = [
        (by_key[key], Cell(key, lane, python, cuda, torch or None), image)
        for key, lane, python, cuda, torch, image in matrix.planned_cells(result)
    ]
    records = read_records(location)
    check_cells(records)  # a record read as no cell would have its cell rebuilt, and the rebuild refused
    status = cell_status(cells, policy, records)
    mode = rebuild or "stale"
    keep = status.to_build(mode)
    from cuw.ci.build_numbers import planned_builds

    builds = planned_builds(cells, policy, records, keep)  # a rebuild's link stamps the next build number
    report.say(
        f"matrix: published at {location}: {len(status.current)} cell(s) up to date, {len(status.stale)} stale, "
        f"{len(status.missing)} missing{_not_comparable(status.not_comparable)}; --rebuild {mode}: {len(keep)} cell(s) planned"
    )
    return matrix.keep_cells(
        result,
        keep,
        {
            "from": location,
            "rebuild": mode,
            "current": status.current,
            "stale": status.stale,
            "missing": status.missing,
            "not_comparable": status.not_comparable,
            "building": len(keep),
            "built": sorted(keep),
            "builds": builds,
        },
        builds,
    )


def _not_comparable(cells: dict[str, str]) -> str:
    return f", {len(cells)} not comparable (records of an older inputs scheme)" if cells else ""


def _show(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
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
        cell = local_cell(recipe, find_toolkit(homes=settings.homes))
    from cuw.config.grid import require_in_grid

    require_in_grid(recipe, policy.grid, cell)
    shown = dataclasses.asdict(recipe)
    shown.update(
        cell=cell.to_dict(),
        cell_id=cell.id,
        local_version_label=local_label(cell),
        resolved_archs=cell_archs(recipe, policy.archs, cell),
        cache=dataclasses.asdict(cache_choice(policy, cell.lane, settings)),
        build_image=dataclasses.asdict(policy.images[cell.lane]) if cell.lane in policy.images else None,
    )
    print(json.dumps(shown, indent=2, sort_keys=True))
    return 0


def _policy_with_grid(recipes_dir: Path) -> Policy:
    """The policy of a verb that reads the whole grid (matrix, grid, plan --farm): without a grid
    (a recipes folder with no defaults.yml) it would find no cell and say nothing of why."""
    policy = load_policy(recipes_dir)
    missing = [f"grid.{axis}" for axis in ("platforms", "python", "cuda") if not getattr(policy.grid, axis)]
    if missing:
        where = recipes_dir / "defaults.yml"
        state = "is not there" if not where.exists() else f"names no {' and no '.join(missing)}"
        raise InputError(f"{where} {state}: the build grid is read from it (copy the recipes folder's defaults.yml)")
    return policy


# What plans one recipe; --farm refuses them rather than ignore them.
_ONE_RECIPE_OPTIONS = ("shards", "range", "costs", "from_log", "check")


def _farm_limits(given: Optional[str]) -> list[int]:
    """--concurrency: ASCII numbers, comma-separated, each once (default: GitHub Free and Team)."""
    text = "20,60" if given is None else given
    if not re.fullmatch(r"[0-9]+(,[0-9]+)*", text):
        raise InputError(f"--concurrency {text!r}: numbers of concurrent jobs, comma-separated (20,60)")
    limits = [int(v) for v in text.split(",")]
    if any(not 1 <= c <= 10000 for c in limits):
        raise InputError(f"--concurrency {text!r}: each between 1 and 10000")
    if len(set(limits)) != len(limits):
        raise InputError(f"--concurrency {text!r}: a limit given twice; give each once")
    return limits


def _farm_counts(items: list[str], recipes_dir: Path) -> dict[str, int]:
    """--count RECIPE=N, each recipe once, and only one the farm can predict (it has a cost table)."""
    from cuw.partition.costs import recipe_costs

    counts: dict[str, int] = {}
    for item in items:
        key, sep, n = item.partition("=")
        if not sep or not re.fullmatch(r"[0-9]+", n):
            raise InputError(f"--count {item!r}: RECIPE=N (for example natten=40)")
        try:
            recipe = load_recipe(key, recipes_dir)
        except InputError as exc:
            raise InputError(f"--count {item!r}: {exc}") from None
        if key in counts:
            raise InputError(f"--count {item!r}: {key} is given twice; give each recipe once")
        if recipe_costs(recipe) is None:
            raise InputError(
                f"--count {item!r}: {key} has no cost table ({Path(recipe.folder) / 'costs.json'}), so the farm "
                f"predicts it at no N; record one with `cuw costs {key} --from <shard reports>`"
            )
        counts[key] = check_count(int(n), "--count")
    return counts


def _farm_plan(args: argparse.Namespace, recipes_dir: Path) -> int:
    from cuw.tools import farm_plan

    if args.recipe is not None:
        raise InputError("--farm plans every recipe; leave out the recipe name")
    one_cell = [f"--{o.replace('_', '-')}" for o in _ONE_RECIPE_OPTIONS if getattr(args, o) is not None]
    if one_cell:
        raise InputError(f"{', '.join(one_cell)}: plans one recipe, not --farm (give --count RECIPE=N for the farm)")
    if args.json or args.format not in (None, "text"):
        given = "--json" if args.json else f"--format {args.format}"
        raise InputError(f"{given}: --farm prints text only (leave it out; --output writes the text to a file)")
    if args.output is not None:
        check_destination(args.output, "--output")
    limits = _farm_limits(args.concurrency)
    counts = _farm_counts(args.count, recipes_dir)
    recipes = [load_recipe(k, recipes_dir) for k in known_recipes(recipes_dir)]
    if not recipes:
        raise InputError(f"--farm: {recipes_dir} holds no recipe (a folder with a recipe.yml); give --recipes the recipes folder")
    from cuw.partition.job_cap import job_cap

    policy = _policy_with_grid(recipes_dir)
    plan = farm_plan.farm_plan(recipes, policy.grid, counts, job_cap(policy.jobs, args.cap))
    _emit_plan(farm_plan.render(plan, limits) + "\n", args.output)
    return 0


def _emit_plan(text: str, output: Optional[Path]) -> None:
    """A plan (one recipe's or the farm's) to ``--output``, else to standard output."""
    if output is not None:
        write_text(output, text, "--output")
        report.say(f"plan: {output}")
    else:
        sys.stdout.write(text)


def _plan(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.tools import planner

    if args.farm:
        return _farm_plan(args, recipes_dir)
    if args.recipe is None:
        raise InputError("plan: name a recipe (cuw recipes lists them), or pass --farm for the whole grid")
    if args.count or args.concurrency is not None:
        given = "--count" if args.count else "--concurrency"
        raise InputError(f"{given}: plans the farm (add --farm); for one recipe give --shards N or --range A..B")
    recipe = load_recipe(args.recipe, recipes_dir)
    counts = planner.parse_counts(args.shards, args.range)
    if args.check is not None:
        check_count(args.check, "--check")
    if args.json and args.format not in (None, "json"):
        raise InputError(f"--json and --format {args.format} ask for two formats; give one")
    fmt = "json" if args.json else args.format or "text"
    if args.output is not None:
        check_destination(args.output, "--output")
    result = planner.plan(
        recipe, counts, args.costs, args.from_log, checked_n=args.check, settings=settings, cap_minutes=args.cap
    )
    from cuw.tools import plan_views

    views: dict[str, Callable[[], str]] = {
        "json": result.to_json,
        "markdown": lambda: plan_views.markdown(result),
        "html": lambda: plan_views.html(result),
        "text": lambda: planner.render(result) + "\n",
    }
    _emit_plan(views[fmt](), args.output)
    return refused_unless(result.ok, "plan: the checklist")


def _costs(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.config.recipe import costs_path
    from cuw.partition import costs
    from cuw.partition.coverage import cost_keeps

    recipe = load_recipe(args.recipe, recipes_dir)
    out = args.output or costs_path(Path(recipe.folder))
    check_destination(out, "--output")
    if args.source_root is not None and not args.source_root.is_dir():
        raise InputError(f"--source-root {args.source_root} is not a folder")
    table = costs.record(args.logs, out, args.source_root, cost_keeps(recipe))
    report.say(f"cost table: {len(table.costs)} TUs, {table.total:.1f} s in all, longest {table.longest:.1f} s -> {out}")
    return 0


def _git_mirror(args: argparse.Namespace, settings: Settings) -> Settings:
    """``--git-mirror`` (else ``$CUW_GIT_MIRROR``) checked before anything is written: the run's
    mirror, absolute, handed to the verb's own jobs (build's shard processes, cibuildwheel's)."""
    from cuw.jobs.sources import check_mirror

    if args.git_mirror is not None:
        if not args.git_mirror.strip():
            raise InputError(
                f"--git-mirror: an empty value (give a git repository, a folder of mirrors or a tarball, "
                f"or leave the option out to use ${MIRROR_VAR} or the recipe's URL)"
            )
        return settings.with_mirror(check_mirror(Path(args.git_mirror), "--git-mirror"))
    if settings.git_mirror is not None:
        return settings.with_mirror(check_mirror(settings.git_mirror))
    return settings


def run(argv: list[str], settings: Optional[Settings] = None) -> int:
    """Parses ``argv`` and runs its verb with ``settings`` (the environment's, read once by
    :func:`cuw.cli.main.main`; read here when called without them); returns the exit code."""
    args = parse(argv)
    settings = settings or Settings.from_env()
    if hasattr(args, "git_mirror"):
        settings = _git_mirror(args, settings)
    recipes_dir = getattr(args, "recipes", None) or default_recipes_dir(settings.recipes)
    return _verbs().get(args.verb, _build_verbs)(args, recipes_dir, settings)


Verb = Callable[[argparse.Namespace, Path, Settings], int]
"""A verb: its options, the recipes folder, the run's settings."""


def _verbs() -> dict[str, Verb]:
    """Every verb but the three build verbs (shard, link, build: :func:`_build_verbs`)."""
    return {
        "publish": _publish,
        "upload": _upload,
        "workflow": _workflow,
        "image": _image,
        "record": _record,
        "index": _index,
        "yank": _yank,
        "report": _report,
        "lint-guards": _lint_guards,
        "audit": _audit,
        "verify": _verify,
        "gpu": _gpu,
        "recipes": _recipes,
        # The verbs that read a recipe or the grid and build nothing.
        "show": _show,
        "plan": _plan,
        "costs": _costs,
        "grid": _grid,
        "matrix": _matrix,
        "toolkit": _toolkit,
    }


def _publish(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.wheel.publish import AssetStore, check_asset_store, check_folders, continue_from, run_publish

    if (args.asset_url is None) != (args.upload is None):
        raise InputError("--asset-url and --upload go together: where the wheels will be, and where they wait for upload")
    store = AssetStore(args.asset_url, args.upload) if args.asset_url else None
    if not args.incoming.is_dir():  # before --from-url fills INDEX: a typo must not leave it continued
        raise InputError(f"publish: {args.incoming} is not a folder (the wheels the links uploaded)")
    check_folders(args.incoming, args.index, args.upload)
    if store is not None:
        check_asset_store(store)
        writable_dir(store.upload, "--upload")
    if args.first:
        from cuw.ci.github_release import check_first

        if not args.from_url:
            raise InputError("--first names no site: give --from-url URL too, where the index will be served")
        check_first(args.from_url)
        report.say(f"publish: {args.from_url} serves no index yet: the first publish starts from empty")
    online = continue_from(args.from_url, args.index) if args.from_url and not args.first else 0
    if args.from_url and not args.first:
        report.say(f"publish: continuing {args.from_url} ({online} wheels published)")
    return run_publish(args.incoming, args.index, args.reports, store, online, settings.github.step_summary)


def _upload(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.ci.github_release import Endpoint, upload

    env = settings.environ  # as Actions sets them; GitHub's own where unset
    endpoint = Endpoint(
        env.get("GITHUB_API_URL") or "https://api.github.com",
        env.get("GITHUB_SERVER_URL") or "https://github.com",
        args.repo or env.get("GITHUB_REPOSITORY", ""),
        env.get("GH_TOKEN") or env.get("GITHUB_TOKEN") or "",
    )
    outcome = upload(args.folder, args.site, endpoint, report.say)
    report.say(
        f"upload: {len(outcome.uploaded)} uploaded, {len(outcome.already)} already there; {outcome.checked} asset(s) "
        "verified as the index lists them: the pages may be deployed"
    )
    return 0


def _workflow(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.ci.workflow_run import WorkflowOptions, run_workflow

    options = WorkflowOptions(
        args.recipe,
        args.platform,
        args.cuda,
        args.pytorch,
        args.python,
        args.chunk,
        args.index,
        args.fail_shard,
        args.jobs,
        args.engine,
        args.recipes,
    )
    return run_workflow(options, settings)


def _record(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.wheel.publish import record

    record(load_recipe(args.recipe, recipes_dir), args.dist.resolve(), args.artifacts.resolve(), settings)
    return 0


def _index(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.wheel.index import build_index

    kept = build_index(args.wheel_dir, args.out_dir)
    report.say(f"index of {len(kept)} wheels in {args.out_dir} (flat root: {args.out_dir / 'simple'})")
    return 0


def _yank(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.wheel.yank import yank_verb

    report.say(f"yank: {yank_verb(args.index, args.wheel, args.reason, args.undo, args.from_url)} ({args.index})")
    return 0


def _report(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    paths = Paths(artifacts=args.artifacts, dist=args.dist)
    out = write_timeline(args.cell_dir, paths, args.output)
    report.say(f"report: {out}")
    return 0


def _recipes(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.config.listing import recipes_table

    sys.stdout.write(recipes_table(recipes_dir))
    return 0


def _build_verbs(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    """shard, link and build: every option is checked before an output folder is created."""
    _check_counts(args)
    spec = parse_shard_spec(args.shard) if args.verb == "shard" else None
    if spec is not None:
        _settle_chain(args)
    recipe = load_recipe(args.recipe, recipes_dir)
    published = _published_builds(args)  # --build-number or --published: checked, the index read, before any folder
    if args.backend == "cibuildwheel":
        if args.image is not None:
            raise InputError(
                "--image goes with the pip backend; cibuildwheel runs its own image (images.<lane>.ref in recipes/defaults.yml)"
            )
        return _cibuildwheel(args, recipe, recipes_dir, settings)
    _check_pip_options(args, settings)
    cache = _cache(args, recipes_dir, settings)
    _check_remote(cache, recipes_dir, settings)
    image_job = _open_image(args, settings)
    _check_folders(args, recipe)
    if not getattr(args, "matrix", False):  # --matrix chooses each CUDA line's toolkit itself
        settings = _use_toolkit(args, recipes_dir, settings)
    if published is not None:
        _settle_build_number(args, published, recipe, recipes_dir, settings, image_job)
    if image_job is not None:
        return _in_image(args, replace(image_job, settings=settings), recipe, recipes_dir, spec)
    return _run_job(args, recipe, recipes_dir, spec, cache, settings)


def _published_builds(args: argparse.Namespace) -> Optional[list[dict]]:
    """link and build's ``--build-number`` checked, or with ``--published`` the index's build records
    (read once, before any folder is made); None without ``--published``."""
    given, location = getattr(args, "build_number", None), getattr(args, "published", None)
    if given is None and location is None:
        return None
    if given is not None and location is not None:
        raise InputError("--build-number and --published both choose the wheel's build number: give one")
    if getattr(args, "matrix", False) or args.backend != "pip":
        raise InputError("--build-number and --published number this machine's cell's wheel, built with the pip backend")
    if given is not None:
        from cuw.wheel.finish import BuildNumber

        args.build_number = str(BuildNumber.parse(given))
        return None
    from cuw.ci.published import read_index

    return read_index(str(location), "--published").records


def _settle_build_number(
    args: argparse.Namespace,
    records: list[dict],
    recipe: Recipe,
    recipes_dir: Path,
    settings: Settings,
    image_job: Optional["ImageJob"],
) -> None:
    """``--published``: the next free build number of this cell's wheel, as ``--build-number`` (the
    link in an image gets it so)."""
    from cuw.ci.build_numbers import next_build
    from cuw.config.cell import local_cell
    from cuw.config.inputs import cell_inputs, inputs_digest
    from cuw.toolchain.builder import current_builder
    from cuw.toolchain.toolkit import find_toolkit

    cell = local_cell(recipe, find_toolkit(homes=settings.homes), image_job.lane if image_job else None)
    image = image_job.ref if image_job else current_builder(settings).image or ""
    digest = inputs_digest(cell_inputs(recipe, load_policy(recipes_dir), cell, image))
    number = next_build(records, recipe, cell, digest)
    args.build_number, args.published = str(number), None
    said = "".join(f"{v}: build {k}; " for v, k in number.per_version)
    report.say(f"build number of {cell.id} from {len(records)} published wheel(s): {said}a version not published: build 0")


def _check_counts(args: argparse.Namespace) -> None:
    """--jobs, build's --shards, and the cell filters that only --matrix reads."""
    if args.jobs is not None and not 1 <= args.jobs <= 1024:
        raise InputError(f"--jobs must be between 1 and 1024, got {args.jobs}")
    if args.verb != "build":
        return
    if args.shards is not None:
        check_count(args.shards, "--shards")
    given = [f"--{f}" for f in ("platform", "cuda", "pytorch", "python") if getattr(args, f)]
    if given and not args.matrix:
        raise InputError(
            f"{', '.join(given)} select cells of --matrix; without --matrix, build makes this machine's cell "
            f"(add --matrix, or see `cuw show {args.recipe}` for the cell built here)"
        )


def _check_pip_options(args: argparse.Namespace, settings: Settings) -> None:
    """The options the pip backend reads, in the order a user meets them."""
    if args.image is not None and getattr(args, "matrix", False):
        raise InputError("--image builds this machine's cell; build --matrix picks each cell's environment itself")
    if args.image is None and args.engine is not None:
        raise InputError("--engine goes with --image (the engine that runs the build image)")
    if args.cell:
        raise InputError("--cell goes with --backend cibuildwheel; the pip backend builds this machine's cell")
    if getattr(args, "matrix", False):
        _filters(args)
    from cuw.config import toolkits

    toolkits.requested(getattr(args, "toolkit", None), settings)  # a malformed --toolkit or $CUW_TOOLKIT, before any folder


def _check_remote(cache: Optional[CacheChoice], recipes_dir: Path, settings: Settings) -> None:
    """An unreachable cache remote fails before any folder is made."""
    from cuw.config.lanes import local_lane
    from cuw.toolchain.cache import check_remote

    remote = (cache or cache_choice(load_policy(recipes_dir), local_lane(), settings)).remote
    if remote:
        check_remote(remote)


def _open_image(args: argparse.Namespace, settings: Settings) -> Optional["ImageJob"]:
    """The engine and the build image of --image, before any folder is made."""
    if args.image is None:
        return None
    from cuw.jobs.container import open_image

    return open_image(args.image, args.engine, settings=settings)


def _check_folders(args: argparse.Namespace, recipe: Recipe) -> None:
    from cuw.config.paths import check_job_folders

    given = {f"--{o}": getattr(args, o) for o in ("work", "artifacts", "dist") if hasattr(args, o)}
    check_job_folders(given, recipe.source_dir if recipe.source.path is not None else Path(recipe.folder))
    for option, folder in given.items():
        writable_dir(folder, option)


def _run_job(
    args: argparse.Namespace,
    recipe: Recipe,
    recipes_dir: Path,
    spec: Optional[ShardSpec],
    cache: Optional[CacheChoice],
    settings: Settings,
) -> int:
    """The shard, the link or the whole cell, here, with the run's settings."""
    from cuw.jobs.local import run_build  # the build verbs only: the others start faster
    from cuw.jobs.link import run_link
    from cuw.jobs.shard import run_shard

    if spec is not None:
        progress = None if args.quiet else report.say
        deadline = None if args.deadline is None else float(args.deadline)  # settled: a Unix time
        result = run_shard(
            recipe, spec, _paths(args), args.jobs, progress, cache, settings=settings, deadline=deadline, resume=args.resume
        )
        return refused_unless(result.verdict.ok, "the shard gate")
    from cuw.wheel.finish import FIRST_BUILD, BuildNumber

    build = BuildNumber.parse(args.build_number) if args.build_number else FIRST_BUILD
    if args.verb == "link":
        linked = run_link(recipe, _paths(args), args.jobs, cache=cache, settings=settings, build=build)
        _cell_report(recipe, _paths(args), settings)
        return refused_unless(linked.ok, "the link or verify gate")
    if args.matrix:
        return _build_matrix(args, recipe, recipes_dir, settings)
    outcomes, link = run_build(recipe, _paths(args), args.shards, args.recipes, cache=cache, settings=settings, build=build)
    _cell_report(recipe, _paths(args), settings)
    return refused_unless(bool(getattr(link, "ok", link)) and all(outcomes), "a shard, link or verify gate")


def _image(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.toolchain.engine import find_engine
    from cuw.toolchain.image_build import build_image, default_recipe, load_image_recipe

    recipe = load_image_recipe(args.yml or default_recipe())
    engine = find_engine(args.engine or settings.engine)
    ref, cached = build_image(engine, recipe, report.say, settings.folders.image_cache)
    report.say(f"image: {ref} {'already built' if cached else 'built'} ({engine.name})")
    print(f"image: {ref}")
    return 0


def _settle_chain(args: argparse.Namespace) -> None:
    """A shard's ``--deadline`` made a Unix time (``+SECONDS`` counts from now, the job's start: a job
    in an image gets the same instant) and its ``--resume`` archive an absolute path; both checked
    before any folder is made."""
    import time

    from cuw.jobs.continuation import parse_deadline, resume_path

    if args.deadline is not None:
        args.deadline = repr(parse_deadline(args.deadline, time.time()))
    if args.resume is not None:
        args.resume = resume_path(args.resume)


def _inner_argv(args: argparse.Namespace, verb: str, recipes_dir: Path, spec: Optional[ShardSpec], job: "ImageJob") -> list[str]:
    """The verb's own command line for the forge inside the image: absolute paths, no --image."""
    argv = [verb, args.recipe] + ([str(spec)] if spec is not None else [])
    if job.foreign:  # the host's toolkit cannot run there: NVIDIA's pinned wheels for its machine
        argv += ["--toolkit", "wheels"]
    argv += [
        "--work",
        str(args.work.resolve()),
        "--artifacts",
        str(args.artifacts.resolve()),
        "--recipes",
        str(recipes_dir.resolve()),
    ]
    if verb != "shard":
        argv += ["--dist", str(args.dist.resolve())]
        argv += ["--build-number", args.build_number] if args.build_number else []
    else:
        argv += ["--quiet"] if args.quiet else []
        argv += ["--deadline", args.deadline] if args.deadline is not None else []
        argv += ["--resume", str(args.resume)] if args.resume is not None else []
    for flag, value in (("--jobs", args.jobs), ("--cache-tool", args.cache_tool), ("--cache-remote", args.cache_remote)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def _image_mounts(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> tuple[list[Path], list[Path]]:
    """The folders a job in an image writes, and those it only reads. A ``--resume`` archive is read
    where it is: read-only unless it lies in a folder the job writes (the command a partial part
    prints resumes the job's own output, which the continuation keeps aside there first)."""
    folders = [args.work, args.artifacts] + ([args.dist] if args.verb != "shard" else [])
    read_only = [recipes_dir] + ([settings.git_mirror] if settings.git_mirror is not None else [])
    resume = getattr(args, "resume", None)
    if resume is not None and not any(resume.resolve().is_relative_to(Path(f).resolve()) for f in folders):
        read_only.append(resume.parent)  # the archive and its report
    return folders, read_only


def _in_image(args: argparse.Namespace, job: "ImageJob", recipe: Recipe, recipes_dir: Path, spec: Optional[ShardSpec]) -> int:
    """shard, link or build with ``--image``: each job in a container of the build image (with the
    run's settings, ``job.settings``)."""
    import platform

    from cuw.config import toolkits

    from cuw.jobs.container import run_verb

    settings = job.settings
    folders, read_only = _image_mounts(args, recipes_dir, settings)
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    if job.foreign and toolkits.requested(getattr(args, "toolkit", None), settings)[0] not in (None, "wheels"):
        raise InputError(
            f"--image {job.ref} runs on {job.machine}, this machine on {platform.machine()}: its jobs use "
            "NVIDIA's pinned wheels for its machine (--toolkit wheels), not a toolkit of this one"
        )
    cell_work = _paths(args).cell_work(local_cell(recipe, find_toolkit(homes=settings.homes), job.lane))
    if args.verb in ("shard", "link"):  # the forge inside writes the timeline report after a link
        label = f"shard {spec}" if spec is not None else "link"
        lock = cell_work / f".{'shard-' + spec.tag if spec is not None else 'link'}.image.lock"
        return run_verb(job, _inner_argv(args, args.verb, recipes_dir, spec, job), folders, read_only, label, report.say, lock)
    from cuw.jobs.local import run_build

    def link() -> bool:
        argv = _inner_argv(args, "link", recipes_dir, None, job)
        return run_verb(job, argv, folders, read_only, "link", report.say, cell_work / ".link.image.lock") == 0

    # The reference as given (the records name it); a tag moved meanwhile is caught by the id the link compares.
    shard_args = ["--image", job.ref, "--engine", job.engine.name]
    outcomes, linked = run_build(
        recipe, _paths(args), args.shards, recipes_dir, shard_args=shard_args, link=link, lane=job.lane, settings=settings
    )
    return refused_unless(bool(linked) and all(outcomes), "a shard, link or verify gate")


def _use_toolkit(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> Settings:
    """A forced toolkit or a policy entry that is not system: chosen (provisioned) once, and the
    run's settings with it (its jobs get it too); else the settings as they are."""
    from cuw.config import toolkits

    policy = load_policy(recipes_dir)
    option = getattr(args, "toolkit", None)
    if not toolkits.needs_choice(policy, option, settings):
        return settings
    chosen = toolkits.choose(policy, settings, option)
    report.say(f"toolkit: {chosen.how}")
    return settings.with_toolkit(chosen.toolkit.home)


def _toolkit(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.config import toolkits

    policy = load_policy(recipes_dir)
    line = args.cuda
    if line is not None and line not in policy.grid.cuda:
        raise InputError(f"--cuda {line}: not a CUDA line of the grid ({', '.join(policy.grid.cuda)} in recipes/defaults.yml)")
    forced = toolkits.requested(args.toolkit, settings)[0]
    choice = forced or (toolkits.policy_choice(policy, line) if line else None)
    outputs: dict[str, str] = {}
    if args.github_env and choice in (None, "system"):
        # The pinned system install (install-cuda.sh / .ps1) is the next step of the job.
        report.say(f"toolkit: CUDA {line or '(the system line)'}: system toolkit, installed by the workflow's install step")
        outputs["source"] = "system"
    else:
        chosen = toolkits.choose(policy, settings, args.toolkit, line)
        report.say(f"toolkit: {chosen.how}")
        print(chosen.toolkit.home)
        outputs["source"] = chosen.source
        if args.github_env:
            home = str(chosen.toolkit.home)
            _github_file("GITHUB_ENV", settings.github.env_file, {"CUW_CUDA_HOME": home, "CUDA_HOME": home})
    if args.github_env:
        _github_file("GITHUB_OUTPUT", settings.github.output_file, outputs)
    return 0


def _github_file(var: str, target: Optional[str], values: dict[str, str]) -> None:
    if not target:
        raise InputError(
            f"--github-env: ${var} is not set (it is set inside a GitHub Actions step); run without --github-env here"
        )
    with open(target, "a", encoding="utf-8") as out:
        out.writelines(f"{k}={v}\n" for k, v in values.items())


def _grid(args: argparse.Namespace, recipes_dir: Path, settings: Settings) -> int:
    from cuw.config import grid_check
    from cuw.config.recipe import check_recipes_dir

    policy = _policy_with_grid(check_recipes_dir(recipes_dir))
    indexes = dict(policy.torch_index)
    for item in args.index:
        cuda, eq, url = item.partition("=")
        if not eq or cuda not in policy.grid.cuda or not url.strip():
            raise InputError(f"--index {item!r} is not CUDA=URL with a CUDA line of the grid ({', '.join(policy.grid.cuda)})")
        indexes[cuda] = url.strip()
    if not args.check:
        for torch, release in sorted(policy.grid.torch.items()):
            print(f"torch {torch}: CUDA {', '.join(release.cuda)}; Python {', '.join(release.python)}")
        return 0
    result = grid_check.check(policy.grid, indexes)
    print(grid_check.render(result, policy.grid))
    if not result.ok:
        return refused_unless(False, "grid --check: the grid lacks releases")
    if result.unreachable and not result.seen:
        raise CuwError(f"no torch index answered ({', '.join(result.unreachable)}): nothing was checked")
    return 0


def write_timeline(cell_dir: Path, paths: Paths, output: Optional[Path] = None) -> Path:
    """The cell's timeline as HTML (``<cell_dir>/report.html`` by default)."""
    from cuw.jobs import timeline

    if output is not None:
        check_destination(output, "--output")
    for option, folder in (("--artifacts", paths.artifacts), ("--dist", paths.dist)):
        optional_folder(folder, option)  # absent: no reports; a file or a FIFO there: refused, not passed over
    drawn = timeline.load(cell_dir, [paths.artifacts / cell_dir.name, paths.dist])
    if output is not None:
        return write_text(output, timeline.html(drawn), "--output")
    return place_text(cell_dir / "report.html", timeline.html(drawn), "report")


def _cell_report(recipe: Recipe, paths: Paths, settings: Settings) -> None:
    """After a link or build: the timeline report, named in the verb's last line, and its gantt
    chart in the GitHub step summary."""
    from cuw.jobs import timeline
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    cell_dir = paths.cell_work(local_cell(recipe, find_toolkit(homes=settings.homes)))
    try:
        out = write_timeline(cell_dir, paths)
        drawn = timeline.load(cell_dir, [paths.artifacts / cell_dir.name, paths.dist])
        report.append_summary(timeline.mermaid(drawn), settings.github.step_summary)
    except CuwError as exc:  # the verdict stands; the picture is a courtesy
        report.say(f"no timeline report: {exc}")
        return
    report.say(f"report: {out}")
