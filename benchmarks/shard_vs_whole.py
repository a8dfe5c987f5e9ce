"""Sharded versus whole, side by side in one run, on a real compile workload.

    python benchmarks/shard_vs_whole.py [--recipe example] [--shards 1,2,4] [--rules hash,cost] [--scale K]
                                        [--kernels K] [--json out.json]

For each N it runs the whole cell here (N shards as parallel processes, then
the link) with a cold cache, and prints: wall time of the shard phase and of
the link, compile CPU-seconds summed over the shards (from the seat's per-TU
timings), work conservation (TUs, CUDA and host, compiled by all shards / TUs
the link replays: must be exactly 1.0, for a source-filter recipe too), the slowest shard's compile seconds, and each
ratio to N=1. Two more columns say what choosing N costs and buys:

* link overhead: link wall / unsharded wall (the N=1 shard phase, one cold
  build of everything): what every sharded build pays after its shards;
* balance: slowest shard / mean shard compile seconds, next to the physical
  bound max(longest TU, mean) / mean that no partition can beat.

Each rule in ``--rules`` is built on its own copy of the recipe
(``sharding.rule`` set there); ``cost`` only where the recipe has a
``costs.json``. N=1 is the same build under every rule and runs once. The
machine is shared and noisy: compare ratios from one run, not numbers across
runs.

``--scale K`` (example only) multiplies every kernel TU's weight and cost by K
on the copy (benchmarks/scaled_example.py): an nvcc-heavy build whose link
overhead says what the link's fixed costs weigh against real compile time.
Each row also splits the link's wall into phases (restore, configure, ninja,
package, finish + verify; see ``link_phases``) and checks the wheel's
``tu_values()`` against the weights it was built with. ``--kernels K`` (example only) keeps the
first K kernel TUs on the copy: ``--kernels 1 --shards 1 --rules hash`` is the smallest real run
(the smoke run of tests/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.seat import seat_log  # noqa: E402
from cuw.config.paths import Paths  # noqa: E402
from cuw.jobs.local import run_build  # noqa: E402
from cuw.config.recipe import costs_path, load_recipe  # noqa: E402
from cuw.base.settings import Settings  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaled_example import scale_example, trim_example, tu_values  # noqa: E402

SETTINGS = Settings.from_env()  # the run's, read once here: a benchmark is an entry point, like the command line

# run_build's line when a shard process ends: the shard phase is over at the last one.
SHARD_END = re.compile(r"^shard \d+/\d+: (done|FAILED)$")


def recipes_for_rule(
    recipe_key: str, rule: str, root: Path, scale: int = 1, kernels: int | None = None
) -> tuple[Path, dict[str, int]]:
    """A copy of the recipes whose ``recipe_key`` partitions by ``rule`` (the
    example's weights times ``scale``, its first ``kernels`` kernel TUs only), and
    the tu_values() its wheel must give (empty for a recipe other than the example)."""
    recipes = root / "recipes"
    if not recipes.exists():
        shutil.copytree(REPO / "recipes", recipes, symlinks=True)
        path = recipes / recipe_key / "recipe.yml"
        data = yaml.safe_load(path.read_text())
        data.setdefault("sharding", {})["rule"] = rule
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        if kernels is not None:
            trim_example(recipes / recipe_key, kernels, REPO / "recipes")
        if scale > 1:
            scale_example(recipes / recipe_key, scale, REPO / "recipes")
    # example_source builds the example's own package (source.path ../example/package)
    return recipes, tu_values(recipes / "example") if recipe_key in ("example", "example_source") else {}


def wheel_tu_values(wheel: Path, where: Path) -> dict[str, int]:
    """The wheel's cuw_example.tu_values(), installed into a fresh folder, no GPU needed."""
    target = where / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    code = "import json, cuw_example as m; print(json.dumps(m.tu_values()))"
    env = {
        "PYTHONPATH": str(target),
        "CUDA_VISIBLE_DEVICES": "",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _mtime(pattern: str, folder: Path) -> float | None:
    found = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1].stat().st_mtime if found else None


def link_phases(link_root: Path, shard_end: float, restored: float, end: float) -> dict[str, float | None]:
    """Where the link's wall goes, in seconds, from wall-clock marks and the
    link tree's file times (all time.time()):

    restore: last shard done -> "link: restored" (copy and patch the source,
    prepare the cache, unpack and merge the shard archives);
    pip_start: -> scikit-build-core writes its build folder (pip starts,
    reads the project, asks the backend for metadata);
    cmake_configure: -> build.ninja written (CMake configure and generate), of
    which ``probes``: CMakeSystem.cmake -> the last CMakeDetermineCompilerABI
    binary (compiler identification and ABI probes, compiled for real, never cached);
    ninja: -> the library linked (every compile replayed as a cache hit, then
    the link itself, ``link_edge`` from .ninja_log);
    package: -> wheel written (cmake install, wheel zip, pip exits);
    finish_verify: -> run_link returns (link gate, retag, auditwheel repair,
    the verify gate).
    """
    build = link_root / "build"
    started = _mtime(".skbuild-info.json", build)
    generated = _mtime("build.ninja", build)
    system = _mtime("CMakeFiles/*/CMakeSystem.cmake", build)
    identified = _mtime("CMakeFiles/*/CMakeDetermineCompilerABI_*.bin", build)
    linked = _mtime("**/_kernels*.so", build) or _mtime("**/*.so", build)
    wheel = _mtime("wheel/*.whl", link_root)
    edge = None
    ninja_log = build / ".ninja_log"
    if ninja_log.is_file():
        # "start_ms end_ms mtime target hash": the slowest edge whose target is a shared library.
        rows = [line.split("\t") for line in ninja_log.read_text().splitlines() if not line.startswith("#")]
        links = [(int(r[1]) - int(r[0])) / 1000 for r in rows if len(r) >= 4 and ".so" in r[3]]
        edge = max(links, default=None)

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 1) if a is not None and b is not None else None

    return {
        "restore_s": span(shard_end, restored),
        "pip_start_s": span(restored, started),
        "cmake_configure_s": span(started, generated),
        "probes_s": span(system, identified),
        "ninja_s": span(generated, linked),
        "link_edge_s": edge,
        "package_s": span(linked, wheel),
        "finish_verify_s": span(wheel, end),
    }


