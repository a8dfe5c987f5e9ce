"""The cache handoff after a real shard build: archive size and pack/restore throughput.

    python benchmarks/handoff.py [--recipe example] [--shard 1/1] [--tools ccache,sccache]
                                 [--repeat 3] [--json out.json]

For each cache tool it runs one real compile shard (:func:`cuw.jobs.shard.run_shard`,
cold cache), then times the forge's own handoff functions on that shard's
cache: :func:`cuw.jobs.archive.pack` (what a shard does last) and
:func:`cuw.jobs.archive.unpack` + :func:`cuw.jobs.archive.merge_into` into a fresh cache
(what the link does first). It prints the cache size (the entry files a shard
hands over), how many of its files are ccache's per-folder ``stats`` counters,
the archive size and their ratio, and pack and restore MB/s (cache bytes per
second, median of ``--repeat``) and restore files/s: a small cache is many small
files, so its restore is paid per file. A restore that does not give back
every entry file fails the run. Throughput on a shared machine is noisy:
compare tools within one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.jobs import archive  # noqa: E402
from cuw.toolchain.cache import open_cache, tool_class  # noqa: E402
from cuw.config.cell import local_cell  # noqa: E402
from cuw.partition.rules import parse_shard_spec  # noqa: E402
from cuw.config.paths import Paths# noqa: E402
from cuw.jobs.shard import run_shard# noqa: E402
from cuw.config.policy import CacheChoice  # noqa: E402
from cuw.config.recipe import load_recipe  # noqa: E402
from cuw.toolchain.toolkit import find_toolkit  # noqa: E402
from cuw.jobs.workspace import Workspace  # noqa: E402

MB = 1e6


def measure(recipe_key: str, shard: str, tool: str, repeat: int, root: Path) -> dict:
    recipe = load_recipe(recipe_key, REPO / "recipes")
    spec = parse_shard_spec(shard)
    paths = Paths(work=root / "work", artifacts=root / "artifacts", dist=root / "dist")
    started = time.monotonic()
    result = run_shard(recipe, spec, paths, progress=None, cache=CacheChoice(tool, None))
    build_s = time.monotonic() - started
    if result.archive is None:
        raise SystemExit(f"{tool}: shard {spec} failed its gate ({result.verdict.line}); see {result.report}")
    cell = local_cell(recipe, find_toolkit())
    ws = Workspace.for_job(paths.work / cell.id, f"shard-{spec.tag}", tool_class(tool).shared_tree)
    job_cache = open_cache(tool, ws.cache_dir, ws.tree)
    entries = job_cache.entry_files()
    cache_bytes = sum(p.stat().st_size for p in entries)
    manifest = archive.read_manifest(result.archive)

    pack_s, restore_s, restored_files = [], [], []
    for i in range(repeat):
        dest = root / "bench" / f"pack-{i}{archive.SUFFIX}"
        staging, merged = root / "bench" / f"staging-{i}", root / "bench" / f"merged-{i}" / "cache"
        staging.mkdir(parents=True)
        start = time.perf_counter()
        archive.pack(job_cache, manifest, dest)  # what a shard does last
        packed = time.perf_counter()
        restored_files.append(archive.merge_into([archive.unpack(dest, staging)], merged))  # what the link does first
        pack_s.append(packed - start)
        restore_s.append(time.perf_counter() - packed)
        shutil.rmtree(staging)
        shutil.rmtree(merged.parent)
        dest.unlink()
    archive_bytes = result.archive.stat().st_size
    pack, restore = statistics.median(pack_s), statistics.median(restore_s)
    return {
        "tool": tool,
        "shard": str(spec),
        "build_s": round(build_s, 1),
        "entry_files": len(entries),
        "stats_files": sum(1 for p in entries if p.name == "stats"),
        "cache_mb": round(cache_bytes / MB, 2),
        "archive_mb": round(archive_bytes / MB, 2),
        "archive_over_cache": round(archive_bytes / max(cache_bytes, 1), 3),
        "pack_s": round(pack, 3),
        "pack_mb_s": round(cache_bytes / MB / pack, 1),
        "restore_s": round(restore, 3),
        "restore_mb_s": round(cache_bytes / MB / restore, 1),
        "restore_files_s": round(len(entries) / restore),
        "restore_complete": all(n == len(entries) for n in restored_files),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="example")
    ap.add_argument("--shard", default="1/1", help="the shard to build, i/N (default 1/1: the whole cache)")
    ap.add_argument("--tools", default="ccache,sccache", help="comma-separated cache tools (default: ccache,sccache)")
    ap.add_argument("--repeat", type=int, default=3, help="pack/restore runs per tool (default: 3)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    rows = []
    for tool in args.tools.split(","):
        with tempfile.TemporaryDirectory(prefix=f"cuw-handoff-{tool}-") as tmp:
            rows.append(measure(args.recipe, args.shard, tool, args.repeat, Path(tmp)))
    cols = ["tool", "shard", "build_s", "entry_files", "stats_files", "cache_mb", "archive_mb", "archive_over_cache",
            "pack_s", "pack_mb_s", "restore_s", "restore_mb_s", "restore_files_s", "restore_complete"]  # fmt: skip
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["restore_complete"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
