"""What a cell's wheel is a function of, known before anything is built.

The plan (``cuw matrix --published``) compares it with the build records of the published index
to leave out cells whose wheel is already there; the link job's build record stores it (``cuw
record``), and publish calls a rebuilt wheel of the same inputs "already published". One function
computes it for both, so they cannot drift. Every input is one named field, so a stale cell says
which one changed:

* ``recipe``: the settings of ``recipe.yml`` that reach the build (backend, env, flags, extra
  deps, ``requires_dist``, the wheel's Python tag, ...), as parsed: a comment is no input;
* ``patch``: the sha256 of ``patch.py`` (``""``: none);
* ``files``: every other file of the recipe folder (a file ``patch.py`` reads);
* ``source``: a PyPI source's name and sdist sha256, a git source's URL, tag, commit and
  submodules, a ``path`` source's tree (hashed wherever it lies: ``../example/package`` too);
* ``archs``: the arch list the cell compiles (the recipe's override or the policy's list);
* ``image``: the build image the cell's jobs run in (``""``: on the runner itself);
* ``toolkit``: the CUDA line's toolkit choice and pins;
* ``wheel_policy``: what finish does to the wheel (the libraries never grafted, the RPATHs to the
  CUDA line's runtime wheels);
* ``cell``: the cell, its Python left out for a ``py3`` wheel (any interpreter builds the same
  wheel; the plan builds it with the lowest).

Not in it, because no byte of the wheel depends on them: what the planner alone reads (``costs.json``,
the folder's ``README*.md``, ``sharding``, ``grid``, ``max_jobs``, ``nvcc_threads``), what only checks the wheel
(``verify``, ``device_code``, the lanes' size limits), the forge's own version (a forge release does
not make every published wheel stale) and the torch patch release (the cell pins its torch line).

The inputs carry :data:`INPUTS_SCHEME`. A record of an older scheme is compared input by input
where its stored inputs mean the same (:func:`compare_inputs`); what they cannot tell is said, and
the plan reports such a cell as "not comparable" instead of re-planning the grid.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from cuw.base.files import sha256_of, tree_digest
from cuw.config.cell import Cell
from cuw.config.grid import cell_archs
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe

INPUTS_SCHEME = 2
"""The version of what :func:`cell_inputs` covers; records without ``inputs_scheme`` are scheme 1."""

PLANNER_ONLY = ("sharding", "grid", "max_jobs", "nvcc_threads")
"""recipe.yml keys the planner and the jobs read: how a cell is split and how many compiles (or nvcc
threads) run at once; the link builds every TU, the same objects, so the wheel is the same."""
CHECKS_ONLY = ("verify", "device_code")
"""recipe.yml keys the gates and verify read: they pass or refuse a wheel, they never change it."""
APART = ("source", "archs", "key", "folder")
"""recipe.yml keys that are inputs of their own (``source``, ``archs``) or set by the loader."""
PLANNER_FILES = ("costs.json",)
"""Files of the recipe folder the planner alone reads, besides ``README*.md``."""


def cell_inputs(recipe: Recipe, policy: Policy, cell: Cell, image: str) -> dict[str, Any]:
    """The inputs of ``cell``'s wheel, as a JSON object (its :func:`inputs_digest` is what compares)."""
    return {
        "inputs_scheme": INPUTS_SCHEME,
        "cell": input_cell(recipe, cell).id,
        "recipe": recipe_settings(recipe, cell),
        "patch": _patch_digest(recipe),
        "files": _files_digest(recipe),
        "source": _source_input(recipe),
        "archs": cell_archs(recipe, policy.archs, cell),
        "image": image,
        "toolkit": {"choice": policy.toolkits.get(cell.cuda, "system"), "wheels": policy.toolkit_wheels.get(cell.cuda, [])},
        "wheel_policy": _wheel_policy(asdict(policy.wheel), cell.cuda),
    }