def balance(per_shard: list[float], per_tu: list[float]) -> tuple[float, float]:
    """(slowest / mean shard, max(longest TU, mean) / mean): the partition and its bound."""
    mean = sum(per_shard) / max(len(per_shard), 1)
    if mean <= 0:
        return 0.0, 0.0
    return max(per_shard) / mean, max(max(per_tu, default=0.0), mean) / mean


def measure(recipe_key: str, n: int, root: Path, rule: str = "hash", scale: int = 1, kernels: int | None = None) -> dict:
    recipes, expected = recipes_for_rule(recipe_key, rule, root, scale, kernels)
    recipe = load_recipe(recipe_key, recipes)
    paths = Paths(
        work=root / f"n{n}" / "work",
        artifacts=root / f"n{n}" / "artifacts",
        dist=root / f"n{n}" / "dist",
    )
    # Wall-clock marks (time.time(), comparable with file mtimes for link_phases).
    shard_end, restored = [0.0], [0.0]

    def note(msg: str) -> None:
        if SHARD_END.match(msg):
            shard_end[0] = time.time()
        elif msg.startswith("link: restored"):
            restored[0] = time.time()

    start = time.time()
    outcomes, link = run_build(recipe, paths, count=n, recipes_dir=recipes, progress=note, settings=SETTINGS)
    end = time.time()
    shard_seconds, per_shard, per_tu, compiled = 0.0, [], [], 0
    for log in sorted(paths.work.glob("*/shard-*/logs/seat.jsonl")):
        entries = [e for e in seat_log.read_log(log) if e.get("action") == "compiled"]
        seconds = sum(e.get("seconds", 0.0) for e in entries)
        shard_seconds += seconds
        per_shard.append(seconds)
        per_tu += [e.get("seconds", 0.0) for e in entries]
        compiled += len(entries)  # CUDA and host TUs: a source filter's rest is partitioned by the seat too
    link_log = next(paths.work.glob("*/link/logs/seat.jsonl"))
    replayed = [e for e in seat_log.read_log(link_log) if e.get("action") == "compiled"]
    link_seconds = sum(e.get("seconds", 0.0) for e in replayed)
    tus = len(replayed) or 1  # every TU the link replays
    shard_balance, bound = balance(per_shard, per_tu)
    tu_values_ok = None
    if expected and link.wheel:
        tu_values_ok = wheel_tu_values(link.wheel, root / f"n{n}") == expected
    phases = link_phases(link_log.parent.parent, shard_end[0], restored[0], end)
    return {
        "rule": rule,
        "shards": n,
        "scale": scale,
        "ok": bool(link.ok and all(outcomes)) and tu_values_ok is not False,
        "tu_values_ok": tu_values_ok,
        "wall_s": round(end - start, 1),
        "shard_wall_s": round(shard_end[0] - start, 1),
        "link_wall_s": round(end - shard_end[0], 1),
        "shard_compile_cpu_s": round(shard_seconds, 1),
        "slowest_shard_compile_s": round(max(per_shard, default=0.0), 1),
        "link_compile_s": round(link_seconds, 2),
        "work_conservation": round(compiled / tus, 3),
        "link_misses": link.verdict.facts.get("misses"),
        "balance": round(shard_balance, 3),
        "bound": round(bound, 3),
        "link_phases": phases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="example")
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument(
        "--rules",
        default="hash,cost",
        help="partition rules (cost only with a costs.json)",
    )
    parser.add_argument(
        "--scale",
        type=int,
        default=1,
        help="example only: every kernel weight (and cost) times K",
    )
    parser.add_argument(
        "--kernels",
        type=int,
        default=None,
        help="example only: keep its first K kernel TUs (the smallest real build: --kernels 1 --shards 1)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.scale != 1 and args.recipe != "example":
        parser.error("--scale rewrites the example's kernel weights; use it with --recipe example")
    if args.kernels is not None and args.recipe != "example":
        parser.error("--kernels trims the example's kernel TUs; use it with --recipe example")
    if args.scale < 1:
        parser.error(f"--scale must be at least 1, got {args.scale}")
    counts = [int(x) for x in args.shards.split(",")]
    has_costs = costs_path(REPO / "recipes" / args.recipe).is_file()
    # sorted needs the full set: the source filter's files, or a cost table
    source_filter = load_recipe(args.recipe, REPO / "recipes").sharding.filter == "source"
    rules = [r for r in args.rules.split(",") if r == "hash" or has_costs or (r == "sorted" and source_filter)]
    with tempfile.TemporaryDirectory(prefix="cuw-bench-") as tmp:
        rows = []
        for i, rule in enumerate(rules):
            # N=1 is one whole build whatever the rule: measured once, under the first rule.
            rows += [measure(args.recipe, n, Path(tmp) / rule, rule, args.scale, args.kernels) for n in counts if n > 1 or i == 0]
    base = rows[0]
    for row in rows:
        row["slowest_shard_vs_first"] = round(
            row["slowest_shard_compile_s"] / max(base["slowest_shard_compile_s"], 1e-9),
            3,
        )
        row["cpu_vs_first"] = round(row["shard_compile_cpu_s"] / max(base["shard_compile_cpu_s"], 1e-9), 3)
        # The first row is the unsharded build (N=1 when --shards starts with 1).
        row["link_overhead"] = round(row["link_wall_s"] / max(base["shard_wall_s"], 1e-9), 3)
    cols = [
        "rule",
        "scale",
        "shards",
        "ok",
        "tu_values_ok",
        "wall_s",
        "shard_wall_s",
        "link_wall_s",
        "link_overhead",
        "shard_compile_cpu_s",
        "slowest_shard_compile_s",
        "balance",
        "bound",
        "link_compile_s",
        "work_conservation",
        "link_misses",
        "slowest_shard_vs_first",
        "cpu_vs_first",
    ]
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    phase_cols = list(rows[0]["link_phases"])
    print("\nrule | shards | link_wall_s | " + " | ".join(phase_cols))
    for row in rows:
        print(
            " | ".join(
                [row["rule"], str(row["shards"]), str(row["link_wall_s"])] + [str(row["link_phases"][c]) for c in phase_cols]
            )
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["ok"] and r["work_conservation"] == 1.0 and r["link_misses"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
