"""The cache handoff: the forge's pack/restore throughput, on synthetic caches or a real shard's.

    python benchmarks/handoff.py --synthetic [--cache-mb 1200] [--small 3000] [--repeat 2] [--json out.json]
    python benchmarks/handoff.py [--recipe example] [--shard 1/1] [--tools ccache,sccache]
                                 [--repeat 3] [--kernels K] [--json out.json]

``--synthetic`` writes two caches shaped like ccache's (two-level ``x/y/`` folders,
incompressible ``os.urandom`` content, as ccache entries are already compressed):
``large``, entries of 0.2-40 MB (log-uniform) up to ``--cache-mb`` (~180 files for
1.2 GB), and ``small``, ``--small`` entries of 1-64 kB. It times side by side, in
alternating order, :func:`cuw.jobs.archive.pack` against a plain ``tar -cf`` of the
same folder and the link's restore, :func:`cuw.jobs.archive.unpack` (one pass: every
byte hashed against the digest recorded at pack time as it is extracted) +
:func:`cuw.jobs.archive.merge_into`, against ``tar -xf`` (which checks nothing), and
prints seconds and MB/s (median of ``--repeat``) and the forge's throughput over
tar's against the goal (at least tar's for the large restore, half of tar's otherwise).
Neither syncs to disk (the forge's atomicity is its rename). Fails when the forge misses the goal or a restore loses a file.

Without ``--synthetic``, for each cache tool it runs one real compile shard (:func:`cuw.jobs.shard.run_shard`,
cold cache), then times the forge's own handoff functions on that shard's
cache: :func:`cuw.jobs.archive.pack` (what a shard does last) and
:func:`cuw.jobs.archive.unpack` + :func:`cuw.jobs.archive.merge_into` into a fresh cache
(what the link does first). It prints the cache size (the entry files a shard
hands over), how many of its files are ccache's per-folder ``stats`` counters,
the archive size and their ratio, and pack and restore MB/s (cache bytes per
second, median of ``--repeat``) and restore files/s: a small cache is many small
files, so its restore is paid per file. A restore that does not give back
every entry file fails the run. Throughput on a shared machine is noisy:
compare tools within one run. ``--kernels K`` (example only) builds a copy of the example with its
first K kernel TUs; ``--synthetic --cache-mb 1 --small 20 --repeat 1`` and ``--tools ccache
--kernels 1 --repeat 1`` are the smoke runs of tests/test_benchmarks.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.jobs import archive  # noqa: E402
from cuw.base.files import sha256_of  # noqa: E402
from cuw.jobs.fingerprint import FIELDS as FINGERPRINT_FIELDS  # noqa: E402
from cuw.toolchain.cache import Ccache, open_cache, tool_class  # noqa: E402
from cuw.config.cell import Cell, local_cell  # noqa: E402
from cuw.partition.rules import parse_shard_spec  # noqa: E402
from cuw.config.paths import Paths  # noqa: E402
from cuw.jobs.shard import run_shard  # noqa: E402
from cuw.config.policy import CacheChoice  # noqa: E402
from cuw.config.recipe import load_recipe  # noqa: E402
from cuw.toolchain.toolkit import find_toolkit  # noqa: E402
from cuw.jobs.workspace import Workspace  # noqa: E402
from cuw.base.settings import Settings  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaled_example import trim_example  # noqa: E402

SETTINGS = Settings.from_env()  # the run's, read once here: a benchmark is an entry point, like the command line

MB = 1e6
GOAL = 0.5  # the forge's throughput over plain tar's: pack, and the restore of many small files
RESTORE_GOAL = 1.0  # the large case's restore, digest check included: at least plain tar's


def goal(kind: str, step: str) -> float:
    return RESTORE_GOAL if (kind, step) == ("large", "restore") else GOAL


def write_synthetic(root: Path, sizes: list[int], seed: int) -> int:
    """Entries named like ccache's (``<h0>/<h1>/<rest>R``, a ``stats`` per top folder); returns bytes written."""
    rng = random.Random(seed)
    total = 0
    for size in sizes:
        digest = "%032x" % rng.getrandbits(128)
        path = root / digest[0] / digest[1] / f"{digest[2:]}R"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            left = size
            while left:
                chunk = os.urandom(min(left, 4 << 20))
                fh.write(chunk)
                left -= len(chunk)
        if not (path.parent.parent / "stats").exists():
            (path.parent.parent / "stats").write_bytes(b"0\n" * 40)
            total += 80
        total += size
    return total


