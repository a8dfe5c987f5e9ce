"""Staleness is exactly what changes a wheel's bytes, and the published wheel covers its cell.

Each input is flipped alone in a copy of the real recipes, against a real folder index holding the
record ``cuw record`` writes (the same ``cell_inputs``): the stale reason names exactly that input,
and what only the planner or the checks read (``costs.json`` rewritten by ``cuw costs``, a README,
``sharding``, a lane's size limit) leaves the cell current. Records of the older inputs scheme are
compared where they can be, else "not comparable" and rebuilt only with ``--rebuild all``. A py3
wheel built with any Python covers the collapsed cell, a wheel built elsewhere than the plan builds
is stale naming where; and the suite's one real example build, recorded and published, is current
for ``cuw matrix --on-host --published``.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from conftest import REPO, recorded_example, run_cuw
from wheel_maker import make_wheel
from cuw.base.files import tree_digest
from cuw.ci import matrix
from cuw.ci.published import CellStatus, cell_status, read_records
from cuw.cli.main import main
from cuw.config.cell import Cell
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import Policy, load_policy
from cuw.config.recipe import Recipe, load_recipe
from cuw.wheel.publish import publish

IMAGE = "r/i@sha256:" + "b" * 64
# The cell the plan builds of each recipe on linux with CUDA 13.0 (a py3 recipe: with the lowest Python).
CELLS = {
    "example": Cell("example", "linux", "3.10", "13.0", None),
    "example_source": Cell("example_source", "linux", "3.10", "13.0", None),
    "lightgbm": Cell("lightgbm", "linux", "3.10", "13.0", None),
    "cumm": Cell("cumm", "linux", "3.10", "13.0", None),
    "example_torch": Cell("example_torch", "linux", "3.10", "13.0", "2.14"),
}
DIST = {"example": "cuw_example", "example_source": "cuw_example", "lightgbm": "lightgbm", "cumm": "cumm"}


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _wheel(key: str, cell: Cell, build: str = "") -> str:
    cuda = cell.cuda.replace(".", "")
    arch = "aarch64" if cell.lane == "linux_aarch64" else "x86_64"
    return f"{DIST.get(key, key)}-0.1.0+cu{cuda}{build}-py3-none-manylinux_2_28_{arch}.whl"


def _v1_inputs(recipe: Recipe, policy: Policy, cell: Cell, image: str) -> dict:
    """What ``cuw record`` stored before inputs scheme 2 (the recipe folder hashed whole, a path source by name)."""
    src = recipe.source
    source = (
        f"pypi {src.pypi} sha256 {src.sha256}"
        if src.pypi
        else f"git {src.git} {src.tag} commit {src.commit}"
        if src.git
        else f"path {src.path}"
    )
    return {
        "cell": cell.id,
        "recipe": tree_digest(Path(recipe.folder)),
        "source": source,
        "archs": cell_inputs(recipe, policy, cell, image)["archs"],
        "image": image,
        "toolkit": {"choice": policy.toolkits.get(cell.cuda, "system"), "wheels": policy.toolkit_wheels.get(cell.cuda, [])},
        "wheel_policy": asdict(policy.wheel),
    }


def _publish(recipes: Path, index: Path, key: str, cell: Cell, image: str = "", scheme: int = 2, name: str = "") -> str:
    """A wheel of ``cell`` and the record ``cuw record`` writes for it, published into ``index``."""
    recipe, policy = load_recipe(key, recipes), load_policy(recipes)
    inputs = cell_inputs(recipe, policy, cell, image) if scheme == 2 else _v1_inputs(recipe, policy, cell, image)
    name = name or _wheel(key, cell)
    incoming = index.parent / f"incoming-{len(list(index.parent.glob('incoming-*')))}"
    fields = {"inputs": inputs, "inputs_digest": inputs_digest(inputs)} if scheme else {}
    make_wheel(incoming, name, b"bytes", cell=cell.to_dict(), recipe=key, **fields)
    assert publish(incoming, index).published == [name]
    return name


def _status(recipes: Path, index: Path, key: str, cell: Optional[Cell] = None, image: str = "") -> CellStatus:
    recipe = load_recipe(key, recipes)
    return cell_status([(recipe, cell or CELLS[key], image)], load_policy(recipes), read_records(str(index)))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def _seat_log(recipes: Path) -> Path:
    """A shard's seat log timing every TU of the example, for ``cuw costs --from``."""
    log = recipes.parent / "seat.jsonl"
    keys = sorted(json.loads((recipes / "example" / "costs.json").read_text())["costs"])
    log.write_text(
        "".join(json.dumps({"action": "compiled", "key": k, "outcome": "miss", "rc": 0, "seconds": 7.5}) + "\n" for k in keys)
    )
    return log


