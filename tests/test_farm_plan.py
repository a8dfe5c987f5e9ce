"""``cuw plan --farm``: the grid's runner-hours and wall time from the recipes' cost tables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, run_settings
from cuw.config.policy import load_policy
from cuw.config.recipe import known_recipes, load_recipe
from cuw.tools import planner
from cuw.partition.costs import recipe_costs
from cuw.partition.job_cap import chain, job_cap, shard_loads
from cuw.tools.farm_plan import CellJobs, FarmPlan, farm_plan, render, schedule


def test_the_schedule_is_a_list_schedule_with_links_after_their_shards():
    one = CellJobs("r", "c1", "linux", (3.0, 2.0, 1.0), 1.0)
    assert schedule([one], 1) == 7.0  # one runner: everything in a row
    assert schedule([one], 2) == 4.0  # 3 and 2 at once, 1 after the 2, the link after the 3
    assert schedule([one], 10) == 4.0  # the longest shard and its link bound it
    two = CellJobs("r", "c2", "linux", (5.0,), 0.0)  # a lane that does not shard: one job
    # 5 and 3 first; the 2 at 3; the 1 when both end at 5; the link after it: 7.
    assert schedule([one, two], 2) == 7.0
    with pytest.raises(ValueError):
        schedule([one], 0)


def test_each_cell_is_planned_as_cuw_plan_plans_its_recipe(recipes_dir):
    policy = load_policy(recipes_dir)
    recipes = [load_recipe(k, recipes_dir) for k in known_recipes(recipes_dir)]
    farm = farm_plan(recipes, policy.grid)
    llama = load_recipe("llama_cpp_python", recipes_dir)
    single = planner.plan(llama, [llama.sharding.count], settings=run_settings())
    [row] = single.rows
    cells = [c for c in farm.jobs if c.recipe == "llama_cpp_python" and c.lane in llama.sharding.platforms]
    assert cells and all(len(c.shards) == llama.sharding.count for c in cells)
    assert max(cells[0].shards) == pytest.approx(row.slowest_s) and cells[0].link == pytest.approx(row.link_s)
    assert farm.unpredicted.get("natten") and "llama_cpp_python" not in farm.unpredicted
    assert farm.wall_s(60) < farm.wall_s(20) <= farm.runner_hours * 3600
    assert not [c for c in farm.jobs if c.lane == "windows"] and farm.held_back > 0
    # Under the policy's cap nothing is past it; a whole build job past the limit is named (it cannot chain).
    assert not farm.over_cap() and not farm.past_cap
    long = FarmPlan(jobs=[CellJobs("natten", "c", "windows", (7 * 3600.0,), 0.0)])
    assert long.over_cap() == [
        "natten: lane windows builds whole, a job of 7.0 h past the 355 min limit (a whole build does not chain)"
    ]


def test_the_farm_names_shards_past_the_cap_as_cuw_plan_does(recipes_dir):
    """One rule: under a 30 min cap (10 min of build), the farm's line for llama_cpp_python is the
    plan's job cap check at its N, the chain it needs and the N that needs none."""
    policy = load_policy(recipes_dir)
    llama = load_recipe("llama_cpp_python", recipes_dir)
    farm = farm_plan([llama], policy.grid, cap=job_cap(policy.jobs, 30))
    [check] = [
        c
        for c in planner.plan(llama, [llama.sharding.count], cap_minutes=30, settings=run_settings()).checks
        if c.name == "job cap"
    ]
    assert farm.past_cap == {"llama_cpp_python": f"{check.detail}; fix: {check.fix}"}
    assert "a shard's build budget of 600 s (--cap 30 min less jobs.margin_minutes 20)" in check.detail
    assert not check.ok and "parts; build.yml has 3 rungs" in check.detail and check.fix.startswith("N=")
    assert farm.over_cap() == [f"llama_cpp_python: {check.detail}; fix: {check.fix}"]