def synthetic_sizes(kind: str, cache_mb: int, small: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    if kind == "small":
        return [rng.randint(1_000, 64_000) for _ in range(small)]
    sizes: list[int] = []
    while sum(sizes) < cache_mb * MB:
        sizes.append(int(200_000 * 200 ** rng.random()))  # log-uniform over 0.2-40 MB
    return sizes


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _tree(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def bench_synthetic(kind: str, cache_mb: int, small: int, repeat: int, root: Path) -> dict:
    cache_dir = root / "ccache"
    cache_bytes = write_synthetic(cache_dir, synthetic_sizes(kind, cache_mb, small, seed=7), seed=7)
    job_cache = Ccache(cache_dir, root)
    expected = _tree(cache_dir)
    cell = Cell("example", "linux", "3.11", "13.0", None)
    manifest = archive.Manifest(
        format=archive.FORMAT,
        forge_version="bench",
        cell=cell.to_dict(),
        shard_index=1,
        shard_count=1,
        filter="seat",
        cache_tool="ccache",
        cache_version=Ccache.pinned,
        cache_remote=None,
        owned=[],
        compiled=[],
        counters={},
        fingerprint=dict.fromkeys(FINGERPRINT_FIELDS, "0" * 16),  # every field, as a shard's; the link is not run here
    )
    forge_archive, tar_archive = root / f"forge{archive.SUFFIX}", root / "plain.tar"
    recorded = ""  # the digest the shard records when it packs: the link's restore checks every byte against it
    times: dict[str, list[float]] = {"forge_pack": [], "tar_pack": [], "forge_restore": [], "tar_restore": []}
    complete = True

    def forge_pack() -> None:
        nonlocal recorded
        times["forge_pack"].append(_timed(lambda: archive.pack(job_cache, manifest, forge_archive)))
        recorded = sha256_of(forge_archive)

    def tar_pack() -> None:
        cmd = ["tar", "-cf", str(tar_archive), "-C", str(cache_dir), "."]
        times["tar_pack"].append(_timed(lambda: subprocess.run(cmd, check=True)))

    def forge_restore() -> None:
        nonlocal complete
        staging, merged = root / "staging", root / "merged"
        staging.mkdir()
        restore = lambda: archive.merge_into([archive.unpack(forge_archive, staging, recorded, "1/1")], merged)  # noqa: E731
        times["forge_restore"].append(_timed(restore))
        complete = complete and _tree(merged) == expected
        shutil.rmtree(staging)
        shutil.rmtree(merged)

    def tar_restore() -> None:
        nonlocal complete
        out = root / "untarred"
        out.mkdir()
        cmd = ["tar", "-xf", str(tar_archive), "-C", str(out)]
        times["tar_restore"].append(_timed(lambda: subprocess.run(cmd, check=True)))
        complete = complete and _tree(out) == expected
        shutil.rmtree(out)

    for i in range(repeat):  # alternate who goes first: the second run finds a warmer page cache
        for step in [forge_pack, tar_pack] if i % 2 else [tar_pack, forge_pack]:
            step()
        for step in [forge_restore, tar_restore] if i % 2 else [tar_restore, forge_restore]:
            step()
    med = {k: statistics.median(v) for k, v in times.items()}
    mb = cache_bytes / MB
    row: dict = {
        "case": kind,
        "files": len(expected),
        "cache_mb": round(mb, 1),
        "archive_mb": round(forge_archive.stat().st_size / MB, 1),
    }
    for step in ("pack", "restore"):
        for who in ("forge", "tar"):
            row[f"{who}_{step}_s"] = round(med[f"{who}_{step}"], 3)
            row[f"{who}_{step}_mb_s"] = round(mb / med[f"{who}_{step}"], 1)
        row[f"{step}_ratio"] = round(med[f"tar_{step}"] / med[f"forge_{step}"], 2)
        row[f"{step}_goal"] = goal(kind, step)
        row[f"{step}_meets_goal"] = row[f"{step}_ratio"] >= goal(kind, step)
    row["restore_complete"] = complete
    return row


def synthetic_main(args: argparse.Namespace) -> int:
    rows = []
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    for kind in ("large", "small"):
        with tempfile.TemporaryDirectory(prefix=f"cuw-handoff-{kind}-", dir=args.dir) as tmp:
            rows.append(bench_synthetic(kind, args.cache_mb, args.small, args.repeat, Path(tmp)))
    print(f"forge over tar (median of {args.repeat}, same run, alternating order; restore includes the digest check)")
    for row in rows:
        print(f"{row['case']}: {row['files']} files, {row['cache_mb']} MB (archive {row['archive_mb']} MB)")
        for step, verb in (("pack", "tar -cf"), ("restore", "tar -xf")):
            ok = f"goal {row[f'{step}_goal']}: " + ("ok" if row[f"{step}_meets_goal"] else "BELOW GOAL")
            print(
                f"  {step:7}  forge {row[f'forge_{step}_s']:7.3f} s {row[f'forge_{step}_mb_s']:7.1f} MB/s   "
                f"{verb} {row[f'tar_{step}_s']:7.3f} s {row[f'tar_{step}_mb_s']:7.1f} MB/s   "
                f"ratio {row[f'{step}_ratio']:.2f} ({ok})"
            )
        if not row["restore_complete"]:
            print("  a restore did not give back every file")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    ok = all(r["restore_complete"] and r["pack_meets_goal"] and r["restore_meets_goal"] for r in rows)
    return 0 if ok else 1


def measure(recipe_key: str, shard: str, tool: str, repeat: int, root: Path, kernels: Optional[int] = None) -> dict:
    recipes = REPO / "recipes"
    if kernels is not None:  # a copy of the example with its first K kernel TUs only
        recipes = root / "recipes"
        shutil.copytree(REPO / "recipes", recipes, symlinks=True)
        trim_example(recipes / recipe_key, kernels, REPO / "recipes")
    recipe = load_recipe(recipe_key, recipes)
    spec = parse_shard_spec(shard)
    paths = Paths(work=root / "work", artifacts=root / "artifacts", dist=root / "dist")
    started = time.monotonic()
    result = run_shard(recipe, spec, paths, progress=None, cache=CacheChoice(tool, None), settings=SETTINGS)
    build_s = time.monotonic() - started
    if result.archive is None:
        raise SystemExit(f"{tool}: shard {spec} failed its gate ({result.verdict.line}); see {result.report}")
    cell = local_cell(recipe, find_toolkit(homes=SETTINGS.homes))
    ws = Workspace.for_job(paths.work / cell.id, f"shard-{spec.tag}", tool_class(tool).shared_tree)
    job_cache = open_cache(tool, ws.cache_dir, ws.tree, settings=SETTINGS)
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
    ap.add_argument(
        "--kernels", type=int, default=None, help="example only: keep its first K kernel TUs (the smallest real run: 1)"
    )
    ap.add_argument("--synthetic", action="store_true", help="time synthetic ccache-shaped caches against plain tar")
    ap.add_argument("--cache-mb", type=int, default=1200, help="--synthetic: size of the large case (default: 1200)")
    ap.add_argument("--small", type=int, default=3000, help="--synthetic: files in the small case (default: 3000)")
    ap.add_argument("--dir", type=Path, default=None, help="--synthetic: where to write the caches (default: TMPDIR)")
    args = ap.parse_args()
    if args.synthetic:
        return synthetic_main(args)
    if args.kernels is not None and args.recipe != "example":
        ap.error("--kernels trims the example's kernel TUs; use it with --recipe example")
    rows = []
    for tool in args.tools.split(","):
        with tempfile.TemporaryDirectory(prefix=f"cuw-handoff-{tool}-") as tmp:
            rows.append(measure(args.recipe, args.shard, tool, args.repeat, Path(tmp), args.kernels))
    cols = [
        "tool",
        "shard",
        "build_s",
        "entry_files",
        "stats_files",
        "cache_mb",
        "archive_mb",
        "archive_over_cache",
        "pack_s",
        "pack_mb_s",
        "restore_s",
        "restore_mb_s",
        "restore_files_s",
        "restore_complete",
    ]
    print(" | ".join(cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["restore_complete"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