def _costs(recipes: Path) -> None:
    before = (recipes / "example" / "costs.json").read_text()
    assert main(["costs", "example", "--from", str(_seat_log(recipes)), "--recipes", str(recipes)]) == 0
    assert (recipes / "example" / "costs.json").read_text() != before, "cuw costs rewrote the table"


@dataclass(frozen=True)
class Flip:
    key: str  # the recipe whose cell is published, then judged
    change: Callable[[Path], None]  # what is changed in the copy of the recipes folder
    named: str  # the stale reason's inputs; "" for still current


R = "{key}/recipe.yml"
FLIPS = {
    # Inputs: each named alone.
    "patch.py": Flip("example", lambda r: _append(r / "example/patch.py", "\n# fixed\n"), "patch"),
    "a source file": Flip("example", lambda r: _append(r / "example/package/csrc/dispatch.cpp", "\n// x\n"), "source"),
    "a source file outside the recipe folder": Flip(
        "example_source", lambda r: _append(r / "example/package/csrc/dispatch.cpp", "\n// x\n"), "source"
    ),
    "a file patch.py reads": Flip("example", lambda r: (r / "example/fix.diff").write_text("--- a\n"), "files"),
    "env": Flip("example", lambda r: _append(r / "example/recipe.yml", "env: {CMAKE_BUILD_PARALLEL_LEVEL: '2'}\n"), "recipe.env"),
    "nvcc_flags": Flip("example", lambda r: _append(r / "example/recipe.yml", "nvcc_flags: [-lineinfo]\n"), "recipe.nvcc_flags"),
    "requires_dist": Flip(
        "example", lambda r: _append(r / "example/recipe.yml", "requires_dist: [numpy]\n"), "recipe.requires_dist"
    ),
    "the line's extra deps": Flip(
        "example",
        lambda r: _append(r / "example/recipe.yml", "extra_deps_cuda: {'13.0': [nvidia-curand==10.4.0.35]}\n"),
        "recipe.extra_deps_cuda",
    ),
    "archs": Flip("example", lambda r: _edit(r / "example/recipe.yml", '["9.0"]', '["8.0", "9.0"]'), "archs"),
    "the policy's arch list": Flip(
        "lightgbm",
        lambda r: _edit(r / "defaults.yml", '"13.0": ["7.5", "8.0", "8.6",', '"13.0": ["8.0", "8.6",'),
        "archs",
    ),
    "the sdist pin": Flip("lightgbm", lambda r: _edit(r / "lightgbm/recipe.yml", "sha256: f8e2", "sha256: 08e2"), "source"),
    "the git commit": Flip("cumm", lambda r: _edit(r / "cumm/recipe.yml", "commit: b8d83b", "commit: 08d83b"), "source"),
    "git submodules": Flip(
        "cumm", lambda r: _edit(r / "cumm/recipe.yml", "  tag: v0.7.11", "  recursive: true\n  tag: v0.7.11"), "source"
    ),
    "the toolkit choice": Flip(
        "example", lambda r: _edit(r / "defaults.yml", '"13.0": system', '"13.0": wheels'), "toolkit.choice"
    ),
    "a toolkit pin": Flip(
        "example", lambda r: _edit(r / "defaults.yml", "nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-nvcc==13.0.89"), "toolkit.wheels"
    ),
    "a library never grafted": Flip(
        "example", lambda r: _edit(r / "defaults.yml", '"libshm.so*"]', '"libshm.so*", "libfoo.so*"]'), "wheel_policy.exclude"
    ),
    "the line's runtime RPATH": Flip(
        "example",
        lambda r: _edit(r / "defaults.yml", '"13.0": ["nvidia/cu13/lib", "nvidia/nccl/lib"]', '"13.0": ["nvidia/cu13/lib"]'),
        "wheel_policy.cuda_runtime_rpath",
    ),
    "wheel variants turned on": Flip(
        "example", lambda r: _edit(r / "defaults.yml", "variants: false", "variants: true"), "wheel_policy.variants"
    ),
    # What the planner alone reads, or the checks: still current.
    "costs.json by cuw costs": Flip("example", _costs, ""),
    "README.md": Flip("example", lambda r: _append(r / "example/README.md", "\nAnother line.\n"), ""),
    "a comment in recipe.yml": Flip("example", lambda r: _append(r / "example/recipe.yml", "# a note\n"), ""),
    "sharding": Flip("example", lambda r: _edit(r / "example/recipe.yml", "count: 4", "count: 6"), ""),
    "max_jobs": Flip("example", lambda r: _append(r / "example/recipe.yml", "max_jobs: 2\n"), ""),
    "nvcc_threads": Flip("example", lambda r: _append(r / "example/recipe.yml", "nvcc_threads: 4\n"), ""),
    "another line's extra deps": Flip(
        "example", lambda r: _append(r / "example/recipe.yml", "extra_deps_cuda: {'12.8': [nvidia-curand-cu12==10.3.9.90]}\n"), ""
    ),
    "verify": Flip(
        "example", lambda r: _edit(r / "example/recipe.yml", "verify:\n", "verify:\n  import_requires: [numpy==2.2.6]\n"), ""
    ),
    "a lane's size limit": Flip("example", lambda r: _edit(r / "defaults.yml", "{linux: 2000,", "{linux: 100,"), ""),
    "another line's RPATH": Flip("example", lambda r: _edit(r / "defaults.yml", '"nvidia/cuda_runtime/lib", ', ""), ""),
    "another line's toolkit": Flip(
        "example", lambda r: _edit(r / "defaults.yml", '"12.8": system', '"12.8": /opt/cuda-12.8'), ""
    ),
    "__pycache__": Flip(
        "example", lambda r: (r / "example/__pycache__").mkdir() or (r / "example/__pycache__/p.pyc").write_bytes(b"x"), ""
    ),
}


