"""The handoff fingerprint: what a shard's cache entries are a function of, and what decided
which TUs were its own.

One function computes it for every job of a cell (each shard, and the link), right after the
job's source is copied and patched, before anything is built. Every manifest carries it; the link
compares each archive's with its own, field by field, before it builds: an archive from another
forge commit, recipe, source, arch list, toolkit or ownership rule is refused naming the field and
the shard, instead of an hour of misses blamed, through today's assignment, on the wrong shard.
What else decides a compile is checked by its own rule: the cache tool and version, the remote
(:func:`cuw.jobs.archive.expect`) and the builder (image, glibc, compiler:
:func:`cuw.jobs.archive.check_builder`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from cuw.base import files
from cuw.base.errors import InputError, ToolError
from cuw.config.recipe import Recipe
from cuw.jobs.cell_env import forge_digest
from cuw.partition.assignment import recipe_assignment
from cuw.toolchain.toolkit import Toolkit

# Each field, and what a difference in it means; the first that differs is named (a recipe edit that
# changes the ownership rule is named as ownership: what decides which shard's misses they are).
FIELDS: dict[str, str] = {
    "forge": "the forge's own code (its seat, its build environment)",
    "ownership": "which shard owns which TU (the rule, N, the cost table)",
    "source": "the patched source tree as the build sees it",
    "recipe": "the recipe file (backend, flags, environment)",
    "archs": "the cell's arch list",
    "toolkit": "the CUDA toolkit (nvcc's version)",
}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def tree_digest(root: Path) -> str:
    return files.tree_digest(root)[:16]


def _nvcc_version(toolkit: Toolkit) -> str:
    try:
        out = subprocess.run(
            [str(toolkit.nvcc), "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            stdin=subprocess.DEVNULL,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{toolkit.nvcc} --version: {exc}") from None
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else toolkit.version


def handoff_fingerprint(recipe: Recipe, src: Path, archs: list[str], toolkit: Toolkit, count: int, lane: str) -> dict[str, str]:
    """The job's fingerprint (:data:`FIELDS`), from its patched source ``src`` and the cell's N."""
    rule = recipe_assignment(recipe, count, src, lane)
    ownership = json.dumps([rule.count, rule.rule, sorted(rule.table.items())]).encode()
    return {
        "forge": forge_digest()[:16],
        "recipe": _digest((Path(recipe.folder) / "recipe.yml").read_bytes()),
        "source": tree_digest(src),
        "archs": ";".join(archs),
        "toolkit": _nvcc_version(toolkit),
        "ownership": _digest(ownership),
    }


def check_fingerprint(theirs: dict[str, str], ours: dict[str, str], archive: Path, shard: str) -> None:
    """The archive's fingerprint against the link's: the first field that differs, named."""
    for field, meaning in FIELDS.items():
        if theirs.get(field) != ours.get(field):
            raise InputError(
                f"{archive}: shard {shard} was built with another {field} ({meaning}: "
                f"{theirs.get(field) or 'none'} there, {ours[field]} here); its cache would miss here: "
                f"run the shards again with this forge, recipe and source"
            )
