"""Sharded versus whole, side by side in one run, on a real compile workload.

    python benchmarks/shard_vs_whole.py [--recipe example] [--shards 1,2,4] [--json out.json]

For each N it runs the whole cell here (N shards as parallel processes, then
the link) with a cold cache, and prints: wall time of the shard phase and of
the link, compile CPU-seconds summed over the shards (from the seat's per-TU
timings), work conservation (TUs compiled by all shards / TUs in the build:
must be exactly 1.0), the slowest shard's compile seconds, and each ratio to
N=1. The machine is shared and noisy: compare ratios from one run, not numbers
across runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw import seat  # noqa: E402
from cuw.pipeline import Paths, run_build  # noqa: E402
from cuw.recipe import load_recipe  # noqa: E402


def measure(recipe_key: str, n: int, root: Path) -> dict:
    recipes = root / "recipes"
    if not recipes.exists():
        shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    recipe = load_recipe(recipe_key, recipes)
    paths = Paths(work=root / f"n{n}" / "work", artifacts=root / f"n{n}" / "artifacts", dist=root / f"n{n}" / "dist")
    quiet = lambda _msg: None  # noqa: E731
    start = time.monotonic()
    outcomes, link = run_build(recipe, paths, count=n, recipes_dir=recipes, progress=quiet)
    total = time.monotonic() - start
    shard_seconds, per_shard, compiled = 0.0, [], 0
    for log in sorted(paths.work.glob("*/shard-*/logs/seat.jsonl")):
        entries = [e for e in seat.read_log(log) if e.get("action") == "compiled"]
        seconds = sum(e.get("seconds", 0.0) for e in entries)
        shard_seconds += seconds
        per_shard.append(seconds)
        compiled += len(entries)
    link_log = next(paths.work.glob("*/link/logs/seat.jsonl"))
    link_seconds = sum(e.get("seconds", 0.0) for e in seat.read_log(link_log) if e.get("action") == "compiled")
    tus = link.verdict.facts.get("cuda_tus", 0) or 1
    return {
        "shards": n,
        "ok": bool(link.ok and all(outcomes)),
        "wall_s": round(total, 1),
        "shard_compile_cpu_s": round(shard_seconds, 1),
        "slowest_shard_compile_s": round(max(per_shard, default=0.0), 1),
        "link_compile_s": round(link_seconds, 2),
        "work_conservation": round(compiled / tus, 3),
        "link_misses": link.verdict.facts.get("misses"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="example")
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(x) for x in args.shards.split(",")]
    with tempfile.TemporaryDirectory(prefix="cuw-bench-") as tmp:
        rows = [measure(args.recipe, n, Path(tmp)) for n in counts]
    base = rows[0]
    for row in rows:
        row["slowest_shard_vs_first"] = round(row["slowest_shard_compile_s"] / max(base["slowest_shard_compile_s"], 1e-9), 3)
        row["cpu_vs_first"] = round(row["shard_compile_cpu_s"] / max(base["shard_compile_cpu_s"], 1e-9), 3)
    cols = ["shards", "ok", "wall_s", "shard_compile_cpu_s", "slowest_shard_compile_s", "link_compile_s",
            "work_conservation", "link_misses", "slowest_shard_vs_first", "cpu_vs_first"]  # fmt: skip
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["ok"] and r["work_conservation"] == 1.0 and r["link_misses"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