@pytest.mark.parametrize("what", list(FLIPS))
def test_each_input_flipped_alone_is_the_one_named_and_the_planners_files_are_none(tmp_path, what):
    flip = FLIPS[what]
    recipes, index = _copy(tmp_path), tmp_path / "index"
    name = _publish(recipes, index, flip.key, CELLS[flip.key])
    assert _status(recipes, index, flip.key).current == [CELLS[flip.key].id]
    flip.change(recipes)
    status = _status(recipes, index, flip.key)
    if flip.named:
        assert status.stale == {CELLS[flip.key].id: f"{name}: {flip.named} changed"}, what
    else:
        assert status.current == [CELLS[flip.key].id] and not status.stale, (what, status)


def test_the_image_is_an_input_and_the_reason_names_where_each_was_built(tmp_path):
    recipes, index = _copy(tmp_path), tmp_path / "index"
    name = _publish(recipes, index, "example", CELLS["example"])  # built on the runner itself
    cell = CELLS["example"].id
    assert _status(recipes, index, "example", image=IMAGE).stale == {
        cell: f"{name}: image changed (built on the runner itself; the plan builds in {IMAGE})"
    }
    other = tmp_path / "other"
    name = _publish(recipes, other, "example", CELLS["example"], image=IMAGE)  # built in the image
    assert _status(recipes, other, "example").stale == {
        cell: f"{name}: image changed (built in {IMAGE}; the plan builds on the runner itself)"
    }


def test_a_py3_wheel_built_with_any_python_covers_the_collapsed_cell(tmp_path):
    recipes, index = _copy(tmp_path), tmp_path / "index"
    built = Cell("example", "linux", "3.12", "13.0", None)  # the plan builds it with 3.10
    _publish(recipes, index, "example", built)
    assert _status(recipes, index, "example").current == [CELLS["example"].id]
    # A record of the older scheme named its builder's Python in its cell: it covers the cell too.
    older = tmp_path / "older"
    _publish(recipes, older, "example", built, scheme=1)
    assert _status(recipes, older, "example").current == [CELLS["example"].id]
    # A per-interpreter wheel covers its own Python only.
    torch_index = tmp_path / "torch"
    _publish(
        recipes,
        torch_index,
        "example_torch",
        Cell("example_torch", "linux", "3.11", "13.0", "2.14"),
        name="cuw_example_torch-0.1.0+cu130torch2.14-cp311-cp311-manylinux_2_28_x86_64.whl",
    )
    assert _status(recipes, torch_index, "example_torch").missing == [CELLS["example_torch"].id]
    assert _status(recipes, torch_index, "example_torch", Cell("example_torch", "linux", "3.11", "13.0", "2.14")).current


