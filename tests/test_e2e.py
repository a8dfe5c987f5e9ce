"""Both example flavours built as N real shards + link: real nvcc, real ccache, real wheels."""

from __future__ import annotations

import json
import zipfile

import pytest

from conftest import (
    EXAMPLE_CELL_SHARDS,
    EXAMPLE_CUDA_TUS,
    EXAMPLE_HOST_TUS,
    expected_tu_values,
    run_settings,
    trim_example,
    wheel_tu_values,
)
from cuw.config.cell import installed_torch
from cuw.jobs.local import run_build
from cuw.config.recipe import load_recipe

CMAKE, TORCH = ("example", "cuw_example"), ("example_torch", "cuw_example_torch")  # (recipe, module)
TU_COUNT = EXAMPLE_CUDA_TUS


# The default tests build the CMake flavour as 3 shards (the suite's one cold build) and the torch flavour
# as 1 shard and its link; the torch flavour's 3 shards are the long tier's (nox -s long, in CI), and the
# single CMake shard and one shard per CUDA TU the slow tier's (nox -s e2e): each is a whole sharded build.
# The torch flavour's default case builds the example cut to its first three kernel TUs (trim_example): its
# subject is torch's compiler seat, the handoff and the link, not how many kernels; torch-3 builds all nine.
TRIMMED = {("example_torch", 1): 3}
CASES = [
    pytest.param(CMAKE, 1, marks=pytest.mark.e2e, id="cmake-1"),
    pytest.param(CMAKE, 3, id="cmake-3"),
    pytest.param(CMAKE, 12, marks=pytest.mark.e2e, id="cmake-12"),
    pytest.param(TORCH, 1, marks=pytest.mark.needs("torch"), id="torch-1"),
    pytest.param(TORCH, 3, marks=[pytest.mark.needs("torch"), pytest.mark.long], id="torch-3"),
    pytest.param(TORCH, 12, marks=[pytest.mark.needs("torch"), pytest.mark.e2e], id="torch-12"),
]


@pytest.mark.parametrize(("flavour", "n"), CASES)
def test_sharded_build_links_every_tu_from_the_cache(flavour, n, recipes_dir, paths, tmp_path, request):
    key, module = flavour
    kept = TRIMMED.get((key, n))
    if (key, n) == ("example", EXAMPLE_CELL_SHARDS):
        # The suite's shared cold build (conftest.example_cell) is this very run: checked here.
        cell = request.getfixturevalue("example_cell")
        recipes_dir, paths, outcomes = cell.recipes, cell.paths, list(cell.outcomes)
        values = expected_tu_values()
    else:
        values = trim_example(recipes_dir, kept) if kept else expected_tu_values()
        outcomes, _ = run_build(load_recipe(key, recipes_dir), paths, count=n, recipes_dir=recipes_dir, settings=run_settings())
    recipe = load_recipe(key, recipes_dir)
    cuda_tus = kept or TU_COUNT

    assert outcomes == [True] * n, "every shard passes its gate"
    (wheel,) = paths.dist.glob("*.whl")
    link = json.loads((paths.dist / f"{wheel.name}.link.json").read_text())
    assert link["ok"], link["reasons"]
    facts = link["facts"]
    assert (facts["misses"], facts["uncacheable"]) == (0, 0)
    assert facts["cuda_tus"] == cuda_tus
    assert facts["total"] == facts["hits"] == cuda_tus + EXAMPLE_HOST_TUS[key], "CUDA and host TUs all replayed"
    assert facts["missing_shards"] == []

    # Work conservation: every CUDA TU compiled by exactly one shard.
    reports = sorted(paths.artifacts.glob("*/cuw-shard-*.report.json"))
    assert len(reports) == n
    per_shard = [json.loads(r.read_text())["facts"]["compiled"] for r in reports]
    assert sum(per_shard) == cuda_tus + EXAMPLE_HOST_TUS[key], "every CUDA and host TU compiled by exactly one shard"
    if n > cuda_tus + EXAMPLE_HOST_TUS[key]:
        assert per_shard.count(0) >= n - cuda_tus - EXAMPLE_HOST_TUS[key], "shards with an empty slice still pass"

    # Finished (cell label, manylinux) and verified before it reached dist/: the only wheel there.
    verified = json.loads((paths.dist / f"{wheel.name}.verify.json").read_text())
    assert verified["ok"], verified
    assert link["wheel"] == str(wheel) and "+cu" in wheel.name and "manylinux" in wheel.name
    assert wheel_tu_values(wheel, module, tmp_path) == values
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    pins = [line for line in metadata.split("\n\n")[0].splitlines() if line.startswith("Requires-Dist: torch")]
    assert pins == ([f"Requires-Dist: torch=={installed_torch()}.*"] if recipe.links_torch else [])

    if (key, n) == ("example", EXAMPLE_CELL_SHARDS):
        _measured_link_feeds_the_plan(recipe, paths, wheel, tmp_path)


def _measured_link_feeds_the_plan(recipe, paths, wheel, tmp_path):
    """The link's report carries its phases; recorded with the shards' seat logs into a cost
    table, it makes the planner's link estimate the measured one (configure, probes, restore,
    finish beside the replays), where it was replays alone."""
    from cuw.partition.costs import load, record
    from cuw.tools import planner

    report = json.loads((paths.dist / f"{wheel.name}.link.json").read_text())
    phases = report["phases"]
    assert phases["replays"] > 0 and phases["build_s"] > 0 and phases["finish_s"] > 0, phases
    shard_reports = sorted(paths.artifacts.glob("*/cuw-shard-*.report.json"))
    table_path = tmp_path / "costs.json"
    record([*shard_reports, paths.dist / f"{wheel.name}.link.json"], table_path)
    table = load(table_path)
    assert table.link is not None and table.link.fixed_s > phases["finish_s"] and table.link.per_replay_s > 0
    # The shard reports feed their seat logs' TUs, and what a shard costs beside its compiles
    # (CMake's configure and probes, the stubs, the link steps): more than nothing, less than a build.
    assert len(table.costs) == TU_COUNT + EXAMPLE_HOST_TUS["example"], "every TU the shards compiled is costed"
    builds = sorted(json.loads(r.read_text())["build_s"] for r in shard_reports)
    assert table.shard is not None and 0 < table.shard.fixed_s < builds[-1], (table.shard, builds)
    plan = planner.plan(recipe, [3], table_path, checked_n=3, settings=run_settings())
    (row,) = plan.rows
    assert row.link_s == round(table.link.fixed_s + table.link.per_replay_s * plan.tus, 3)
    assert row.link_s > plan.tus * planner.HIT_SECONDS, "more than the replays alone"
    per_shard = [0.0, 0.0, 0.0]
    for key, owner in plan.assignment.items():
        per_shard[owner - 1] += table.costs[key]
    assert row.slowest_s == round(max(per_shard) + table.shard.fixed_s, 3), "compiles plus the measured shard cost"
    text = planner.render(plan)
    assert "measured link" in text and "measured shards" in text
