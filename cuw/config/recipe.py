"""Recipes: ``recipes/<name>/recipe.yml`` loaded into typed, validated objects."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Optional


import cuw
from cuw.base.errors import InputError
from cuw.base.yamlfile import read_yaml
from cuw.config.lanes import LANE_NAMES
from cuw.config.limits import check_count
from cuw.config.schema import SchemaError, load_dataclass

Backend = Literal["scikit-build-core", "torch-extension", "setuptools"]
Filter = Literal["seat", "source"]
Rule = Literal["hash", "sorted", "cost"]
Lane = Literal[LANE_NAMES]  # type: ignore[valid-type]  # the names of cuw/config/lanes.py
WheelPython = Literal["per-interpreter", "py3", "abi3"]


@dataclass(frozen=True)
class Source:
    """Exactly one of: ``path``; ``pypi`` + ``sha256``; ``git`` + ``tag``."""

    path: Optional[str] = None
    """A folder relative to the recipe folder."""
    pypi: Optional[str] = None
    """An sdist, ``name==version``, from the package index pip uses."""
    sha256: Optional[str] = None
    """The sdist's sha256 (required with pypi)."""
    git: Optional[str] = None
    """A git repository URL (CI sources; these machines reach no git host)."""
    tag: Optional[str] = None
    """A release tag; a branch name is refused."""
    recursive: bool = False
    """Clone submodules too."""
    archive_sha256: Optional[str] = None
    """With git: the sha256 of the tag's ``git archive`` tarball, checked when the source comes from a
    tarball through ``--git-mirror`` or ``$CUW_GIT_MIRROR`` (offline builds); a tarball without it is refused."""
    commit: Optional[str] = None
    """With git (required): the commit the tag names, 40 hex digits (``git rev-parse <tag>^{commit}``).
    Every job checks out exactly this commit: a tag that moved since the recipe was written is
    refused, so shards cloning at different times cannot build different trees."""


@dataclass(frozen=True)
class ShardSources:
    """The files a partition covers, and how they group into families."""

    globs: list[str] = field(default_factory=list)
    """With ``filter: source``: globs (relative to the source root) of the files it partitions. With
    ``filter: seat``: the build's TUs, for a tree carrying sources no build step compiles (a bundled
    library's examples and tests): the planner, the progress line and a shard's expected slice count
    only these; the seat still partitions whatever the build compiles."""
    families: dict[str, list[str]] = field(default_factory=dict)
    """Family name -> globs (relative to the source root) of a subset of the files, such as
    per-arch targets; files in no family form family ``other``. Needs ``filter: source`` or a cost table."""
    seat_rest: bool = True
    """With ``filter: source``: the seat partitions the sources the globs do not cover (hand-written
    CUDA and host TUs) with the same rule, so each is compiled by one shard; ``false`` compiles them in
    every shard (for a build that cannot take an empty object for a hand-written TU)."""


@dataclass(frozen=True)
class Sharding:
    count: int = 1
    """N: compile shards per cell on the lanes that shard."""
    filter: Filter = "seat"
    """Who decides which TUs a shard compiles: the nvcc seat, or deleting sources before the build."""
    platforms: list[Lane] = field(default_factory=lambda: list(LANE_NAMES))
    """Lanes that shard; the others build whole (1/1)."""
    rule: Rule = "hash"
    """How TUs map to shards: ``hash`` (md5 of the key), ``sorted`` (round-robin over the sorted full
    set: ``filter: source`` or a cost table), ``cost`` (longest first over the recipe's ``costs.json``)."""
    per_family: bool = False
    """Partition each family separately so every family spreads over all shards (rule sorted or cost)."""
    source: ShardSources = field(default_factory=ShardSources)
    """The partitioned files (globs) and their families."""


@dataclass(frozen=True)
class UpstreamTests:
    """The package's own test suite, run by the verify gate against the installed wheel."""

    paths: list[str] = field(default_factory=list)
    """Files or folders of the tests' source that pytest runs (``test``, ``tests/test_ops.py``),
    relative to its root; empty: no upstream tests."""
    source: Source = field(default_factory=Source)
    """Where the tests come from, pinned like the recipe's source (the same keys: a git tag with
    its commit and ``archive_sha256``, through ``--git-mirror``; an sdist; a folder); unset: the
    recipe's own source."""
    requires: list[str] = field(default_factory=list)
    """Pinned pip requirements (``name==version``) the tests need beyond the wheel, its
    ``import_requires`` and what the forge's environment has (pytest, and torch where the recipe
    links it)."""
    deselect: list[str] = field(default_factory=list)
    """pytest node ids left out (``test/test_x.py::test_net``), each with a README line saying why."""
    timeout_s: int = 1800
    """The seconds the whole run may take (environment, install and pytest); past it verify fails."""


