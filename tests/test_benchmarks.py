"""Benchmarks that cannot rot: each script under benchmarks/ runs here at its smallest size, as a user
runs it (its own process, through conftest.run_child), and the test fails when it crashes or when
what it checks about correctness fails. Its timings are not judged: at these sizes, on a shared
machine, they are noise; docs/benchmarks.md holds the measured numbers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, BuiltCell, need, run_child, run_cuw

BENCHMARKS = REPO / "benchmarks"


def _bench(
    script: str, *args: str, tmp_path: Path, json_out: bool = True, timeout: int = 600
) -> tuple[subprocess.CompletedProcess, Any]:
    """``python benchmarks/<script> <args> --json <file>`` in ``tmp_path`` (its temporary folders too):
    the finished process and what it wrote to --json (None without). A traceback fails the test."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(BENCHMARKS / script), *args, *(["--json", str(out)] if json_out else [])]
    proc = run_child(cmd, cwd=tmp_path, timeout=timeout, env={**os.environ, "TMPDIR": str(tmp_path)})
    said = f"{script} {' '.join(args)}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, said
    if not json_out:
        return proc, None
    assert out.is_file(), f"the run ended before it wrote its results: {said}"
    return proc, json.loads(out.read_text())


# Smoke runs kept beside the feature their script serves: the script, the test file and the test that runs it.
ELSEWHERE = {"gpu_check.py": ("test_gpu.py", "test_the_prepared_gpu_check_dry_run")}


def test_every_benchmark_has_a_smoke_run_here():
    """A script added to benchmarks/ without a smoke run below (or in ELSEWHERE) fails this test
    (scaled_example.py is the library shard_vs_whole.py and handoff.py copy the example with;
    tests/test_scaled_example.py holds it)."""
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if re.search(r'^if __name__ == "__main__":', p.read_text(), re.M)}
    smoked = set(re.findall(r'_bench\(\s*"(\w+\.py)"', Path(__file__).read_text()))
    for script, (file, test) in ELSEWHERE.items():
        text = (REPO / "tests" / file).read_text()
        assert f"def {test}(" in text and f'"{script}"' in text, f"{file} has no {test} running {script}"
    smoked |= set(ELSEWHERE)
    assert scripts == smoked, f"no smoke run: {sorted(scripts - smoked)}; not a script: {sorted(smoked - scripts)}"
    assert {p.name for p in BENCHMARKS.glob("*.py")} - scripts == {"scaled_example.py"}


