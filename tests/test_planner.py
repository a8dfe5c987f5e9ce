"""Partition rules, cost tables and the planner; a real seat run checks the prediction."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

from cuw.tools import planner
from cuw.seat import runtime, seat_log
from cuw.partition.assignment import recipe_assignment
from cuw.cli.main import main as cuw_main
from cuw.base.errors import CuwError
from cuw.partition.globs import glob_match
from cuw.partition.rules import Assignment, ShardSpec, assign, families_of, owner
from cuw.jobs.shard import apply_source_filter, run_shard
from cuw.config.recipe import load_recipe
from cuw.jobs.workspace import partition_for_seat

from conftest import REPO, run_settings
from test_seat import ARCH, KERNEL, Seat

# natten's generated set, in sorted order: Blackwell 50 (indices 0-49), base 70,
# Hopper 22 (indices 120-141), 2 more base files after.
NATTEN_LAYOUT = [("a_blackwell", 50), ("b_base", 70), ("c_hopper", 22), ("d_tail", 2)]
NATTEN_CMAKE = """
file(GLOB AUTOGEN_HOPPER autogen/c_hopper/*.cu)
if(AUTOGEN_HOPPER)
  add_library(natten_hopper OBJECT ${AUTOGEN_HOPPER})
endif()
add_library(natten SHARED dispatch.cpp)
if(NATTEN_WITH_HOPPER_FNA)
  target_link_libraries(natten PRIVATE $<TARGET_OBJECTS:natten_hopper>)
endif()
"""


def _natten_like(recipes_dir: Path, **sharding: object) -> str:
    folder = recipes_dir / "natten_like"
    src = folder / "src"
    for family, count in NATTEN_LAYOUT:
        (src / "autogen" / family).mkdir(parents=True)
        for i in range(count):
            (src / "autogen" / family / f"k{i:03}.cu").write_text(f"// {family} {i}\n")
    (src / "dispatch.cpp").write_text("int dispatch() { return 0; }\n")
    (src / "CMakeLists.txt").write_text(NATTEN_CMAKE)
    recipe = {
        "name": "natten-like",
        "links_torch": False,
        "source": {"path": "src"},
        "backend": "scikit-build-core",
        "sharding": {
            "count": 23,
            "filter": "source",
            "platforms": ["linux"],
            "rule": "sorted",
            "source": {
                "globs": ["autogen/**/*.cu"],
                "families": {"blackwell": ["autogen/a_blackwell/*.cu"], "hopper": ["autogen/c_hopper/*.cu"]},
            },
            **sharding,
        },
    }
    (folder / "recipe.yml").write_text(yaml.safe_dump(recipe))
    return "natten_like"


def _rows(result: planner.Plan) -> dict[int, planner.Row]:
    return {row.n: row for row in result.rows}


# -- the rules ---------------------------------------------------------------------


def test_lpt_is_deterministic_longest_first_to_the_lowest_loaded_shard():
    costs = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 3.0, "e": 2.0, "f": 2.0}
    table = assign(3, "cost", costs=costs).table
    assert table == {"a": 1, "b": 2, "c": 3, "d": 3, "e": 2, "f": 1}
    loads = [sum(costs[k] for k, s in table.items() if s == i) for i in (1, 2, 3)]
    assert loads == [7.0, 6.0, 6.0]
    # Equal costs: key order decides, ties go to the lowest index.
    assert assign(2, "cost", costs={"y": 1.0, "x": 1.0}).table == {"x": 1, "y": 2}


def test_keys_outside_the_table_fall_back_to_the_hash_rule():
    rule = assign(5, "cost", costs={"known.cu": 3.0})
    assert rule.owner("known.cu") == 1
    assert rule.owner("csrc/new_kernel.cu") == owner("csrc/new_kernel.cu", 5)
    assert Assignment(7).owner("x/y.cu") == owner("x/y.cu", 7)


def test_sorted_rule_is_round_robin_over_the_sorted_set():
    keys = [f"k{i:02}.cu" for i in range(10)]
    table = assign(4, "sorted", reversed(keys)).table
    assert [table[k] for k in keys] == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]