@dataclass(frozen=True)
class Verify:
    allowed_needed: list[str] = field(default_factory=list)
    """Extra DT_NEEDED sonames (globs) the wheel may depend on."""
    allowed_grafts: list[str] = field(default_factory=list)
    """Libraries (globs) auditwheel may copy into the wheel."""
    skip_import: list[str] = field(default_factory=list)
    """Modules not to import in the verify gate (with a README line saying why)."""
    load_libraries: list[str] = field(default_factory=list)
    """Wheel paths (globs) of libraries named like extension modules but without ``PyInit_``: torch
    operator libraries that ``torch.ops.load_library`` loads, or ``ctypes`` libraries. Verify loads
    each in a clean process instead of importing it; any other such file fails verify (Python could
    not import it)."""
    import_requires: list[str] = field(default_factory=list)
    """Pinned pip requirements installed beside the wheel for the import check: its runtime
    dependencies that the forge's environment lacks (the wheel itself installs without its own)."""
    import_requires_cuda: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line ('13.0'), pins added to ``import_requires`` for that line's cells: the NVIDIA
    runtime wheels (``nvidia-cuda-nvrtc``) whose libraries the wheel's RPATH finds."""
    tests: UpstreamTests = field(default_factory=UpstreamTests)
    """The package's own tests, run with pytest on CPU (``CUDA_VISIBLE_DEVICES=""``) against the
    installed wheel after the import check, in a venv that sees the forge's environment (its
    torch, its pytest); a failure fails verify naming the tests, the counts go into the verify
    report and the build record (docs/finish-verify-publish.md)."""
    gpu: Optional[str] = None
    """The GPU smoke ``cuw gpu`` runs on a machine with a GPU (docs/gpu.md): a short Python program,
    run in the wheel's own environment with ``CUDA_DISABLE_PTX_JIT=1``, with ``gpu`` in its globals
    (``gpu.dry_run``, ``gpu.device``, ``gpu.check(ok, why)``, ``gpu.skip(what)``, ``gpu.note(key,
    value)``, ``gpu.result(data)``: the digest every build of the package must agree on bit for bit)."""


@dataclass(frozen=True)
class GridOverride:
    """Narrows the farm grid for one recipe (its README must say why)."""

    platforms: list[Lane] = field(default_factory=list)
    """Only these lanes (empty: the farm's)."""
    python: list[str] = field(default_factory=list)
    """Only these Pythons (empty: the farm's)."""
    cuda: list[str] = field(default_factory=list)
    """Only these CUDA lines (empty: the farm's)."""
    min_pytorch: Optional[str] = None
    """The oldest torch release to build against."""