def test_a_chained_shard_is_its_parts_each_paying_what_a_shard_costs_beside_its_compiles(recipes_dir):
    """Under a 30 min cap llama_cpp_python's shards chain: each part is a job and configures, restores
    and packs again, so a chain costs its compiles plus a shard's beside-cost per part."""
    policy = load_policy(recipes_dir)
    llama = load_recipe("llama_cpp_python", recipes_dir)
    n = llama.sharding.count
    uncapped = farm_plan([llama], policy.grid)
    capped = farm_plan([llama], policy.grid, cap=job_cap(policy.jobs, 30))
    table = recipe_costs(llama)
    assert table is not None
    loads = shard_loads(llama, table, n, sorted(table.costs))
    parts = [chain(load, job_cap(policy.jobs, 30)).parts for load in loads]
    assert all(k >= 2 for k in parts), parts
    sharded = [c for c in capped.jobs if c.parts]
    assert sharded and all(c.parts == tuple(parts) for c in sharded)
    for c in sharded:
        assert c.shards == pytest.approx([load.compile_s + k * load.beside_s for load, k in zip(loads, parts)], abs=0.01)
        assert c.job_count == sum(parts) + 1
    # The same cells uncapped: one job a shard, so the chain adds (parts - 1) beside-costs per shard.
    extra = sum((k - 1) * load.beside_s for load, k in zip(loads, parts)) * len(sharded)
    assert capped.runner_hours - uncapped.runner_hours == pytest.approx(extra / 3600, abs=0.01)
    first = render(capped, [20]).splitlines()[0]
    assert f"({sum(c.job_count for c in capped.jobs)} jobs)" in first


def test_the_cli_prints_the_farm_at_two_limits_and_refuses_bad_options(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "cuw", "plan", *a], capture_output=True, text=True, cwd=REPO)  # noqa: E731
    ok = run("--farm", "--concurrency", "20,60")
    assert ok.returncode == 0, ok.stderr
    written = run("--farm", "--output", str(tmp_path / "farm.txt"))
    assert written.returncode == 0 and (tmp_path / "farm.txt").read_text() == ok.stdout, written.stderr
    (empty := tmp_path / "empty").mkdir()
    lines = ok.stdout.splitlines()
    assert lines[0].startswith("farm plan: ") and "runner-hours" in lines[0]
    assert any(line.strip().startswith("20 concurrent jobs (Free)") for line in lines)
    assert any(line.strip().startswith("60 concurrent jobs (Team)") for line in lines)
    for args, message in [
        (("--farm", "--concurrency", "x"), "numbers of concurrent jobs"),
        (("--farm", "--concurrency", "0"), "between 1 and 10000"),
        (("--farm", "--count", "nope"), "RECIPE=N"),
        (("--farm", "example"), "leave out the recipe name"),
        ((), "pass --farm for the whole grid"),
        # An option of the other mode is refused, never ignored.
        (("--farm", "--shards", "4"), "--shards: plans one recipe, not --farm"),
        (("--farm", "--json"), "--json: --farm prints text only"),
        (("--farm", "--format", "html"), "--format html: --farm prints text only"),
        (("--farm", "--count", "example=\u00b2"), "RECIPE=N"),  # a digit to str.isdigit, not to int()
        (("--farm", "--concurrency", "\u0662\u0660"), "numbers of concurrent jobs"),
        (("--farm", "--concurrency", ""), "numbers of concurrent jobs"),
        (("--farm", "--concurrency", "20,20"), "a limit given twice"),
        (("--farm", "--count", "../example=3"), "--count '../example=3': recipe name"),
        (("--farm", "--count", "example=3", "--count", "example=4"), "example is given twice"),
        (("--farm", "--count", "natten=4"), "natten has no cost table"),
        (("--farm", "--recipes", str(empty)), "holds no recipe"),
        (("example", "--count", "example=3"), "--count: plans the farm (add --farm)"),
        (("example", "--concurrency", "20"), "--concurrency: plans the farm"),
    ]:
        bad = run(*args)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)