def test_globs_and_families():
    assert glob_match("autogen/c_hopper/k001.cu", "autogen/**/*.cu")
    assert glob_match("top.cu", "**/*.cu") and not glob_match("a/top.cu", "*.cu")
    family = families_of(["a/x.cu", "b/y.cu"], {"fa": ["a/*.cu"]})
    assert family == {"a/x.cu": "fa", "b/y.cu": "other"}
    with pytest.raises(CuwError, match=r"a/x.cu matches f1 and f2"):
        families_of(["a/x.cu"], {"f1": ["a/*"], "f2": ["**/*.cu"]})


# -- the planner on natten's layout -----------------------------------------------------


def test_family_emptiness_on_natten_layout(recipes_dir):
    recipe = load_recipe(_natten_like(recipes_dir), recipes_dir)
    result = planner.plan(recipe, [20, 23, 40, 50, 51], checked_n=23, settings=run_settings())
    rows = _rows(result)
    # 144 kernels the filter covers, and dispatch.cpp, the rest the seat partitions.
    assert (result.tus, result.rest) == (145, 1)
    assert result.families == {"(rest)": 1, "blackwell": 50, "hopper": 22, "other": 72}
    assert [rows[n].family_empty["hopper"] for n in (20, 23, 40)] == [0, 1, 18]
    assert rows[50].family_empty["blackwell"] == 0 and rows[51].family_empty["blackwell"] == 1
    # Which shard: Hopper's sorted indices 120-141 land on shards 6..23 and 1..4 at N=23.
    assert rows[23].family_empty_shards["hopper"] == [5]
    # At N=23 the check names the empty Hopper shard, the ceiling and the fixes.
    family = next(c for c in result.checks if c.name == "family")
    assert not family.ok and "'hopper': 22 files, every shard holds one up to N=22" in family.detail
    assert "hopper: 1 of 23 shards" in family.detail and "per_family" in family.fix
    # The consumer guarded on the arch flag is found, with its fix (where the CMake lint is present).
    guards = next(c for c in result.checks if c.name == "guards")
    if importlib.util.find_spec("cuw.tools.cmake_guards"):
        assert not guards.ok and "natten_hopper" in guards.detail and "if(TARGET natten_hopper)" in guards.fix
    else:
        assert guards.ok and "not checked" in guards.detail
    assert result.recommended == 20 and not result.ok


def test_per_family_spreads_hopper_over_every_shard_up_to_22(recipes_dir):
    recipe = load_recipe(_natten_like(recipes_dir, per_family=True), recipes_dir)
    rows = _rows(planner.plan(recipe, list(range(2, 25)), checked_n=22, settings=run_settings()))
    assert all(rows[n].family_empty["hopper"] == 0 for n in range(2, 23))
    assert rows[23].family_empty["hopper"] == 1
    assert all(rows[n].tus_max - rows[n].tus_min <= 1 for n in range(2, 25))  # still balanced overall


def test_source_filter_deletes_exactly_the_planned_slice(recipes_dir, tmp_path):
    recipe = load_recipe(_natten_like(recipes_dir, per_family=True), recipes_dir)
    predicted = planner.plan(recipe, [23], checked_n=23, settings=run_settings()).assignment
    tree = tmp_path / "shard7"
    shutil.copytree(recipe.source_dir, tree)
    rule = recipe_assignment(recipe, 23, tree)
    kept = apply_source_filter(tree, recipe.sharding.source.globs, ShardSpec(7, 23), "linux", rule)
    # The plan's slice of shard 7: the files the filter keeps, and its share of the seat's rest.
    assert kept == sorted(k for k, shard in predicted.items() if shard == 7 and k.endswith(".cu"))
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.cu")) == kept
    assert sum(k.startswith("autogen/c_hopper/") for k in kept) == 1


