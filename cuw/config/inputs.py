"""What a cell's wheel is a function of, known before anything is built.

The plan (``cuw matrix --published``) compares it with the build records of the published index
to leave out cells whose wheel is already there; the link job's build record stores it (``cuw
record``), and publish calls a rebuilt wheel of the same inputs "already published". One function
computes it for both, so they cannot drift:

* the recipe folder, every file (``recipe.yml``, ``patch.py``, a ``path`` source; a PyPI or git
  source through its pins in ``recipe.yml``: the sdist's sha256, the tag's commit);
* the arch list the cell compiles (the recipe's override or the policy's list);
* the build image the cell's jobs run in (``""``: on the runner);
* the CUDA line's toolkit choice and pins, and the wheel policy (what finish grafts, the RPATHs it
  writes, the size limit).

Not in it: the forge's own version (a forge release does not make every published wheel stale)
and the torch patch release (the cell pins its torch line).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cuw.base.files import tree_digest
from cuw.config.cell import Cell
from cuw.config.grid import cell_archs
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe


def _source_pin(recipe: Recipe) -> str:
    src = recipe.source
    if src.pypi:
        return f"pypi {src.pypi} sha256 {src.sha256}"
    if src.git:
        return f"git {src.git} {src.tag} commit {src.commit}"
    return f"path {src.path}"


def cell_inputs(recipe: Recipe, policy: Policy, cell: Cell, image: str) -> dict[str, Any]:
    """The inputs of ``cell``'s wheel, as a JSON object (its :func:`inputs_digest` is what compares)."""
    return {
        "cell": cell.id,
        "recipe": tree_digest(Path(recipe.folder)),
        "source": _source_pin(recipe),
        "archs": cell_archs(recipe, policy.archs, cell),
        "image": image,
        "toolkit": {"choice": policy.toolkits.get(cell.cuda, "system"), "wheels": policy.toolkit_wheels.get(cell.cuda, [])},
        "wheel_policy": asdict(policy.wheel),
    }


def inputs_digest(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The inputs that differ between two (``recipe, image``): what the plan says of a stale cell, and
    what a rebuild's build record says of the build it supersedes."""
    fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return ", ".join(fields) or "the digest"
