"""A source-filter recipe's rest: the sources its globs do not cover (hand-written CUDA and host
TUs) are partitioned by the seat, with the same assignment, disjoint from the filter's files by
construction; the link's bypass check reads CMake's compile_commands.json without ninja."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_settings
from cuw.seat import install, native, runtime, seat_log
from cuw.partition.assignment import recipe_assignment
from cuw.partition.coverage import covered_keys, filter_covers, rest_keys, source_filter_files
from cuw.gates.compdb import cuda_compiles_from
from cuw.base.errors import CuwError
from cuw.gates.conditions import LinkObservation, link_gate
from cuw.partition.rules import ShardSpec, tu_key
from cuw.jobs.shard import apply_source_filter, expected_owned
from cuw.jobs.local import run_build
from cuw.tools.planner import plan
from cuw.config.recipe import load_recipe
from cuw.jobs.workspace import Workspace, partition_for_seat, seat_config
from cuw.toolchain.cache import open_cache
from cuw.toolchain.toolkit import find_toolkit
from test_seat import ARCH, Seat, _source

FILTER_VARS = ("CUDA_WHEELS_SHARD_INDEX", "CUDA_WHEELS_SHARD_COUNT")
NATTEN_LIKE = {
    # generated kernels the filter partitions (two families), and the hand-written rest
    "csrc/autogen/src/cuda/hopper_fmha/source_{}.cu": 7,
    "csrc/autogen/src/cuda/fna/source_{}.cu": 12,
    "csrc/src/hand_{}.cu": 5,
    "csrc/natten{}.cpp": 1,
    "csrc/include/header{}.h": 2,  # not a TU
}
NATTEN_YML = """
name: natten-like
links_torch: false
source: {path: src}
backend: scikit-build-core
sharding:
  count: 4
  filter: source
  rule: RULE
  platforms: [linux]
  source:
    globs: ["csrc/autogen/src/cuda/*/*.cu"]
    families: {hopper: ["csrc/autogen/src/cuda/hopper_*/*.cu"]}