@dataclass(frozen=True)
class Recipe:
    name: str
    """The distribution name of the wheel."""
    links_torch: bool
    """Whether the wheel links torch: a torch-free recipe builds one cell per CUDA line, not per torch."""
    source: Source
    """Where the source comes from."""
    backend: Backend
    """How it builds: scikit-build-core (CMake), a torch extension (setuptools + torch's
    BuildExtension), or setuptools calling nvcc its own way (pccm/ccimport); each through its PEP 517
    build_wheel hook, which the job calls (cuw/jobs/frontend.py)."""
    device_code: bool = True
    """Whether the wheel carries compiled device code (SASS/PTX). ``false``: its kernels are compiled
    at run time (NVRTC, a JIT) and the build compiles host code only; the shard gate then takes a host
    compile through the seat as the build compiling from source, and verify's ``arch`` check requires
    no device code in the wheel instead of the cell's arches."""
    wheel_python: WheelPython = "per-interpreter"
    """The wheel's Python tag: ``per-interpreter`` (``cp311-cp311``, one cell per Python), ``py3``
    (``py3-none``, scikit-build-core's ``wheel.py-api = "py3"``: the Python axis collapses to one cell
    per lane x CUDA line (x torch), built with the grid's lowest Python) or ``abi3`` (``cp3X-abi3``
    from ``abi3_min_python``: one cell built with that Python). Verify checks the wheel's tag against it."""
    abi3_min_python: Optional[str] = None
    """With ``wheel_python: abi3``: the oldest Python the wheel serves ('3.10'); the cell builds with it."""
    build_subdir: str = "."
    """The folder inside the source that holds pyproject.toml or setup.py."""
    archs: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line, replaces the farm's arch list ('9.0', '12.0+PTX'); its README must say why."""
    grid: GridOverride = field(default_factory=GridOverride)
    """Narrows the farm grid; its README must say why."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the build (applied last). ``${NAME}`` is replaced by the build
    environment's value: the cell's ``CUDAARCHS`` (CMake form) and ``TORCH_CUDA_ARCH_LIST``,
    ``CUW_EXTRA_DEPS``, ``CUDA_HOME``…; ``$$`` is a literal ``$``."""
    extra_deps: list[str] = field(default_factory=list)
    """pip requirements installed for the build into the job's own folder (on PYTHONPATH;
    its path is $CUW_EXTRA_DEPS, for headers such as the nvidia-* wheels' cuBLAS)."""
    extra_deps_cuda: dict[str, list[str]] = field(default_factory=dict)
    """Per CUDA line ('13.0'), requirements added to extra_deps for that line's cells
    (the nvidia-* wheels are named per CUDA major: nvidia-nccl-cu12, nvidia-nccl-cu13)."""
    max_jobs: Optional[int] = None
    """At most this many parallel compiles in one build (two 6-7 GB cicc peaks swap a 16 GB runner). Unset,
    a shard runs as many as the lane's runner memory holds of its slice's measured peaks (docs/sharding.md)."""
    nvcc_flags: list[str] = field(default_factory=list)
    """Appended to every CUDA compile the seat runs."""
    nvcc_threads: Optional[int] = None
    """nvcc --threads N for every CUDA compile (parallel gencode targets inside one TU)."""
    pre_build: Optional[str] = None
    """A shell command run in the source folder before the build, with the seat and cache wired in."""
    requires_dist: Optional[list[str]] = None
    """Curated Requires-Dist replacing upstream's; ``{LOCAL}`` is the cell's local
    label (``cu130torch2.14``), ``{VER:<recipe>}`` a sibling recipe's finished version."""
    sharding: Sharding = field(default_factory=Sharding)
    """How a cell is split into compile shards."""
    verify: Verify = field(default_factory=Verify)
    """What the verify gate allows beyond the farm policy."""
    # Set by the loader, not by the YAML file.
    key: str = ""
    folder: str = ""

    @property
    def source_dir(self) -> Path:
        """The local source folder (``source.path`` recipes only)."""
        if self.source.path is None:
            raise InputError(f"recipe {self.key!r} has no local source folder (it is fetched)")
        return (Path(self.folder) / self.source.path).resolve()


LOADER_ONLY = ("key", "folder")


def default_recipes_dir(configured: Optional[Path] = None) -> Path:
    """``configured`` (the run's ``$CUW_RECIPES``), else ``./recipes``, else the recipes folder beside this package."""
    if configured:
        return configured
    local = Path.cwd() / "recipes"
    if local.is_dir():
        return local
    return Path(cuw.FORGE_ROOT) / "recipes"


# A recipe name is one folder name directly under the recipes folder; job folders,
# cell ids and archive names are built from it, so it may not carry a path.
RECIPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_recipes_dir(recipes_dir: Path) -> Path:
    if not recipes_dir.is_dir():
        what = "is not a folder" if recipes_dir.exists() else "does not exist"
        raise InputError(f"recipes folder {recipes_dir} {what} (pass --recipes DIR or set $CUW_RECIPES)")
    return recipes_dir


def check_recipe_name(key: str) -> str:
    if not RECIPE_NAME.fullmatch(key) or ".." in key:
        raise InputError(
            f"recipe name {key!r} is not a folder name (letters, digits, '_', '-', '.'; no '/', no '..'): "
            "give the name of a folder directly under the recipes folder"
        )
    return key


def known_recipes(recipes_dir: Path) -> list[str]:
    check_recipes_dir(recipes_dir)
    return sorted(p.parent.name for p in recipes_dir.glob("*/recipe.yml") if RECIPE_NAME.fullmatch(p.parent.name))