def test_the_cell_is_judged_by_its_newest_build_which_is_what_installers_take(tmp_path):
    """Build 0 (inputs A) and build 1 (inputs B, a rebuild after a patch.py fix) are both published.
    Going back to A leaves the cell stale, named by build 1: pip and uv would install build 1. The
    newest is the highest build number, not the last name (build 1's name sorts before build 0's)."""
    recipes, index = _copy(tmp_path), tmp_path / "index"
    cell = CELLS["example"]
    first = _publish(recipes, index, "example", cell)
    patch = recipes / "example" / "patch.py"
    original = patch.read_text()
    patch.write_text(original + "\n# a fix\n")
    rebuilt = _publish(recipes, index, "example", cell, name=first.replace("-py3-", "-1-py3-"))
    assert sorted([first, rebuilt])[-1] == first  # by name, build 0 would pass for the newest
    assert _status(recipes, index, "example").current == [cell.id]
    patch.write_text(original)  # back to build 0's inputs: a third build is due, as number 2
    status = _status(recipes, index, "example")
    assert status.current == [] and status.stale == {cell.id: f"{rebuilt}: patch changed"}


def test_records_of_the_older_scheme_are_compared_where_they_can_be(tmp_path):
    recipes, index = _copy(tmp_path), tmp_path / "index"
    for key in ("example", "example_source", "lightgbm"):
        _publish(recipes, index, key, CELLS[key], scheme=1, name=_wheel(key, CELLS[key]).replace("cuw_example-", f"{key}-"))
    # Nothing changed: example's folder (its sources inside) and lightgbm's pins say so; example_source's
    # sources lie outside its folder, which scheme 1 named only.
    assert _status(recipes, index, "example").current == [CELLS["example"].id]
    assert _status(recipes, index, "lightgbm").current == [CELLS["lightgbm"].id]
    status = _status(recipes, index, "example_source")
    assert not status.current and not status.stale and list(status.not_comparable) == [CELLS["example_source"].id]
    assert (
        "a record of inputs scheme 1, which cannot tell source (scheme 1 named the path ../example/package"
        in (status.not_comparable[CELLS["example_source"].id])
    )
    assert status.to_build("stale") == set() and status.to_build("all") == {CELLS["example_source"].id}
    # An input both schemes store changed: stale, named; a planner's file changed: not comparable.
    _edit(recipes / "lightgbm" / "recipe.yml", "sha256: f8e2", "sha256: 08e2")
    assert (
        _status(recipes, index, "lightgbm").stale[CELLS["lightgbm"].id].endswith(": source changed (a record of inputs scheme 1)")
    )
    _costs(recipes)
    status = _status(recipes, index, "example")
    assert "the recipe folder (scheme 1 hashed it whole" in status.not_comparable[CELLS["example"].id]
    _edit(recipes / "defaults.yml", '"libshm.so*"]', '"libshm.so*", "libfoo.so*"]')
    assert (
        _status(recipes, index, "example")
        .stale[CELLS["example"].id]
        .endswith("wheel_policy changed (a record of inputs scheme 1)")
    )
    # A record older than input digests: not comparable either.
    bare = tmp_path / "bare"
    _publish(recipes, bare, "example", CELLS["example"], scheme=0)
    assert _status(recipes, bare, "example").not_comparable[CELLS["example"].id].endswith("its record predates input digests")


# -- the plan, through the command line -----------------------------------------------------------


def _plan(recipes: Path, key: str, index: Optional[Path], capsys, *extra: str) -> tuple[dict, str]:
    out = recipes.parent / "plan.json"
    argv = ["matrix", "--package", key, "--on-host", "--recipes", str(recipes), "--output", str(out), *extra]
    code = main([*argv, *(("--published", str(index)) if index else ())])
    err = capsys.readouterr().err
    assert code == 0, err
    return json.loads(out.read_text()), err


def _publish_plan(recipes: Path, index: Path, key: str, capsys) -> list[str]:
    """Every cell the plan holds of ``key``, published as its link job would; their ids."""
    plan, _ = _plan(recipes, key, None, capsys)
    ids = []
    for rkey, lane, python, cuda, torch, image in matrix.planned_cells(plan):
        cell = Cell(rkey, lane, python, cuda, torch or None)
        _publish(recipes, index, rkey, cell, image, name=_wheel(rkey, cell).replace("cuw_example-", f"{rkey}-"))
        ids.append(cell.id)
    return ids