"""


def _natten_like(tmp_path: Path, rule: str, seat_rest: bool = True) -> tuple[Path, Path]:
    recipes = tmp_path / "recipes"
    folder = recipes / "natten_like"
    src = folder / "src"
    for pattern, count in NATTEN_LIKE.items():
        for i in range(count):
            path = src / pattern.format(i)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("// tu\n")
    shutil_copy = (REPO / "recipes" / "defaults.yml").read_text()
    (recipes / "defaults.yml").write_text(shutil_copy)
    text = NATTEN_YML.replace("RULE", rule) + ("" if seat_rest else "    seat_rest: false\n")
    (folder / "recipe.yml").write_text(text)
    return recipes, src


def _all_sources(src: Path) -> set[str]:
    return {tu_key(str(p), str(src)) for p in src.rglob("*") if p.suffix in (".cu", ".cpp")}


@pytest.mark.parametrize("rule", ["hash", "sorted"])
@pytest.mark.parametrize("n", [1, 3, 4, 7, 40])
def test_filter_and_seat_partition_disjoint_sets_that_cover_every_source(tmp_path, rule, n):
    recipes, src = _natten_like(tmp_path, rule)
    recipe = load_recipe("natten_like", recipes)
    filtered = {tu_key(str(p), str(src)) for p in source_filter_files(src, recipe.sharding.source.globs)}
    rest = set(rest_keys(recipe, src))
    assert filtered == set(covered_keys(recipe, src)) and len(filtered) == 19 and len(rest) == 6
    # Disjoint by construction, and together every source file under the root.
    assert not filtered & rest and filtered | rest == _all_sources(src)
    joint = recipe_assignment(recipe, n, src)
    slices = []
    for index in range(1, n + 1):
        part = partition_for_seat(recipe, ShardSpec(index, n), src)
        seat_keys = {k for k in _all_sources(src) if part.partitions(k)}
        assert seat_keys == rest, "the seat partitions exactly the rest, never a file the filter covers"
        assert not any(filter_covers(k, part.filter_globs) for k in seat_keys)
        # The seat's owners are the joint assignment's; the filter's keep their owners without the rest.
        assert {k: part.owner(k) for k in rest} == {k: joint.owner(k) for k in rest}
        slices.append(set(expected_owned(recipe, src, ShardSpec(index, n))))
    assert sum(len(s) for s in slices) == len(filtered | rest) and set().union(*slices) == filtered | rest
    off, _ = _natten_like(tmp_path / "off", rule, seat_rest=False)
    without = recipe_assignment(load_recipe("natten_like", off), n, off / "natten_like" / "src")
    assert {k: joint.owner(k) for k in filtered} == {k: without.owner(k) for k in filtered}


def test_sorted_rest_continues_the_round_robin(tmp_path):
    recipes, src = _natten_like(tmp_path, "sorted")
    recipe = load_recipe("natten_like", recipes)
    joint = recipe_assignment(recipe, 4, src)
    per_shard = [len(expected_owned(recipe, src, ShardSpec(i, 4))) for i in range(1, 5)]
    assert sorted(per_shard) == [6, 6, 6, 7], "25 TUs over 4 shards, as even as the count allows"
    # 19 filtered files end at shard 3; the rest (sorted) starts at shard 4.
    assert joint.owner(sorted(rest_keys(recipe, src))[0]) == 4


def test_the_filter_and_the_seat_leave_each_shard_its_own_slice(tmp_path):
    recipes, src = _natten_like(tmp_path, "sorted")
    recipe = load_recipe("natten_like", recipes)
    spec = ShardSpec(2, 4)
    part = partition_for_seat(recipe, spec, src)
    ws = Workspace(tmp_path / "shard-2of4", src.parent)
    config = seat_config(
        ws,
        find_toolkit(homes=run_settings().homes).nvcc,
        open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings()),
        part,
    )
    table = native.foreign_table(config)
    assert "source_filter\t2/4" in table.splitlines()
    keys = {line.split("\t")[0] for line in table.split("keys\n", 1)[1].splitlines()}
    assert keys == {k for k in rest_keys(recipe, src) if part.owner(k) != 2}, "the native stub's table: foreign rest only"
    expected = set(expected_owned(recipe, src, spec))  # before the filter runs, as run_shard does
    kept = apply_source_filter(src, recipe.sharding.source.globs, spec, "linux", recipe_assignment(recipe, 4, src))
    # What this shard compiles: the filter's survivors and its own slice of the rest.
    survivors = {tu_key(str(p), str(src)) for p in src.rglob("*.cu")} | {tu_key(str(p), str(src)) for p in src.rglob("*.cpp")}
    compiled_here = {k for k in survivors if not part.partitions(k) or part.owner(k) == 2}
    assert set(kept) <= compiled_here and compiled_here == expected


def test_seat_rest_is_a_source_filter_key(recipes_dir):
    path = recipes_dir / "example" / "recipe.yml"
    data = yaml.safe_load(path.read_text())
    data["sharding"]["source"] = {"seat_rest": False}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CuwError, match="seat_rest is only read with filter: source"):
        load_recipe("example", recipes_dir)


def _filter_seat(tmp_path: Path, index: int = 1, count: int = 2, globs=("gen/*.cu",)) -> tuple[Seat, str, str]:
    """A seat beside the filter: ``gen/*.cu`` is the filter's; a rest key another shard owns."""
    rest_foreign = next(
        f"hand/h{i}.cu" for i in range(100) if runtime.SeatPartition(index, count).owner(f"hand/h{i}.cu") != index
    )
    s = Seat(tmp_path, runtime.SeatPartition(index, count, filter_globs=list(globs), filter_keys=["gen/g0.cu"]))
    return s, rest_foreign, "gen/g0.cu"


def test_a_seat_beside_the_filter_stubs_foreign_rest_and_compiles_the_filters_files(tmp_path):
    s, foreign, filtered = _filter_seat(tmp_path)
    env = dict(zip(FILTER_VARS, ("1", "2")))
    for key in (foreign, filtered):
        _source(s, key)
    proc = s.run("-c", str(s.src / foreign), "-o", "f.o", *ARCH, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (s.src / "f.o").read_bytes() == s.empty.read_bytes()
    proc = s.run("-c", str(s.src / filtered), "-o", "g.o", *ARCH, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [(e["action"], e["key"], e["owner"]) for e in s.entries()] == [("stubbed", foreign, 2), ("compiled", filtered, None)]


def test_a_seat_refuses_when_the_filter_is_another_shard(tmp_path):
    s, foreign, _ = _filter_seat(tmp_path)
    _source(s, foreign)
    proc = s.run("-c", str(s.src / foreign), "-o", "f.o", *ARCH, env=dict(zip(FILTER_VARS, ("2", "2"))))
    assert proc.returncode == runtime.DOUBLE_PARTITION_EXIT and "source filter is shard 2/2" in proc.stderr


def test_the_native_stub_stubs_the_rest_beside_the_filter_and_hands_over_the_rest(tmp_path):
    root = tmp_path / "j"
    ws = Workspace(root, root)
    for key in ("hand/h0.cu", "hand/h1.cu", "hand/h2.cu", "hand/h3.cu", "gen/g0.cu"):
        (ws.src / key).parent.mkdir(parents=True, exist_ok=True)
        (ws.src / key).write_text("__global__ void k() {}\n")
    part = runtime.SeatPartition(1, 2, filter_globs=["gen/*.cu"], filter_keys=["gen/g0.cu"])
    foreign = next(k for k in ("hand/h0.cu", "hand/h1.cu", "hand/h2.cu", "hand/h3.cu") if part.owner(k) == 2)
    ws.seat_dir.mkdir()
    ws.logs.mkdir()
    install.make_empty_object(ws.empty_object, run_settings().cc)
    config = seat_config(
        ws,
        find_toolkit(homes=run_settings().homes).nvcc,
        open_cache("ccache", ws.cache_dir, ws.tree, settings=run_settings()),
        part,
    )
    install.install(ws.seat_dir, config)
    assert native.install_native(ws.seat_dir, config, cc=run_settings().cc)
    stub = str(ws.seat_dir / "nvcc")

    def run(key: str, index: str) -> int:
        env = {**os.environ, "CUW_SEAT_STUB_NO_FALLBACK": "1", FILTER_VARS[0]: index, FILTER_VARS[1]: "2"}
        return subprocess.run([stub, "-c", key, "-o", "x.o"], cwd=ws.src, env=env, check=False).returncode

    assert run(foreign, "1") == 0, "a foreign rest TU is stubbed natively beside the filter"
    assert seat_log.read_log(ws.seat_log)[-1]["key"] == foreign
    assert run(foreign, "2") == 97, "another shard's coordinates: handed to the Python seat (which refuses)"
    assert run("gen/g0.cu", "1") == 0, "the filter's file is no other shard's: compiled here, never stubbed"
    last = seat_log.read_log(ws.seat_log)[-1]
    assert (last["action"], last["key"], last["owner"], last["rc"]) == ("compiled", "gen/g0.cu", None, 0)


def test_bypass_check_reads_compile_commands_without_ninja(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    (build / "CMakeFiles" / "CMakeScratch").mkdir(parents=True)
    entries = [
        {"directory": str(build), "file": str(src / "k/a.cu"), "command": "nvcc -c"},
        {"directory": str(build), "file": "../src/host.cpp", "command": "c++ -c"},
    ]
    assert cuda_compiles_from(tmp_path, src) == ([], None)
    (build / "compile_commands.json").write_text(json.dumps(entries))
    (build / "CMakeFiles" / "CMakeScratch" / "compile_commands.json").write_text(
        json.dumps([{"directory": str(build), "file": str(src / "probe.cu")}])
    )
    assert cuda_compiles_from(tmp_path, src) == (["k/a.cu"], "compile_commands.json")
    base = dict(
        build_rc=0,
        wheel="w.whl",
        hits=2,
        misses=0,
        uncacheable=0,
        total=2,
        stats_zeroed_at=2,
        merged_at=1,
        seat_keys=[],
        misses_by_key=[],
        uncacheable_by_key=[],
        shard_count=2,
        missing_shards=[],
    )
    verdict = link_gate(LinkObservation(cuda_tus_in_build=["k/a.cu"], compile_db="compile_commands.json", **base))
    assert not verdict.ok and "bypassed the seat" in verdict.line
    verdict = link_gate(LinkObservation(cuda_tus_in_build=[], compile_db=None, **base))
    assert verdict.ok and "no compile database (neither ninja's nor CMake's compile_commands.json)" in verdict.line


def test_plan_counts_the_rest_in_every_shard(recipes_dir):
    p = plan(load_recipe("example_source", recipes_dir), [3], settings=run_settings())
    assert (p.tus, p.rest) == (12, 4) and p.families["(rest)"] == 4
    assert (p.rows[0].tus_min, p.rows[0].tus_max) == (4, 4)
    assert all(c.ok for c in p.checks), [c for c in p.checks if not c.ok]


@pytest.mark.long  # a cold 3-shard build and its link (~55 s); the source filter's own gate case stays in test_gate_flips
def test_source_filter_with_seat_rest_compiles_every_tu_exactly_once(recipes_dir, paths):
    """The example in source-filter mode (recipes/example_source), 3 shards + link, Makefiles."""
    recipe = load_recipe("example_source", recipes_dir)
    outcomes, link = run_build(recipe, paths, count=3, recipes_dir=recipes_dir, progress=lambda _: None, settings=run_settings())
    assert outcomes == [True] * 3 and link.verdict.ok, link.verdict.line
    facts = link.verdict.facts
    assert (facts["misses"], facts["uncacheable"], facts["compile_db"]) == (0, 0, "compile_commands.json")
    assert facts["cuda_tus"] == 9 and facts["total"] == facts["hits"] == 11, "9 CUDA and 2 host TUs, all replayed"

    (link_log,) = paths.work.glob("*/link/logs/seat.jsonl")
    replayed = sorted(e["key"] for e in seat_log.read_log(link_log) if e["action"] == "compiled")
    compiled: list[str] = []
    for log in sorted(paths.work.glob("*/shard-*/logs/seat.jsonl")):
        entries = seat_log.read_log(log)
        compiled += [e["key"] for e in entries if e["action"] == "compiled"]
        stubbed = {e["key"] for e in entries if e["action"] == "stubbed"}
        assert stubbed and not any(filter_covers(k, recipe.sharding.source.globs) for k in stubbed)
    assert sorted(compiled) == replayed and len(replayed) == 11, "every TU compiled by exactly one shard"
    conservation = len(compiled) / len(replayed)
    print(f"work conservation {conservation:.3f}: {len(compiled)} compiles across 3 shards, {len(replayed)} replayed")
    assert conservation == 1.0
    reports = [json.loads(p.read_text()) for p in sorted(paths.artifacts.glob("*/cuw-shard-*.report.json"))]
    assert [r["facts"]["compiled"] for r in reports] == [4, 4, 3]


