"""The matrix plan: fan-out per lane, filters that explain themselves, chunks under GitHub's caps."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from cuw.base.errors import CuwError, InputError
from cuw.config.grid import Grid, TorchRelease
from cuw.ci.matrix import MAX_JOBS, Filters, dumps, plan
from cuw.config.policy import load_policy
from cuw.config.recipe import Sharding, load_recipe


@pytest.fixture
def grid(recipes_dir) -> Grid:
    return load_policy(recipes_dir).grid


def _jobs(result):
    return [j for c in result["chunks"] for j in c["compile"]["include"] + c["link"]["include"]]


def test_shard_fan_out_and_link_lists_per_lane(recipes_dir, grid):
    recipe = load_recipe("example", recipes_dir)  # sharding 4 on linux and linux_aarch64
    result = plan([recipe], grid, Filters(cuda=("13.0",), python=("3.11",)))
    jobs = _jobs(result)
    by_lane = {lane: [j for j in jobs if j["lane"] == lane] for lane in ("linux", "linux_aarch64", "windows")}
    assert [j["shard"] for j in by_lane["linux"] if j["kind"] == "shard"] == ["1/4", "2/4", "3/4", "4/4"]
    assert [j["kind"] for j in by_lane["linux"]].count("link") == 1
    assert [j["kind"] for j in by_lane["windows"]] == ["build"], "windows is not in sharding.platforms"
    for chunk in result["chunks"]:
        assert all(j["kind"] == "link" for j in chunk["link"]["include"])
        for link in chunk["link"]["include"]:  # every shard of a cell rides in the same chunk as its link
            shards = [j for j in chunk["compile"]["include"] if j["cell"] == link["cell"]]
            assert len(shards) == 4 and link["artifact"] == f"cuw-shard-{link['cell']}-*"
    assert len({j["artifact"] for j in jobs if j["kind"] == "shard"}) == 8, "artifact names never collide across lanes"


def test_torch_free_collapse_and_its_filter_error(recipes_dir, grid):
    recipe = load_recipe("example", recipes_dir)
    assert all(j["torch"] == "" for j in _jobs(plan([recipe], grid, Filters())))
    with pytest.raises(InputError, match=r"example is torch-free .* --pytorch does not apply"):
        plan([recipe], grid, Filters(pytorch=("2.14",)))


@pytest.mark.parametrize(
    "filters, message",
    [
        (
            Filters(platform=("macos",)),
            r"--platform macos matches no cell of example_torch \(it has: linux, linux_aarch64, windows\)",
        ),
        (Filters(cuda=("11.8",)), r"--cuda 11.8 matches no cell"),
        (Filters(pytorch=("2.1",)), r"--pytorch 2.1 matches no cell .*it has: 2.13, 2.14"),
        (Filters(python=("3.9",)), r"--python 3.9 matches no cell"),
    ],
)
def test_every_empty_filter_is_an_error(recipes_dir, grid, filters, message):
    with pytest.raises(CuwError, match=message):
        plan([load_recipe("example_torch", recipes_dir)], grid, filters)


def test_values_that_exist_but_not_together(recipes_dir):
    grid = Grid(
        platforms=["linux"],
        python=["3.11", "3.12"],
        cuda=["12.8", "13.0"],
        torch={"2.13": TorchRelease(["12.8"], ["3.11", "3.12"]), "2.14": TorchRelease(["13.0"], ["3.12"])},
    )
    recipe = load_recipe("example_torch", recipes_dir)
    with pytest.raises(InputError, match=r"each value exists, but not together"):
        plan([recipe], grid, Filters(pytorch=("2.14",), cuda=("12.8",)))


def test_sharding_platforms_and_min_pytorch(recipes_dir, grid):
    recipe = replace(load_recipe("example_torch", recipes_dir), sharding=Sharding(count=3, platforms=["linux"]))
    jobs = _jobs(plan([recipe], grid, Filters()))
    assert {j["lane"] for j in jobs if j["kind"] == "shard"} == {"linux"}
    assert {j["kind"] for j in jobs if j["lane"] != "linux"} == {"build"}


def test_a_big_grid_is_chunked_under_the_caps_never_truncated(recipes_dir):
    grid = Grid(
        platforms=["linux", "linux_aarch64", "windows"],
        python=["3.9", "3.10", "3.11", "3.12", "3.13"],
        cuda=["12.6", "12.8", "13.0"],
        torch={
            v: TorchRelease(["12.6", "12.8", "13.0"], ["3.9", "3.10", "3.11", "3.12", "3.13"])
            for v in ("2.11", "2.12", "2.13", "2.14")
        },
    )
    recipe = replace(load_recipe("example_torch", recipes_dir), sharding=Sharding(count=40, platforms=["linux", "linux_aarch64"]))
    result = plan([recipe], grid, Filters())
    cells = 3 * 5 * 3 * 4
    assert result["total_jobs"] == (2 * 41 + 1) * cells // 3 and len(_jobs(result)) == result["total_jobs"]
    assert len(result["chunks"]) > 3
    for chunk in result["chunks"]:
        assert chunk["jobs"] <= MAX_JOBS
        assert len(json.dumps(chunk)) < 1_000_000
    ids = [c["id"] for c in result["chunks"]]
    assert len(ids) == len(set(ids)) and "example_torch-linux-cu12.6-1" in ids


def test_a_cell_over_the_cap_is_an_error(recipes_dir, grid):
    recipe = replace(load_recipe("example", recipes_dir), sharding=Sharding(count=300, platforms=["linux"]))
    with pytest.raises(InputError, match=r"alone needs 301 jobs, over GitHub's 256: lower sharding.count"):
        plan([recipe], grid, Filters(platform=("linux",)))


def test_output_is_deterministic_and_the_cli_prints_a_summary(recipes_dir, tmp_path):
    args = [sys.executable, "-m", "cuw", "matrix", "--package", "all", "--recipes", str(recipes_dir)]
    one = subprocess.run(args, capture_output=True, text=True, check=True)
    two = subprocess.run(args, capture_output=True, text=True, check=True)
    assert one.stdout == two.stdout and json.loads(one.stdout)["total_jobs"] > 0
    assert "jobs in" in one.stderr and "lane linux" in one.stderr and "package example_torch" in one.stderr
    first = json.loads(one.stdout)["chunks"][0]["id"]
    chunk = subprocess.run([*args, "--chunk", first, "--output", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert chunk.returncode == 0 and json.loads((tmp_path / "c.json").read_text())["id"] == first
    missing = subprocess.run([*args, "--chunk", "nope"], capture_output=True, text=True)
    assert missing.returncode == 2 and "no chunk 'nope'" in missing.stderr


def test_dumps_is_stable():
    assert dumps({"b": 1, "a": [2]}) == '{"a":[2],"b":1}\n'


def test_build_matrix_with_nothing_buildable_here_is_an_error(recipes_dir, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "build", "example", "--matrix", "--platform", "windows", "--recipes", str(recipes_dir)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "skipped example-windows-py3.10-cu13.0-notorch: needs lane windows: this machine is linux" in proc.stderr
    assert "matrix: example: Python axis collapsed (wheel_python: py3" in proc.stderr
    assert "none of the 2 selected cells of example can be built on this machine" in proc.stderr


def test_a_py3_wheel_gets_one_cell_per_lane_and_cuda_line(recipes_dir, grid):
    example = load_recipe("example", recipes_dir)  # wheel_python: py3
    per_python = replace(example, wheel_python="per-interpreter")
    collapsed, full = plan([example], grid, Filters()), plan([per_python], grid, Filters())
    assert full["total_jobs"] == collapsed["total_jobs"] * len(grid.python)
    assert {j["python"] for j in _jobs(collapsed)} == {"3.10"}, "built with the lowest Python it serves"
    assert "Python axis collapsed (wheel_python: py3" in collapsed["collapsed"]["example"] and not full["collapsed"]
    # --python filters the Pythons it serves, and the cell builds with the lowest one kept
    narrowed = plan([example], grid, Filters(python=("3.12", "3.11"), cuda=("13.0",), platform=("linux",)))
    assert [j["cell"] for j in _jobs(narrowed) if j["kind"] == "link"] == ["example-linux-py3.11-cu13.0-notorch"]
    with pytest.raises(CuwError, match=r"--python 3.9 matches no cell of example \(it has: 3.10, 3.11, 3.12, 3.13\)"):
        plan([example], grid, Filters(python=("3.9",)))
    abi3 = replace(example, wheel_python="abi3", abi3_min_python="3.12")
    with pytest.raises(CuwError, match=r"--python 3.11 matches no cell of example \(it has: 3.12, 3.13\)"):
        plan([abi3], grid, Filters(python=("3.11",)))


def test_the_cli_summary_shows_the_collapse(recipes_dir):
    args = [sys.executable, "-m", "cuw", "matrix", "--package", "example", "--recipes", str(recipes_dir)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    assert "collapsed example: Python axis collapsed (wheel_python: py3, a py3-none wheel)" in out.stderr
    assert "serving 3.10, 3.11, 3.12, 3.13" in out.stderr


def test_linux_jobs_carry_their_lanes_build_image_and_on_host_drops_it(recipes_dir, tmp_path):
    """The workflow's `container:` comes from the matrix: images.<lane>.ref for Linux lanes, none for
    Windows; `--on-host` (a local act host-mode run) leaves every job on its runner."""
    images = load_policy(recipes_dir).images
    out = tmp_path / "m.json"
    run = lambda *extra: subprocess.run(  # noqa: E731
        [
            sys.executable,
            "-m",
            "cuw",
            "matrix",
            "--package",
            "example",
            "--cuda",
            "13.0",
            "--python",
            "3.11",
            "--recipes",
            str(recipes_dir),
            "--output",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    assert run("--platform", "linux,linux_aarch64,windows").returncode == 0
    jobs = _jobs(json.loads(out.read_text()))
    assert {j["lane"] for j in jobs} == {"linux", "linux_aarch64", "windows"}
    for job in jobs:
        assert job["image"] == (images[job["lane"]].ref if job["lane"] in images else ""), job
    assert all("@sha256:" in j["image"] for j in jobs if j["lane"] != "windows")
    assert run("--on-host").returncode == 0
    assert {j["image"] for j in _jobs(json.loads(out.read_text()))} == {""}


def test_a_lane_image_can_be_replaced_for_one_plan_pinned_like_the_policys(recipes_dir):
    from cuw.config.policy import image_overrides

    policy = load_policy(recipes_dir)
    local = "127.0.0.1:5000/cuw-standin-x86_64@sha256:" + "a" * 64
    images = image_overrides([f"linux={local}"], policy)
    assert images["linux"] == local and images["linux_aarch64"] == policy.images["linux_aarch64"].ref
    assert image_overrides([], policy) == {lane: image.ref for lane, image in policy.images.items()}
    for value, message in [
        ("linux=cuw-standin:tag", "pin the image by digest"),
        ("junk", "LANE=REF"),
        (f"windows={local}", "only Linux lanes"),
        (f"linux={local},linux={local}", "given twice"),
        (f"mars={local}", "unknown lane"),
    ]:
        with pytest.raises(CuwError, match=message):
            image_overrides([value], policy)


def test_an_unverified_lane_is_planned_only_when_asked_for(recipes_dir, tmp_path):
    """No job goes to a lane that has never built a cell (Windows) unless --platform or a chunk id names it."""
    out = tmp_path / "m.json"
    run = lambda *extra: subprocess.run(  # noqa: E731
        [
            sys.executable,
            "-m",
            "cuw",
            "matrix",
            "--package",
            "example",
            "--cuda",
            "13.0",
            "--recipes",
            str(recipes_dir),
            "--output",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    default = run()
    assert default.returncode == 0, default.stderr
    assert {j["lane"] for j in _jobs(json.loads(out.read_text()))} == {"linux", "linux_aarch64"}
    assert "lane windows: 1 cell(s) held back: UNVERIFIED" in default.stderr and "--platform windows" in default.stderr
    assert run("--platform", "windows").returncode == 0
    assert {j["lane"] for j in _jobs(json.loads(out.read_text()))} == {"windows"}
    assert run("--chunk", "example-windows-cu13.0").returncode == 0, "a chunk id names its lane"
    assert {j["lane"] for j in json.loads(out.read_text())["compile"]["include"]} == {"windows"}
    # The library call keeps every lane: `build --matrix` and the local workflow runner choose their own.
    assert "windows" in {
        j["lane"] for j in _jobs(plan([load_recipe("example", recipes_dir)], load_policy(recipes_dir).grid, Filters()))
    }


# -- the job cap and the ladder -----------------------------------------------------------


def _cap_policy(recipes_dir, limit_minutes: int) -> None:
    path = recipes_dir / "defaults.yml"
    path.write_text(re.sub(r"(?m)^  limit_minutes: \d+$", f"  limit_minutes: {limit_minutes}", path.read_text()))


def _matrix_cli(recipes_dir, *args):
    return subprocess.run(
        [sys.executable, "-m", "cuw", "matrix", "--package", "example", "--recipes", str(recipes_dir), *args],
        capture_output=True,
        text=True,
    )


def test_every_shard_carries_the_policys_deadline_and_no_cell_without_a_table_climbs(recipes_dir):
    (recipes_dir / "example" / "costs.json").unlink()
    _cap_policy(recipes_dir, 100)
    run = _matrix_cli(recipes_dir, "--platform", "linux", "--cuda", "13.0")
    assert run.returncode == 0, run.stderr
    [chunk] = json.loads(run.stdout)["chunks"]
    shards = [j for j in chunk["compile"]["include"] if j["kind"] == "shard"]
    assert len(shards) == 4 and {(j["deadline_s"], j["part"], j["parts"], j["resume"]) for j in shards} == {(80 * 60, 1, 1, "")}
    assert chunk["compile_2"] == chunk["compile_3"] == {"include": []}
    assert [j["deadline_s"] for j in chunk["link"]["include"]] == [0]


def test_a_cell_past_the_cap_gets_the_ladder_and_its_link_the_last_parts(recipes_dir):
    """The example's table scaled past a 150 min cap (7,800 s of build): shard 2/4 is a chain of 3
    parts, shard 3/4 of 2 (cuw plan's check at N=4 says the same); each part resumes the artifact of
    the one before, the last uploads the shard archive's name, and the link's pattern matches the
    four last parts and no part before them."""
    from fnmatch import fnmatch

    from test_planner import scaled_example_costs

    scaled_example_costs(recipes_dir)
    _cap_policy(recipes_dir, 150)
    run = _matrix_cli(recipes_dir, "--platform", "linux", "--cuda", "13.0")
    assert run.returncode == 0, run.stderr
    [chunk] = json.loads(run.stdout)["chunks"]
    cell = chunk["link"]["include"][0]["cell"]
    rungs = {
        key: [(j["shard"], j["part"], j["parts"], j["artifact"], j["resume"]) for j in chunk[key]["include"]]
        for key in ("compile", "compile_2", "compile_3")
    }
    final = lambda i: f"cuw-shard-{cell}-{i}of4.tar"  # noqa: E731
    part = lambda k, i: f"cuw-part{k}-{cell}-{i}of4"  # noqa: E731
    assert rungs == {
        "compile": [
            ("1/4", 1, 1, final(1), ""),
            ("2/4", 1, 3, part(1, 2), ""),
            ("3/4", 1, 2, part(1, 3), ""),
            ("4/4", 1, 1, final(4), ""),
        ],
        "compile_2": [("2/4", 2, 3, part(2, 2), part(1, 2)), ("3/4", 2, 2, final(3), part(1, 3))],
        "compile_3": [("2/4", 3, 3, final(2), part(2, 2))],
    }
    # Every shard, one job or a chain, starts no compile later than its longest TU before the budget:
    # none runs into the margin.
    deadlines = {j["shard"]: j["deadline_s"] for key in rungs for j in chunk[key]["include"]}
    assert deadlines == {"1/4": 7800 - 3652, "2/4": 7800 - 3915, "3/4": 7800 - 3005, "4/4": 7800 - 1987}
    uploaded = [row[3] for key in rungs for row in rungs[key]]
    [link] = chunk["link"]["include"]
    assert sorted(a for a in uploaded if fnmatch(a, link["artifact"])) == [final(i) for i in range(1, 5)]
    assert chunk["jobs"] == 4 + 2 + 1 + 1
    assert "ladder example: 2 shard job(s) predicted past the job cap" not in run.stderr  # counted per chain length
    assert "ladder example: 1 shard job(s) predicted past the job cap, each a chain of 3 parts" in run.stderr


def test_a_chain_longer_than_the_rungs_is_one_error_naming_the_cell_and_the_n(recipes_dir):
    from test_planner import scaled_example_costs

    scaled_example_costs(recipes_dir)
    _cap_policy(recipes_dir, 120)
    run = _matrix_cli(recipes_dir, "--platform", "linux", "--cuda", "13.0")
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line == (
        "cuw: error: example-linux-py3.10-cu13.0-notorch: N=4: 3 shard(s) predicted past a shard's build budget of "
        "6,000 s (jobs.limit_minutes 120 min less jobs.margin_minutes 20), the longest chain shard 2/4 predicted at "
        "8,985 s: 5 parts; build.yml has 3 rungs: N=10 brings every shard under it (sharding.count in "
        "recipes/example/recipe.yml)"
    )
    _cap_policy(recipes_dir, 70)  # 50 min of build: the example's longest TUs (65 min) are built by no chain
    run = _matrix_cli(recipes_dir, "--platform", "linux", "--cuda", "13.0")
    assert run.returncode == 2 and "no N and no chain builds it" in run.stderr and "nvcc_threads" in run.stderr