def load_recipe(key: str, recipes_dir: Optional[Path] = None) -> Recipe:
    """Loads ``<recipes_dir>/<key>/recipe.yml``; an unknown key lists the known ones."""
    recipes_dir = check_recipes_dir(recipes_dir or default_recipes_dir())
    check_recipe_name(key)
    path = recipes_dir / key / "recipe.yml"
    if path.is_dir():
        raise InputError(f"recipe {key!r}: {path} is a folder; a recipe is the file recipe.yml in its folder")
    if not path.is_file():
        known = known_recipes(recipes_dir)
        listing = ", ".join(known) if known else "none"
        raise InputError(f"unknown recipe {key!r} (in {recipes_dir}); known recipes: {listing}")
    data = read_yaml(path, "recipe")
    if isinstance(data, dict):
        for reserved in LOADER_ONLY:
            if reserved in data:
                raise SchemaError(f"{path}: {reserved!r} is set by the forge, not by the recipe")
        sharding = data.get("sharding")
        if isinstance(sharding, dict) and "sources" in sharding:
            raise SchemaError(f"{path}: sharding.sources moved to sharding.source.globs (write `source: {{globs: [...]}}`)")
    recipe = load_dataclass(Recipe, data, str(path))
    recipe = replace(recipe, key=key, folder=str(path.parent.resolve()))
    _validate(recipe, path)
    return recipe


def _validate_source(source: Source, path: Path) -> None:
    kinds = [k for k in ("path", "pypi", "git") if getattr(source, k) is not None]
    if len(kinds) != 1:
        raise InputError(f"{path}: source needs exactly one of path, pypi, git (got {', '.join(kinds) or 'none'})")
    if source.pypi is not None:
        if "==" not in source.pypi:
            raise InputError(f"{path}: source.pypi {source.pypi!r} must pin a version: name==version")
        if not (source.sha256 and len(source.sha256) == 64 and all(c in "0123456789abcdef" for c in source.sha256)):
            raise InputError(f"{path}: source.pypi needs source.sha256, the sdist's sha256 (64 hex digits)")
    elif source.sha256 is not None:
        raise InputError(f"{path}: source.sha256 goes with source.pypi")
    if source.git is not None and not re.fullmatch(r"(https?|ssh|git|file)://[^\s]+", source.git):
        # git reads "--upload-pack=<command>" and "ext::<command>" as commands to run: only a URL passes.
        raise InputError(
            f"{path}: source.git {source.git!r} is not a repository URL (https://, http://, ssh://, git:// or file://)"
        )
    if source.git is not None and (not source.tag or source.tag.startswith("-")):
        raise InputError(f"{path}: source.git needs source.tag (a release tag; a branch is refused)")
    if source.git is None and (
        source.tag is not None or source.recursive or source.archive_sha256 is not None or source.commit is not None
    ):
        raise InputError(f"{path}: source.tag, source.commit, source.recursive and source.archive_sha256 go with source.git")
    if source.git is not None and not (source.commit and re.fullmatch(r"[0-9a-f]{40}", source.commit)):
        raise InputError(
            f"{path}: source.commit {source.commit!r} must be the commit source.tag names (40 lowercase hex "
            f"digits: `git ls-remote {source.git} 'refs/tags/{source.tag}^{{}}'`): every job checks out that commit"
        )
    pin = source.archive_sha256
    if pin is not None and not (len(pin) == 64 and all(c in "0123456789abcdef" for c in pin)):
        raise InputError(
            f"{path}: source.archive_sha256 {pin!r} is not a sha256 (64 lowercase hex digits): "
            "write the output of `sha256sum <tarball>`"
        )