def test_cost_rule_per_family_and_a_stale_table(recipes_dir):
    key = _natten_like(recipes_dir, rule="cost", per_family=True)
    src = recipes_dir / key / "src"
    costs = {p.relative_to(src).as_posix(): 10.0 + i % 7 for i, p in enumerate(sorted(src.rglob("*.cu")))}
    costs["autogen/c_hopper/k999.cu"] = 300.0  # a TU that no longer exists
    (recipes_dir / key / "costs.json").write_text(json.dumps({"header": {}, "costs": costs}))
    result = planner.plan(load_recipe(key, recipes_dir), [22, 23], checked_n=22, settings=run_settings())
    rows = _rows(result)
    assert rows[22].family_empty["hopper"] == 0 and rows[23].family_empty["hopper"] == 1
    drift = next(c for c in result.checks if c.name == "cost table")
    assert not drift.ok and "1 no longer in the source (e.g. autogen/c_hopper/k999.cu)" in drift.detail
    assert "cuw costs" in drift.fix
    # The phantom 300 s TU takes no shard's place and is in no prediction.
    assert 300.0 not in (rows[22].slowest_s, rows[22].bound_s) and rows[22].slowest_s < 100.0


# -- cost tables, the seat, the link attribution ------------------------------------------


def _example_with_rule(recipes_dir: Path, rule: str) -> str:
    """The example under ``rule``, its cost table cut to the CUDA TUs: the host TUs, outside
    the table, follow the hash rule (a table recorded before they were costed)."""
    path = recipes_dir / "example" / "recipe.yml"
    path.write_text(path.read_text().replace("filter: seat", f"filter: seat\n  rule: {rule}"))
    table = recipes_dir / "example" / "costs.json"
    data = json.loads(table.read_text())
    data["costs"] = {k: v for k, v in data["costs"].items() if k.endswith(".cu")}
    table.write_text(json.dumps(data))
    return "example"


def test_live_seat_decisions_equal_the_planners_prediction(recipes_dir, tmp_path):
    """Three real seats (real nvcc, real ccache) configured as a cost-rule shard job is."""
    recipe = load_recipe(_example_with_rule(recipes_dir, "cost"), recipes_dir)
    predicted = planner.plan(recipe, [3], checked_n=3, settings=run_settings()).assignment
    assert sorted(predicted) == sorted(json.loads((recipes_dir / "example" / "costs.json").read_text())["costs"])
    logs = []
    for index in (1, 2, 3):
        part = partition_for_seat(recipe, ShardSpec(index, 3))
        # The partition survives the seat's JSON configuration.
        s = Seat(tmp_path / f"shard{index}", part)
        assert runtime.SeatConfig.read(str(s.exe.parent / "seat.json")).partition == part
        for key in predicted:
            src = s.src / key
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_text(KERNEL)
            proc = s.run("-c", str(src), "-o", f"{src.name}.o", *ARCH)
            assert proc.returncode == 0, proc.stderr
        compiled = sorted(e["key"] for e in s.entries() if e["action"] == "compiled")
        stubbed = sorted(e["key"] for e in s.entries() if e["action"] == "stubbed")
        assert compiled == sorted(k for k, shard in predicted.items() if shard == index)
        assert stubbed == sorted(k for k, shard in predicted.items() if shard != index)
        logs.append(s.log)
    # The three logs record a cost table covering every TU exactly once.
    out = tmp_path / "costs.json"
    args = ["costs", "example", "--recipes", str(recipes_dir), "--output", str(out)]
    assert cuw_main(args + [a for log in logs for a in ("--from", str(log))]) == 0
    recorded = json.loads(out.read_text())
    assert sorted(recorded["costs"]) == sorted(predicted) and recorded["header"]["tus"] == 9
    assert all(seconds > 0 for seconds in recorded["costs"].values())