def test_on_windows_the_rest_is_cuda_only(tmp_path):
    """Windows shards keep every host source (the module-init symbol): the seat partitions no host TU there."""
    recipes, src = _natten_like(tmp_path, "sorted")
    recipe = load_recipe("natten_like", recipes)
    assert rest_keys(recipe, src, "windows") == [k for k in rest_keys(recipe, src) if k.endswith(".cu")] != []
    assert "csrc/natten0.cpp" not in expected_owned(recipe, src, ShardSpec(1, 1), "windows")


def test_progress_counts_every_tu_a_shard_will_compile(tmp_path):
    from cuw.jobs.shard import shard_workload

    recipes, src = _natten_like(tmp_path, "sorted")
    recipe = load_recipe("natten_like", recipes)
    slices = [shard_workload(recipe, src, ShardSpec(i, 4)) for i in range(1, 5)]
    assert sum(total for _, total in slices) == 25 and all(len(owned) == total for owned, total in slices)
    off, _ = _natten_like(tmp_path / "off", "sorted", seat_rest=False)
    owned, total = shard_workload(load_recipe("natten_like", off), off / "natten_like" / "src", ShardSpec(1, 4))
    assert (len(owned), total) == (5, 5 + 6), "seat_rest: false: its 5 kernels and the whole rest"
