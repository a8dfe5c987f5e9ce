"""A shard's parallel compile jobs from measured peaks: the rule, the plan's per-shard view, and a
real shard build that runs one compile at a time when its cost table says two would not fit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuw.cli.main import main as cuw_main
from cuw.config.policy import Runner, load_policy
from cuw.config.recipe import load_recipe
from cuw.jobs.shard import run_shard
from cuw.partition.parallel_jobs import choose_jobs, fitting_jobs, predicted_peak
from cuw.partition.rules import ShardSpec
from cuw.seat import seat_log
from cuw.tools import planner
from conftest import run_settings

REPO = Path(__file__).resolve().parent.parent
GITHUB = Runner(memory_gb=16, cores=4)  # budget: 14 GB = 14336 MB
NATTEN_TU = 11.5 * 1024  # one natten TU's cicc, measured
FLASH_TU = 5.8 * 1024  # one flash-attn TU's


@pytest.mark.parametrize(
    "peaks, cores, pinned, jobs, why",
    [
        ([NATTEN_TU, NATTEN_TU, 300], 4, None, 1, "2 compiles could peak at 23.0 GB"),
        ([FLASH_TU] * 5, 4, None, 2, "3 compiles could peak at 17.4 GB"),
        ([FLASH_TU, 3000, 2000, 1000], 4, None, 4, "one per core: 4 compiles peak at 11.7 GB"),
        ([200] * 50, 4, None, 4, "one per core"),
        ([20 * 1024, 100], 4, None, 1, "the largest TU peak alone, 20.0 GB, exceeds 16 GB"),
        ([FLASH_TU] * 5, 1, None, 1, "one per core"),
        ([], 4, None, 4, "no peak memory measured"),
        ([NATTEN_TU] * 3, 4, 3, 3, "recipe max_jobs 3"),  # a pin wins over the measure
        ([NATTEN_TU] * 3, 2, 3, 2, "recipe max_jobs 3"),  # and never exceeds the cores
    ],
)
def test_the_job_count_fits_the_largest_peaks_in_the_runners_memory(peaks, cores, pinned, jobs, why):
    choice = choose_jobs(peaks, cores, GITHUB, pinned)
    assert choice.jobs == jobs and why in choice.why, choice


def test_a_lane_without_a_runner_size_keeps_one_job_per_core():
    assert choose_jobs([NATTEN_TU] * 4, 4, None).jobs == 4


@given(
    st.lists(st.integers(min_value=1, max_value=30_000), max_size=40),
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=1, max_value=200_000),
)
def test_the_count_is_the_largest_that_fits(peaks, cores, budget):
    jobs = fitting_jobs(peaks, cores, budget)
    assert 1 <= jobs <= cores
    assert jobs == 1 or predicted_peak(peaks, jobs) <= budget
    # One more job would not fit (or there is no core for it).
    assert jobs == cores or predicted_peak(peaks, jobs + 1) > budget


def test_the_policy_gives_githubs_runner_per_lane(recipes_dir):
    runners = load_policy(recipes_dir).runners
    assert runners["linux"] == Runner(16, 4, 2, free_disk_gb=14) and set(runners) == {"linux", "linux_aarch64", "windows"}
    path = recipes_dir / "defaults.yml"
    path.write_text(path.read_text().replace("linux: {memory_gb: 16, cores: 4,", "linux: {memory_gb: 2, cores: 4,"))
    assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--shards", "2"]) == 2


def _table_with_peaks(recipes_dir: Path, peak_mb: float) -> dict:
    """The example's committed table with every TU measured at ``peak_mb`` and 0.8 CPU s per wall s."""
    path = recipes_dir / "example" / "costs.json"
    data = json.loads(path.read_text())
    data["peak_mb"] = {k: peak_mb for k in data["costs"]}
    data["cpu_s"] = {k: round(v * 0.8, 3) for k, v in data["costs"].items()}
    path.write_text(json.dumps(data))
    return data


def test_compiles_in_slots_take_the_longest_first_makespan():
    from cuw.tools.plan_shards import in_slots

    assert in_slots([5, 4, 3, 3, 3], 2) == 10  # 5|4, then 3s onto the earlier-ending slot: 8 and 10
    assert in_slots([5, 4, 3], 1) == 12 and in_slots([5, 4, 3], 8) == 5 and in_slots([], 4) == 0