def test_costs_and_a_readme_leave_every_cell_current_and_an_edit_of_the_shared_sources_makes_example_source_stale(
    tmp_path, capsys
):
    recipes, index = _copy(tmp_path), tmp_path / "index"
    index.mkdir()
    cells = {key: _publish_plan(recipes, index, key, capsys) for key in ("example", "example_source")}
    assert all(len(ids) > 1 for ids in cells.values()), cells
    _costs(recipes)
    _append(recipes / "example" / "README.md", "\nA note for readers.\n")
    _append(recipes / "example_source" / "README.md", "\nA note for readers.\n")
    for key, ids in cells.items():
        plan, said = _plan(recipes, key, index, capsys)
        assert plan["total_jobs"] == 0 and f"{len(ids)} cell(s) up to date, 0 stale, 0 missing" in said, said
    _append(recipes / "example" / "package" / "csrc" / "dispatch.cpp", "\n// an edit of the shared sources\n")
    plan, said = _plan(recipes, "example_source", index, capsys)
    ids = cells["example_source"]
    assert f"0 cell(s) up to date, {len(ids)} stale, 0 missing" in said, said
    assert sorted(plan["published"]["stale"]) == sorted(ids) and {
        j["cell"] for c in plan["chunks"] for j in matrix.chunk_jobs(c)
    } == set(ids)
    assert all(why.endswith(": source changed") for why in plan["published"]["stale"].values())


# -- the suite's one real build: built, recorded, published, current -------------------------------


@pytest.fixture(scope="module")
def published_build(example_cell, tmp_path_factory) -> tuple[Path, Path]:
    """(recipes, index): the example as ``nox -s build`` builds it (the suite's one cold build), its
    record written by ``cuw record`` and published; the real recipes, nothing narrowed."""
    assert example_cell.outcomes == (True,) * example_cell.count
    root = tmp_path_factory.mktemp("published-build")
    dist = recorded_example(example_cell, root / "dist").parent
    index = root / "index"
    proc = run_cuw("publish", str(dist), str(index))
    assert proc.returncode == 0, proc.stderr
    return example_cell.recipes, index


def test_the_example_built_here_recorded_and_published_is_current_for_the_plan_on_this_host(published_build, capsys):
    recipes, index = published_build
    (record,) = read_records(str(index))
    built = record["cell"]
    assert built["python"] != "3.10", "built with another Python than the plan's lowest: the case this holds"
    lane, cuda = built["lane"], built["cuda"]
    filters = ("--platform", lane, "--cuda", cuda)
    plan, said = _plan(recipes, "example", index, capsys, *filters)
    assert plan["total_jobs"] == 0 and "1 cell(s) up to date, 0 stale, 0 missing" in said, said
    # Where the plan builds in the lane's build image, the wheel built here is stale, naming both.
    out = recipes.parent / "plan-image.json"
    code = main(
        ["matrix", "--package", "example", *filters, "--recipes", str(recipes), "--published", str(index), "--output", str(out)]
    )
    said = capsys.readouterr().err
    assert code == 0, said
    (why,) = json.loads(out.read_text())["published"]["stale"].values()
    ref = load_policy(recipes).images[lane].ref
    assert why == f"{record['wheel']}: image changed (built on the runner itself; the plan builds in {ref})", why
    assert re.search(r"0 cell\(s\) up to date, 1 stale, 0 missing", said), said


def test_the_plan_leaves_not_comparable_cells_out_unless_asked_for_all(tmp_path, capsys):
    recipes, index = _copy(tmp_path), tmp_path / "index"
    index.mkdir()
    plan, _ = _plan(recipes, "example_source", None, capsys)
    for key, lane, python, cuda, torch, image in matrix.planned_cells(plan):  # as cuw record stored it before scheme 2
        cell = Cell(key, lane, python, cuda, torch or None)
        _publish(recipes, index, key, cell, image, scheme=1)
    ids = sorted({j["cell"] for c in plan["chunks"] for j in matrix.chunk_jobs(c)})
    kept, said = _plan(recipes, "example_source", index, capsys)
    assert kept["total_jobs"] == 0 and sorted(kept["published"]["not_comparable"]) == ids
    assert f"0 cell(s) up to date, 0 stale, 0 missing, {len(ids)} not comparable (records of an older inputs scheme)" in said
    assert re.search(r"not comparable: \S+: \S+: a record of inputs scheme 1, .* \(not rebuilt: --rebuild all\)", said), said
    everything, said = _plan(recipes, "example_source", index, capsys, "--rebuild", "all")
    assert everything["total_jobs"] == plan["total_jobs"] and f"--rebuild all: {len(ids)} cell(s) planned" in said
