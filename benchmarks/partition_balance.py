"""Balance of the partition rules on heavy-tailed compile costs, without compiling.

    python benchmarks/partition_balance.py [--shards 4,10] [--tus 150] [--seed 7] [--json out.json]

Balance is slowest shard / mean shard (1.0 is perfect). For each cost table
and N it prints the hash rule, the cost rule (longest first) and the physical
bound max(longest TU, mean) / mean that no partition can beat. Tables: a
lognormal one with a fixed seed (real CUDA TU costs are heavy-tailed: 30 s
mean, 299 s longest for llama-cpp-python's first 59 TUs), and every recipe's
recorded ``costs.json``. Both rules are the forge's own
(:func:`cuw.partition.rules.assign`), on the same keys the seat would see.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.partition.costs import load  # noqa: E402
from cuw.partition.rules import assign  # noqa: E402


def lognormal_table(tus: int, seed: int, sigma: float) -> dict[str, float]:
    """Heavy-tailed seconds per TU: median ~20 s; sigma 1.0 has TUs of minutes, 1.6 of a quarter hour."""
    rng = random.Random(seed)
    return {f"csrc/gen/kernel_{i:03}.cu": round(rng.lognormvariate(3.0, sigma), 3) for i in range(tus)}


def balance(costs: dict[str, float], n: int, rule: str) -> float:
    loads = [0.0] * n
    owner = assign(n, rule, costs=costs).owner
    for key, seconds in costs.items():
        loads[owner(key) - 1] += seconds
    return max(loads) / (sum(loads) / n)


def measure(name: str, costs: dict[str, float], n: int) -> dict:
    mean = sum(costs.values()) / n
    bound = max(max(costs.values()), mean) / mean
    cost = balance(costs, n, "cost")
    return {
        "table": name,
        "tus": len(costs),
        "shards": n,
        "hash": round(balance(costs, n, "hash"), 4),
        "cost": round(cost, 4),
        "bound": round(bound, 4),
        "cost_over_bound": round(cost / bound, 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", default="4,10", help="comma-separated N (default: 4,10)")
    ap.add_argument("--tus", type=int, default=150, help="TUs in the lognormal table (default: 150)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the lognormal table (default: 7)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    tables = {f"lognormal(3,{sigma}) seed {args.seed}": lognormal_table(args.tus, args.seed, sigma) for sigma in (1.0, 1.6)}
    for path in sorted((REPO / "recipes").glob("*/costs.json")):
        tables[f"{path.parent.name} (recorded)"] = load(path).costs
    rows = [measure(name, costs, int(n)) for name, costs in tables.items() for n in args.shards.split(",")]
    print(json.dumps(rows, indent=2))
    print(f"\n{'table':32} {'TUs':>4} {'N':>3} {'hash':>6} {'cost':>6} {'bound':>6} {'cost/bound':>10}")
    for r in rows:
        print(
            f"{r['table']:32} {r['tus']:>4} {r['shards']:>3} {r['hash']:>6.3f} {r['cost']:>6.3f} "
            f"{r['bound']:>6.3f} {r['cost_over_bound']:>10.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