def test_the_plan_prints_each_shards_cpu_seconds_peak_and_jobs(recipes_dir, capsys):
    data = _table_with_peaks(recipes_dir, 5000)
    recipe = load_recipe("example", recipes_dir)
    result = planner.plan(recipe, [2], checked_n=2, settings=run_settings())
    assert [s.index for s in result.shards] == [1, 2]
    assert sum(s.tus for s in result.shards) == result.tus
    owned = {i: [k for k, s in result.assignment.items() if s == i] for i in (1, 2)}
    for s in result.shards:
        assert s.cpu_s == pytest.approx(sum(data["cpu_s"][k] for k in owned[s.index]), abs=0.01)
        # 5 GB each: two fit in 14 GB, three do not
        assert (s.jobs, s.peak_mb) == (2, 10000) and "3 compiles could peak at 14.6 GB" in s.why
    assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--shards", "2", "--check", "2"]) == 0
    out = capsys.readouterr().out
    assert "lane linux's runner: 4 cores, 16 GB (2 GB headroom)" in out
    header = next(line for line in out.splitlines() if "peak GB" in line)
    assert header.split()[:6] == ["shard", "TUs", "wall", "s", "cpu", "s"]
    row = next(line for line in out.splitlines() if line.split()[:1] == ["1"] and "compiles could peak" in line)
    cells = row.split()
    assert (cells[4], cells[6]) == ("2", "9.8")  # 2 jobs, 10000 MB = 9.8 GB
    # Wall in its 2 slots, longest first: between half its one-slot compiles and all of them.
    first = result.shards[0]
    assert float(cells[5]) == pytest.approx(first.wall_jobs_s, abs=0.05) and first.wall_s is not None
    assert first.wall_jobs_s is not None and first.wall_s / 2 <= first.wall_jobs_s + 1e-6 <= first.wall_s + 1e-6
    for fmt, cells in (("markdown", "| 1 | "), ("html", "<tr><td>1</td><td>")):
        assert cuw_main(["plan", "example", "--recipes", str(recipes_dir), "--shards", "2", "--check", "2", "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "peak GB" in out and cells in out and "3 compiles could peak at 14.6 GB" in out


@pytest.mark.long
@pytest.mark.needs("cmake")
def test_a_shard_whose_table_allows_one_compile_at_a_time_builds_with_one(recipes_dir, paths):
    """13 GB per TU in a 16 GB runner with 2 GB headroom: one compile at a time, whatever --jobs
    asks; the seat log's compile bars never overlap, and the report says why and what it used."""
    _table_with_peaks(recipes_dir, 13000)
    lines: list[str] = []
    result = run_shard(
        load_recipe("example", recipes_dir), ShardSpec(1, 1), paths, jobs=4, progress=lines.append, settings=run_settings()
    )
    assert result.verdict.ok, result.verdict.line
    start = next(line for line in lines if "compile job" in line)
    assert "1 compile job: 4 cores, but 2 compiles could peak at 25.4 GB, over 16 GB less 2 GB headroom" in start
    report = json.loads(result.report.read_text())
    assert report["parallel_jobs"] == {"jobs": 1, "predicted_peak_mb": 13000, "why": report["parallel_jobs"]["why"]}
    (log,) = paths.work.glob("*/shard-1of1/logs/seat.jsonl")
    compiles = [e for e in seat_log.read_log(log) if e["action"] == "compiled"]
    bars = sorted((e["at"] - e["seconds"], e["at"]) for e in compiles)
    assert len(bars) >= 9
    assert all(later[0] >= earlier[1] - 0.05 for earlier, later in zip(bars, bars[1:])), bars
    # What the planner is held to: the shard's summed CPU seconds and its largest one-compile peak.
    usage = report["compile_usage"]
    assert usage["cpu_s"] == pytest.approx(sum(e["cpu_s"] for e in compiles), abs=0.01) and usage["cpu_s"] > 1
    assert usage["peak_mb"] == max(e["peak_mb"] for e in compiles) >= 50
    # The benchmark reads the same cell: measured CPU is the seat's, per shard, beside the plan's.
    table = recipes_dir / "example" / "costs.json"
    bench = [sys.executable, str(REPO / "benchmarks" / "planner_vs_measured.py"), str(paths.artifacts), "--costs", str(table)]
    out = subprocess.run([*bench, "--json", str(paths.work / "bench.json")], capture_output=True, text=True, check=True).stdout
    assert "CPU seconds per shard" in out and "Wall seconds per shard" in out
    (row,) = json.loads((paths.work / "bench.json").read_text())
    cold = [e for e in compiles if e["outcome"] != "hit"]
    assert row["shard"] == "1/1" and row["cpu_measured_s"] == pytest.approx(sum(e["cpu_s"] for e in cold), abs=0.01)
    assert row["peak_predicted_mb"] == 13000 and row["wall_measured_s"] == report["build_s"]
    # The machine factor: the cell's measured / table CPU over the TUs both have, and each shard's ratio after it.
    table_cpu = json.loads(table.read_text())["cpu_s"]
    pairs = [(e["cpu_s"], table_cpu[e["key"]]) for e in cold if table_cpu.get(e["key"])]
    assert pairs and row["machine_factor"] == pytest.approx(sum(a for a, _ in pairs) / sum(b for _, b in pairs), abs=0.001)
    assert row["cpu_ratio_after_factor"] == pytest.approx(row["cpu_ratio"] * row["machine_factor"], abs=0.002)
    assert "machine factor (the cell's measured / table CPU seconds, TU by TU)" in out
    # What it refuses, in one line and before it compares: then nothing is written.
    twice = paths.work / "twice"
    for sub in ("a", "b"):
        shutil.copytree(paths.artifacts, twice / sub)
    for args, why in [
        ((str(paths.work / "nowhere"), "--costs", str(table)), "no such folder"),
        ((str(twice), "--costs", str(table)), "shard 1/1 twice"),
        ((str(paths.artifacts), "--costs", str(table), "--tolerance", "nan"), "--tolerance nan: a fraction"),
        ((str(paths.artifacts), "--recipe", "../recipes/example"), "is not a folder name"),
        ((str(paths.artifacts), "--costs", str(table), "--json", str(paths.work / "no" / "b.json")), "does not exist"),
    ]:
        bad = subprocess.run([*bench[:2], *args], capture_output=True, text=True)
        assert bad.returncode == 2 and why in bad.stderr and "Traceback" not in bad.stderr and not bad.stdout, (args, bad)