def _validate(recipe: Recipe, path: Path) -> None:
    _validate_source(recipe.source, path)
    subdir = recipe.build_subdir.replace("\\", "/")
    if subdir.startswith("/") or re.match(r"[A-Za-z]:", subdir) or ".." in subdir.split("/"):
        raise InputError(f"{path}: build_subdir {recipe.build_subdir!r} leads outside the source: give a folder inside it")
    if recipe.source.path is not None:
        # A job copies this folder into its tree: it must be the recipe's own files or a sibling
        # recipe's (example_torch builds ../example/package), never an arbitrary folder.
        root = path.parent.parent.resolve()
        if Path(recipe.source.path).is_absolute() or not recipe.source_dir.is_relative_to(root):
            raise InputError(
                f"{path}: source.path {recipe.source.path!r} leads outside the recipes folder {root}: give a folder "
                "relative to the recipe folder (package, or ../<other recipe>/package)"
            )
        if not recipe.source_dir.is_dir():
            raise InputError(f"{path}: source.path {recipe.source.path!r} is not a folder ({recipe.source_dir})")
        if not (recipe.source_dir / recipe.build_subdir).is_dir():
            raise InputError(f"{path}: build_subdir {recipe.build_subdir!r} is not a folder under the source")
    if recipe.wheel_python == "abi3" and not recipe.abi3_min_python:
        raise InputError(f"{path}: wheel_python: abi3 needs abi3_min_python, the oldest Python the wheel serves ('3.10')")
    if recipe.wheel_python != "abi3" and recipe.abi3_min_python is not None:
        raise InputError(f"{path}: abi3_min_python goes with wheel_python: abi3 (this recipe has {recipe.wheel_python})")
    if recipe.abi3_min_python is not None and not re.fullmatch(r"3\.\d+", recipe.abi3_min_python):
        raise InputError(f"{path}: abi3_min_python {recipe.abi3_min_python!r} is not a Python line like '3.10'")
    for key, most in (("max_jobs", 1024), ("nvcc_threads", 256)):
        value = getattr(recipe, key)
        if value is not None and not 1 <= value <= most:
            raise InputError(f"{path}: {key} must be from 1 to {most}, got {value}")
    sharding = recipe.sharding
    check_count(sharding.count, f"{path}: sharding.count")
    _validate_sharding(sharding, path)
    for line in recipe.extra_deps_cuda:
        if not re.fullmatch(r"\d+\.\d+", line):
            raise InputError(f"{path}: extra_deps_cuda.{line}: not a CUDA line like '13.0'")
    for line, archs in recipe.archs.items():
        for arch in archs:
            check_arch(arch, f"{path}: archs.{line}")
    _validate_gpu_smoke(recipe.verify.gpu, path)
    _validate_tests(recipe, path)
    _require_readme(recipe, path)


def _validate_gpu_smoke(snippet: Optional[str], path: Path) -> None:
    """verify.gpu is Python: a syntax error is the recipe's, found where it is loaded, not on a GPU machine."""
    if snippet is None:
        return
    if not snippet.strip():
        raise InputError(f"{path}: verify.gpu is empty: give the smoke's Python program, or leave the key out")
    try:
        compile(snippet, f"{path}: verify.gpu", "exec")
    except SyntaxError as exc:
        raise InputError(f"{path}: verify.gpu line {exc.lineno}: {exc.msg}: fix the smoke's Python") from None


TESTS_MAX_TIMEOUT_S = 6 * 3600  # a GitHub-hosted job's own limit


def recipe_of_tests(recipe: Recipe) -> Recipe:
    """The recipe as the tests' source sees it: its ``source`` replaced by ``verify.tests.source``
    when that is set (the jobs' source fetcher then brings the tests' tree)."""
    if recipe.verify.tests.source == Source():
        return recipe
    return replace(recipe, source=recipe.verify.tests.source)


def _validate_tests(recipe: Recipe, path: Path) -> None:
    """verify.tests: paths inside the tests' source, a pinned source, pinned requirements, a sane time limit."""
    tests = recipe.verify.tests
    if tests == UpstreamTests():
        return
    if not tests.paths:
        raise InputError(f"{path}: verify.tests.paths names no tests: list the test folders or files (test, tests/test_x.py)")
    if tests.source != Source():
        try:
            _validate_source(tests.source, path)
        except InputError as exc:
            # The source's own messages, about the key they are under here.
            said = str(exc).removeprefix(f"{path}: ")
            raise InputError(f"{path}: " + re.sub(r"(?<![\w/.-])source(?=[. ])", "verify.tests.source", said)) from None
    for where in tests.paths:
        _relative_inside(where, f"{path}: verify.tests.paths")
    for node in tests.deselect:
        _relative_inside(node.split("::", 1)[0], f"{path}: verify.tests.deselect")
    for requirement in tests.requires:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!*-]+", requirement.strip()):
            raise InputError(
                f"{path}: verify.tests.requires {requirement!r} is not pinned: write name==version (what the tests "
                "ran with is then the same on every machine)"
            )
    if not 1 <= tests.timeout_s <= TESTS_MAX_TIMEOUT_S:
        raise InputError(f"{path}: verify.tests.timeout_s must be from 1 to {TESTS_MAX_TIMEOUT_S} seconds, got {tests.timeout_s}")
    seen = recipe_of_tests(recipe)
    if seen.source.path is not None:  # a folder: its tests are there now, or the recipe is wrong
        root = path.parent.parent.resolve()
        if Path(seen.source.path).is_absolute() or not seen.source_dir.is_relative_to(root):
            raise InputError(
                f"{path}: verify.tests.source.path {seen.source.path!r} leads outside the recipes folder {root}: give a "
                "folder relative to the recipe folder"
            )
        for where in tests.paths:
            if not (seen.source_dir / where).exists():
                raise InputError(
                    f"{path}: verify.tests.paths: {where!r} is not in {seen.source_dir}: name a test folder or file there"
                )