def inputs_digest(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def any_python(recipe: Recipe) -> bool:
    """Whether any interpreter builds the recipe's wheel: a ``py3-none`` wheel (an ``abi3`` one is
    tagged with the Python that built it, so only its lowest serves the cell)."""
    return recipe.wheel_python == "py3"


def input_cell(recipe: Recipe, cell: Cell) -> Cell:
    """The cell as the inputs name it: without its Python where :func:`any_python` (``py3``), so a
    wheel that any interpreter built covers the collapsed cell the plan builds with the lowest."""
    return replace(cell, python="3") if any_python(recipe) else cell


def recipe_settings(recipe: Recipe, cell: Cell) -> dict[str, Any]:
    """recipe.yml's settings that reach ``cell``'s build, by key (a per-line setting: its line's)."""
    data = asdict(recipe)
    data["extra_deps_cuda"] = recipe.extra_deps_cuda.get(cell.cuda, [])
    return {k: v for k, v in sorted(data.items()) if k not in (*PLANNER_ONLY, *CHECKS_ONLY, *APART)}


def _patch_digest(recipe: Recipe) -> str:
    patch = Path(recipe.folder) / "patch.py"
    return sha256_of(patch) if patch.is_file() else ""


def _not_an_input(rel: Path) -> bool:
    """A file of the recipe folder that is no input of its own: the planner's, or one covered apart."""
    if "__pycache__" in rel.parts:
        return True
    if len(rel.parts) != 1:
        return False
    name = rel.name
    return name in (*PLANNER_FILES, "recipe.yml", "patch.py") or (name.startswith("README") and name.endswith(".md"))


def _files_digest(recipe: Recipe) -> str:
    """sha256 over the recipe folder's other files (as :func:`tree_digest` hashes a tree), a ``path``
    source inside it left to ``source``."""
    folder = Path(recipe.folder)
    inside = recipe.source_dir if recipe.source.path is not None else None
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if _not_an_input(rel) or (inside is not None and (path == inside or inside in path.parents)):
            continue
        if path.is_file():
            h.update(f"F {rel.as_posix()} ".encode() + bytes.fromhex(sha256_of(path)) + b"\n")
        elif path.is_symlink():
            h.update(f"L {rel.as_posix()} -> {os.readlink(path)}\n".encode())
    return h.hexdigest()


def _source_pin_v1(recipe: Recipe) -> str:
    """Scheme 1's ``source`` (a ``path`` source by its name only, which said nothing of its files)."""
    src = recipe.source
    if src.pypi:
        return f"pypi {src.pypi} sha256 {src.sha256}"
    if src.git:
        return f"git {src.git} {src.tag} commit {src.commit}"
    return f"path {src.path}"


def _source_input(recipe: Recipe) -> str:
    src = recipe.source
    if src.path is not None:
        return f"path {src.path} tree {tree_digest(recipe.source_dir)}"
    return _source_pin_v1(recipe) + (" with submodules" if src.git and src.recursive else "")


def _wheel_policy(wheel: Any, cuda: str) -> Any:
    """The wheel policy as it reaches one CUDA line's wheel (``wheel`` as ``asdict`` gives it; a
    stored one of another shape is returned as it is, to compare unequal)."""
    if not isinstance(wheel, dict) or not isinstance(wheel.get("cuda_runtime_rpath", {}), dict):
        return wheel
    reaches = {"exclude": wheel.get("exclude", []), "cuda_runtime_rpath": wheel.get("cuda_runtime_rpath", {}).get(cuda, [])}
    if wheel.get("variants"):  # a variant label and variant.json: other bytes (named only when on, so no record goes stale)
        reaches["variants"] = True
    return reaches


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The inputs that differ, by name; inside an input that is an object on both sides, its keys
    (``recipe.env``, ``toolkit.wheels``)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)]
        else:
            out.append(key)
    return out


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The inputs that differ between two (:func:`changed_fields`, as one phrase): what the plan says
    of a stale cell, and what a rebuild's build record says of the build it supersedes."""
    return ", ".join(changed_fields(old, new)) or "the digest"


@dataclass(frozen=True)
class Comparison:
    """A stored record's inputs against today's: which changed, and which it cannot tell."""

    changed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    scheme: int = INPUTS_SCHEME


def stored_scheme(old: dict[str, Any]) -> Optional[int]:
    """The scheme of stored inputs (1 when unmarked); None when the mark is no number."""
    scheme = old.get("inputs_scheme", 1)
    return scheme if type(scheme) is int else None


def compare_inputs(old: dict[str, Any], today: dict[str, Any], recipe: Recipe, policy: Policy, cell: Cell) -> Comparison:
    """``old`` (a record's stored inputs) against ``today`` (:func:`cell_inputs` of the cell it covers)."""
    scheme = stored_scheme(old)
    if scheme == INPUTS_SCHEME:
        return Comparison(changed_fields(old, today))
    if scheme != 1:
        return Comparison(unknown=["every input (a scheme this forge does not know)"], scheme=scheme or 0)
    # Scheme 1 stored: cell, recipe (every file of the recipe folder), source (path sources by name),
    # archs, image, toolkit and the whole wheel policy.
    changed = [k for k in ("archs", "image", "toolkit") if old.get(k) != today[k]]
    if _wheel_policy(old.get("wheel_policy"), cell.cuda) != today["wheel_policy"]:
        changed.append("wheel_policy")
    unknown = []
    folder_same = old.get("recipe") == tree_digest(Path(recipe.folder))
    if not folder_same:  # costs.json and the READMEs were in it: which file changed cannot be told
        unknown.append("the recipe folder (scheme 1 hashed it whole, costs.json and READMEs too)")
    if recipe.source.path is None:
        if old.get("source") != _source_pin_v1(recipe):
            changed.append("source")
    elif not (folder_same and _inside(recipe.source_dir, Path(recipe.folder))):
        unknown.append(f"source (scheme 1 named the path {recipe.source.path}, not its files)")
    return Comparison(sorted(changed), unknown, 1)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