def test_a_cost_rule_shard_job_compiles_exactly_the_planned_slice(recipes_dir, paths):
    """The whole wiring: recipe -> workspace -> seat.json -> live decisions in a real CMake build."""
    recipe = load_recipe(_example_with_rule(recipes_dir, "cost"), recipes_dir)
    predicted = planner.plan(recipe, [3], checked_n=3, settings=run_settings()).assignment
    result = run_shard(recipe, ShardSpec(1, 3), paths, progress=None, settings=run_settings())
    assert result.verdict.ok, result.verdict.line
    (log,) = paths.work.glob("*/shard-1of3/logs/seat.jsonl")
    cuda = [e for e in seat_log.read_log(log) if e["action"] in ("compiled", "stubbed") and e["key"].endswith(".cu")]
    assert sorted(e["key"] for e in cuda if e["action"] == "compiled") == sorted(k for k, s in predicted.items() if s == 1)
    assert sorted(e["key"] for e in cuda if e["action"] == "stubbed") == sorted(k for k, s in predicted.items() if s != 1)
    assert "csrc/kernels/k08_gemm.cu" in {e["key"] for e in cuda if e["action"] == "compiled"}  # longest first, to shard 1
    # ninja's log of the same job records only what the seat really compiled (stubs take no time worth keeping).
    (ninja_log,) = paths.work.glob("*/shard-1of3/**/.ninja_log")
    out = paths.work / "from-ninja.json"
    args = ["costs", "example", "--recipes", str(recipes_dir), "--from", str(ninja_log), "--output", str(out)]
    assert cuw_main(args) == 0
    recorded = json.loads(out.read_text())["costs"]
    assert sorted(k for k in recorded if k.endswith(".cu")) == sorted(k for k, s in predicted.items() if s == 1)
    # Host TUs outside the cost table follow the hash rule; the ones shard 1 compiled are recorded too.
    host = [k for k in ("csrc/dispatch.cpp", "csrc/registry.cpp") if owner(k, 3) == 1]
    assert sorted(k for k in recorded if not k.endswith(".cu")) == host
    # The seat log lists every TU of the build for the planner, compiled or stubbed: the 9 CUDA
    # TUs and the 2 host TUs the host seat partitions too (outside the cost table: the hash rule).
    replanned = planner.plan(recipe, [3], from_log=log, checked_n=3, settings=run_settings())
    assert replanned.tus == 11
    assert {k: s for k, s in replanned.assignment.items() if k in predicted} == predicted
    host = {k: s for k, s in replanned.assignment.items() if k not in predicted}
    assert sorted(host) == ["csrc/dispatch.cpp", "csrc/registry.cpp"]
    assert host == {k: owner(k, 3) for k in host}


def test_link_gate_names_the_owner_under_the_recipes_rule(recipes_dir):
    from cuw.gates.conditions import attribute

    recipe = load_recipe(_example_with_rule(recipes_dir, "cost"), recipes_dir)
    rule = recipe_assignment(recipe, 4)
    key = "csrc/kernels/k08_gemm.cu"
    assert rule.owner(key) == 1  # the longest TU goes first to shard 1
    assert f"{key} <- shard 1/4 (its archive is missing)" in attribute([key], 4, [1], rule)


def test_a_replayed_log_is_refused_and_a_bad_table_named(tmp_path, recipes_dir):
    log = tmp_path / "seat.jsonl"
    log.write_text(json.dumps({"action": "compiled", "key": "a.cu", "outcome": "hit", "rc": 0, "seconds": 0.03}) + "\n")
    assert cuw_main(["costs", "example", "--recipes", str(recipes_dir), "--from", str(log)]) == 2
    bad = tmp_path / "costs.json"
    bad.write_text('{"costs": {"a.cu": "slow"}}')
    with pytest.raises(CuwError, match=r"costs\['a.cu'\] = 'slow' is not a number of seconds"):
        planner.plan(load_recipe("example", recipes_dir), [2], costs_file=bad, settings=run_settings())


# -- recipe errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, message",
    [
        ("  rule: cost", r"rule is 'cost' but there is no cost table: create .*costs.json with `cuw costs example"),
        ("  rule: sorted", r"rule 'sorted' needs the full set of TUs"),
        ("  source: {families: {big: ['**/k08*.cu']}}", r"families needs the full set of TUs"),
        ("  rule: hash\n  per_family: true", r"per_family needs rule sorted or cost"),
        ("  sources: ['**/*.cu']", r"sharding.sources moved to sharding.source.globs"),
        ("  rule: lpt", r"'lpt' is not one of 'hash', 'sorted', 'cost'"),
    ],
)
def test_sharding_errors_name_the_fix(recipes_dir, edit, message):
    (recipes_dir / "example" / "costs.json").unlink()
    path = recipes_dir / "example" / "recipe.yml"
    path.write_text(path.read_text().replace("  filter: seat", "  filter: seat\n" + edit))
    with pytest.raises(CuwError, match=message):
        load_recipe("example", recipes_dir)