def test_partition_balance_smoke(tmp_path):
    proc, rows = _bench("partition_balance.py", "--shards", "2", "--tus", "12", tmp_path=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    recorded = {p.parent.name for p in (REPO / "recipes").glob("*/costs.json")}
    assert {r["table"] for r in rows} == {f"lognormal(3,{s}) seed 7" for s in (1.0, 1.6)} | {f"{n} (recorded)" for n in recorded}
    for r in rows:  # no partition beats the bound max(longest TU, mean) / mean
        assert r["shards"] == 2 and min(r["hash"], r["cost"]) >= r["bound"] - 1e-3 and r["cost_over_bound"] >= 1 - 1e-3, r


def test_handoff_synthetic_smoke(tmp_path):
    """The synthetic handoff (no compiler) at a megabyte and 20 small entries: every restore gives back
    every file. The goal (half of tar's throughput) may be missed at this size: then exit 1, nothing else."""
    proc, rows = _bench(
        "handoff.py", "--synthetic", "--cache-mb", "1", "--small", "20", "--repeat", "1", tmp_path=tmp_path, timeout=120
    )
    assert [r["case"] for r in rows] == ["large", "small"]
    assert all(r["restore_complete"] and r["files"] > 0 and r["archive_mb"] > 0 for r in rows), rows
    goals = all(r["pack_meets_goal"] and r["restore_meets_goal"] for r in rows)
    assert proc.returncode == (0 if goals else 1), proc.stdout + proc.stderr


@pytest.mark.needs("nvcc")
def test_handoff_of_a_real_shard_smoke(tmp_path):
    """One real shard (the example cut to one kernel TU) with ccache, packed and restored once."""
    proc, rows = _bench("handoff.py", "--tools", "ccache", "--kernels", "1", "--repeat", "1", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = rows
    assert row["tool"] == "ccache" and row["shard"] == "1/1" and row["restore_complete"], row
    assert row["entry_files"] > row["stats_files"] > 0, row  # cache entries beside ccache's counters


@pytest.mark.needs("nvcc")
def test_shard_vs_whole_smoke(tmp_path):
    """The smallest real run: the example cut to one kernel TU, one shard and its link; the wheel's
    tu_values() match, the link replays every compile as a hit."""
    proc, rows = _bench("shard_vs_whole.py", "--kernels", "1", "--shards", "1", "--rules", "hash", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = rows
    assert row["ok"] and row["tu_values_ok"] is True, row
    assert row["work_conservation"] == 1.0 and row["link_misses"] == 0 and row["link_overhead"] > 0, row
    assert set(row["link_phases"]) >= {"restore_s", "cmake_configure_s", "ninja_s", "finish_verify_s"}, row


@pytest.mark.needs("nvcc")
def test_seat_overhead_smoke(tmp_path):
    """Two calls a column: every correctness check passes (hits hit, stubs stub, the native stub did
    its calls itself); the 5 ms goals are printed, not judged here."""
    proc, result = _bench("seat_overhead.py", "--calls", "2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["calls"] == 2 and result["checks"] and all(result["checks"].values()), result["checks"]
    assert all(row["median_ms"] > 0 for row in result["rows"].values()), result["rows"]


def test_planner_vs_measured_smoke(example_cell: BuiltCell, tmp_path):
    """The planner held to the run's one cold example cell (3 shards), with a table recorded from that
    cell's own shard reports: the comparison is with itself, so every CPU ratio is 1."""
    reports = sorted(example_cell.cell_artifacts.glob("cuw-shard-*.report.json"))
    table = tmp_path / "costs.json"
    recorded = run_cuw(
        "costs", "example", *(f"--from={r}" for r in reports), "--recipes", str(example_cell.recipes), "--output", str(table)
    )
    assert recorded.returncode == 0, recorded.stderr
    proc, rows = _bench("planner_vs_measured.py", str(example_cell.root), "--costs", str(table), tmp_path=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(r["shard"] for r in rows) == [f"{i}/{example_cell.count}" for i in range(1, example_cell.count + 1)]
    assert sum(r["tus"] for r in rows) > 0 and all(r["untabled_tus"] == 0 for r in rows), rows
    assert all(r["cpu_within"] and abs(r["cpu_ratio"] - 1) <= 0.01 for r in rows), rows
    assert f"{len(rows)} of {len(rows)} shards within 15% in CPU seconds" in proc.stdout, proc.stdout


def test_emulated_compile_starts(tmp_path):
    """The ARM comparison needs the ARM stand-in and qemu (its smoke run is in the arm tier, below):
    here it imports what it uses from the forge and reads its options."""
    proc, _ = _bench("emulated_compile.py", "--help", tmp_path=tmp_path, json_out=False, timeout=120)
    assert proc.returncode == 0 and "--image" in proc.stdout and "--repeat" in proc.stdout, proc.stderr


@pytest.mark.arm
def test_emulated_compile_smoke(tmp_path):
    """One run of the smallest kernel, native and in the ARM stand-in (nox -s arm -- tests/test_benchmarks.py,
    after the ARM tier has installed the aarch64 toolkit in the image's job home)."""
    need("qemu-aarch64", "engine")
    made = run_child(
        [sys.executable, "-m", "cuw", "image", "--from", str(REPO / "images" / "standin-aarch64.yml")], cwd=REPO, timeout=5400
    )
    assert made.returncode == 0, made.stderr[-3000:]
    image = made.stdout.strip().splitlines()[-1].split(" ", 1)[1]
    proc, _ = _bench(
        "emulated_compile.py", "--image", image, "--tu", "k00_saxpy.cu", "--repeat", "1", tmp_path=tmp_path, json_out=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"native x86_64 [\d.]+ s, aarch64 under qemu-user [\d.]+ s", proc.stdout), proc.stdout