def _relative_inside(where: str, key: str) -> None:
    given = where.replace("\\", "/")
    if not given.strip() or given.startswith("/") or re.match(r"[A-Za-z]:", given) or ".." in given.split("/"):
        raise InputError(f"{key}: {where!r} is not a path inside the tests' source: give one relative to its root")


def costs_path(recipe_folder: Path) -> Path:
    """The recipe's cost table: measured seconds per TU, committed next to recipe.yml."""
    return recipe_folder / "costs.json"


def _validate_sharding(sharding: Sharding, path: Path) -> None:
    globs = sharding.source.globs
    has_costs = costs_path(path.parent).is_file()
    record = f"create {costs_path(path.parent)} with `cuw costs {path.parent.name} --from <seat log or .ninja_log>`"
    if sharding.filter == "source" and not globs:
        raise InputError(f"{path}: sharding.filter is 'source' but sharding.source.globs names no files to partition")
    if sharding.filter == "seat" and not sharding.source.seat_rest:
        raise InputError(f"{path}: sharding.source.seat_rest is only read with filter: source (this recipe uses seat)")
    if sharding.rule == "cost" and not has_costs:
        raise InputError(f"{path}: sharding.rule is 'cost' but there is no cost table: {record}")
    if sharding.rule == "sorted" and sharding.filter == "seat" and not has_costs:
        raise InputError(
            f"{path}: sharding.rule 'sorted' needs the full set of TUs, which a seat only knows from a cost table: "
            f"use filter: source, or {record}"
        )
    if sharding.source.families and sharding.filter == "seat" and not has_costs:
        raise InputError(
            f"{path}: sharding.source.families needs the full set of TUs (filter: source, or a cost table): {record}"
        )
    if sharding.per_family and sharding.rule == "hash":
        raise InputError(f"{path}: sharding.per_family needs rule sorted or cost (the hash rule cannot spread a family)")
    if sharding.per_family and not sharding.source.families:
        raise InputError(f"{path}: sharding.per_family is set but sharding.source.families names no family")
    for name, family_globs in sharding.source.families.items():
        if not family_globs:
            raise InputError(f"{path}: sharding.source.families.{name} names no globs")


def check_arch(arch: str, where: str) -> None:
    base, plus, suffix = arch.partition("+")
    major, _, minor = base.partition(".")
    if not (major.isdigit() and minor[:1].isdigit()) or (plus and suffix != "PTX"):
        raise InputError(f"{where}: {arch!r} is not a compute capability like '9.0' or '12.0+PTX'")


def _require_readme(recipe: Recipe, path: Path) -> None:
    """An override of the farm's policy without a README line explaining it is an error."""
    overrides = [key for key, value in (("archs", recipe.archs), ("grid", recipe.grid != GridOverride())) if value]
    if not overrides:
        return
    readme = path.parent / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    unexplained = [key for key in overrides if f"`{key}`" not in text]
    if unexplained:
        raise InputError(
            f"{path}: overrides {', '.join(unexplained)} of the farm policy; "
            f"explain each in {readme} (mention it as `{unexplained[0]}`)"
        )


def recipe_for_wheel(filename: str, recipes_dir: Path) -> str:
    """The key of the recipe that builds the distribution a wheel filename names."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    parts = filename[: -len(".whl")].split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):  # a PEP 825 variant label last
        filename = "-".join(parts[:-1]) + ".whl"  # (cuw.wheel.variants.split_label, a layer above)
    try:
        dist = canonicalize_name(parse_wheel_filename(filename)[0])
    except Exception:
        raise InputError(f"{filename} is not a wheel filename") from None
    known = known_recipes(recipes_dir)
    matches = [k for k in known if canonicalize_name(load_recipe(k, recipes_dir).name) == dist]
    if not matches:
        raise InputError(f"no recipe builds {dist}; pass --recipe (known: {', '.join(known)})")
    return matches[0]