def test_plan_cli_json_and_exit_code(recipes_dir, capsys):
    assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--range", "2..4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["n"] for r in data["rows"]] == [2, 3, 4] and data["ok"]
    assert all(r["bound_s"] <= r["slowest_s"] for r in data["rows"])
    key = _natten_like(recipes_dir)
    assert cuw_main(["plan", key, "--recipes", str(recipes_dir), "--shards", "23"]) == 1
    out = capsys.readouterr().out
    assert "FAIL family" in out and "fix: keep N <= 22" in out
    assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--range", "9..2"]) == 2


def test_cost_rule_is_within_5_percent_of_the_physical_bound():
    script = Path(__file__).parent.parent / "benchmarks" / "partition_balance.py"
    spec = importlib.util.spec_from_file_location("partition_balance", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for sigma in (1.0, 1.6):
        costs = bench.lognormal_table(150, 7, sigma)
        for n in (4, 10):
            row = bench.measure("lognormal", costs, n)
            assert row["cost_over_bound"] <= 1.05, row
            assert row["cost"] <= row["hash"]


def test_seat_log_costs_count_host_tus_and_sum_a_key_built_twice(tmp_path):
    from cuw.partition.costs import from_seat_log

    entries = [
        {"action": "compiled", "kind": "host", "key": "csrc/scatter.cpp", "outcome": "miss", "rc": 0, "seconds": 120.0},
        {"action": "compiled", "kind": "host", "key": "csrc/scatter.cpp", "outcome": "miss", "rc": 0, "seconds": 80.0},
        {"action": "compiled", "kind": "host", "key": "csrc/cpu/a.cpp", "outcome": "hit", "rc": 0, "seconds": 1.5},
        {"action": "compiled", "key": "csrc/cuda/scatter_cuda.cu", "outcome": "miss", "rc": 0, "seconds": 300.0},
        {"action": "stubbed", "key": "csrc/cuda/other.cu"},
    ]
    log = tmp_path / "seat.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    # torch-scatter's _cpu and _cuda modules compile one host source twice: its owner pays both.
    assert from_seat_log(log) == {"csrc/scatter.cpp": 200.0, "csrc/cuda/scatter_cuda.cu": 300.0}


def test_a_tu_deferred_past_the_deadline_costs_nothing_in_a_seat_log_or_its_ninja_log(tmp_path):
    """A part stopped by its deadline stubs the TUs it did not start (``deferred``): the stub's
    moment in the seat log and in ``.ninja_log`` is no compile's cost; the continuation records it."""
    from cuw.partition.costs import _replayed_or_stubbed, from_seat_log

    entries = [
        {"action": "compiled", "key": "csrc/a.cu", "outcome": "miss", "rc": 0, "seconds": 300.0, "cpu_s": 290.0, "peak_mb": 900},
        {"action": "deferred", "kind": "host", "key": "csrc/b.cpp", "owner": 1, "output": "b.o"},
        {"action": "deferred", "key": "csrc/c.cu", "owner": 1, "output": "c.o"},
        {"action": "stubbed", "key": "csrc/d.cu", "owner": 2, "output": "d.o"},
    ]
    log = tmp_path / "seat.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert from_seat_log(log) == {"csrc/a.cu": 300.0}
    assert _replayed_or_stubbed(log) == {"csrc/b.cpp", "csrc/c.cu", "csrc/d.cu"}


def test_globs_that_match_more_than_translation_units_are_refused_by_the_plan(recipes_dir):
    """`globs: ["**/*"]` would delete CMakeLists.txt and the headers from every shard but one:
    the plan (and every job, through the same function) refuses it, naming what it matched."""
    import subprocess
    import sys

    from conftest import REPO

    recipe = recipes_dir / "example_source" / "recipe.yml"
    recipe.write_text(recipe.read_text().replace('globs: ["csrc/kernels/k0[1-8]_*.cu"]', 'globs: ["**/*"]'))
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "plan", "example_source", "--shards", "4", "--recipes", str(recipes_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "sharding.source.globs (**/*) match" in line and "that are not translation units (" in line
    assert "CMakeLists.txt" in line and "narrow the globs" in line


# -- the job cap ----------------------------------------------------------------------

# Measured here (docs/real-packages.md, natten 0.21.7, the full arch list): shard 30/40 compiled
# 4 TUs cold, 200 to 4,919 s each, fna/source_57.cu the longest.
NATTEN_LONGEST = "csrc/autogen/src/cuda/fna/source_57.cu"


def test_plan_flags_nattens_longest_tu_against_a_cap_below_it(tmp_path, capsys):
    """natten's measured 4,919 s TU against a cap that leaves a shard less than that: no N and no
    chain builds it, and the plan says so on its job cap line (exit 1); under the policy's cap
    (355 min less 20) the same table is within it."""
    keys = planner.plan(
        load_recipe("natten", REPO / "recipes"), [20], settings=run_settings()
    ).assignment  # the prepared tree's TUs
    # Every other TU at 200 s, the shortest one measured with it (a stand-in: the rest were not measured).
    table = {"header": {"how": "measured longest TU; the rest at the shortest measured"}, "costs": dict.fromkeys(keys, 200.0)}
    table["costs"][NATTEN_LONGEST] = 4919.0
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(table))
    assert cuw_main(["plan", "natten", "--costs", str(costs), "--shards", "20", "--cap", "80"]) == 1
    out = capsys.readouterr().out.splitlines()
    [flag] = [line for line in out if "job cap" in line]
    assert flag == (
        f"  FAIL job cap    N=20: {NATTEN_LONGEST} predicted at 4,919 s: one compile that does not fit in a shard's "
        "build budget of 3,600 s (--cap 80 min less jobs.margin_minutes 20): no N and no chain builds it "
        "(a compile does not resume mid-TU)"
    )
    fix = out[out.index(flag) + 1]
    assert (
        fix.startswith("       fix: shorten that compile: fewer archs per TU")
        and "nvcc_threads" in fix
        and "larger runner" in fix
    )
    assert cuw_main(["plan", "natten", "--costs", str(costs), "--shards", "20"]) == 0
    [flag] = [line for line in capsys.readouterr().out.splitlines() if "job cap" in line]
    assert flag.startswith("  ok   job cap    N=20: slowest shard ") and "within a shard's build budget of 20,100 s" in flag


def scaled_example_costs(recipes_dir: Path, scale: float = 1000.0) -> Path:
    """The example's measured table with every TU ``scale`` times longer: seconds that meet a job cap."""
    path = recipes_dir / "example" / "costs.json"
    data = json.loads(path.read_text())
    data = {"header": data["header"], "costs": {k: v * scale for k, v in data["costs"].items()}}
    path.write_text(json.dumps(data))
    return path


def test_plan_proposes_the_chain_or_a_larger_n_for_shards_past_the_cap(recipes_dir):
    """Under a 150 min cap (7,800 s of build) two of the example's four shards are past it: a
    chain of 3 parts fits the workflow's rungs (ok, flagged, with the N that needs none); under
    120 min the longest chain outgrows the rungs (FAIL, fix: that N). The recommendation keeps every
    shard under the cap."""
    scaled_example_costs(recipes_dir)
    recipe = load_recipe("example", recipes_dir)
    result = planner.plan(recipe, list(range(4, 9)), cap_minutes=150, checked_n=4, settings=run_settings())
    [check] = [c for c in result.checks if c.name == "job cap"]
    assert check.ok and check.detail == (
        "N=4: 2 shard(s) predicted past a shard's build budget of 7,800 s (--cap 150 min less jobs.margin_minutes 20), "
        "the longest chain shard 2/4 predicted at 8,985 s: 3 parts (cuw matrix emits the ladder, up to 3 parts); "
        "or N=8 brings every shard under it (sharding.count in recipes/example/recipe.yml)"
    )
    assert [r.n for r in result.rows if r.slowest_s <= 7800] == [8], "the smallest N under it (the hash rule is uneven)"
    result = planner.plan(recipe, list(range(3, 12)), cap_minutes=120, checked_n=4, settings=run_settings())
    [check] = [c for c in result.checks if c.name == "job cap"]
    assert not check.ok and check.detail.endswith("shard 2/4 predicted at 8,985 s: 5 parts; build.yml has 3 rungs")
    assert check.fix.startswith("N=") and not result.ok
    fit = int(check.fix.split()[0].removeprefix("N="))
    assert all(r.slowest_s > 6000 for r in result.rows if r.n < fit)
    assert result.recommended >= fit and _rows(result)[result.recommended].slowest_s <= 6000
