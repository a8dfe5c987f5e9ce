"""The planner held to measurements: predicted against measured CPU seconds per shard of a finished cell.

    python benchmarks/planner_vs_measured.py FOLDER (--costs COSTS.json | --recipe NAME)
        [--tolerance 0.15] [--json out.json]

FOLDER holds a finished cell's shard reports (``cuw-shard-*.report.json``) and, where the work
folders are not at hand (a CI cell's artifacts), its shard archives (``cuw-shard-*.tar``), whose
manifests carry each compile with its CPU seconds and peak; searched recursively. Per shard, the
compiles come from its seat log (``logs/seat.jsonl`` beside the report's build log) when that is
there, else from its archive's timeline. Cache hits are left out on both sides: compare a cold cell.

The prediction is the planner's own (:func:`cuw.tools.plan_shards.predict_shards`) over the TUs
each shard compiled, from the cost table: CPU seconds are the measure it is held to (within
``--tolerance``, 15 %), as they are far less sensitive to the machine's load than wall time. A table
learned on another machine (or on this one at another time: a shared machine's speed drifts) is off
by that speed: the cell's measured over the table's CPU seconds (the machine factor) is printed, with
the per-shard ratios after it, which are the partition's own error. Wall
is stated separately: the plan's model (its compiles in one slot, plus what a shard costs beside
them) against the report's build seconds. The peak column is the table's largest one-TU peak of the
slice against the largest one-compile peak measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.base.errors import CuwError, InputError  # noqa: E402
from cuw.base.files import check_destination, write_text  # noqa: E402
from cuw.config.recipe import check_recipe_name  # noqa: E402
from cuw.base.records import SeatLogEntry, read_shard_report  # noqa: E402
from cuw.base.shard_spec import spec_numbers  # noqa: E402
from cuw.jobs.archive import SUFFIX, read_manifest  # noqa: E402
from cuw.partition.costs import CostTable, load  # noqa: E402
from cuw.seat import seat_log  # noqa: E402
from cuw.tools.plan_shards import predict_shards  # noqa: E402


@dataclass
class Measured:
    index: int
    count: int
    compiles: list[SeatLogEntry]
    """Its cold compiles (seat-log entries), hits left out."""
    build_s: Optional[float]
    source: str


def _cold(entries: list[SeatLogEntry]) -> list[SeatLogEntry]:
    return [e for e in entries if e.is_compile and e.key is not None and e.rc in (0, None) and e.outcome != "hit"]


def _from_report(path: Path) -> Optional[Measured]:
    report = read_shard_report(path)
    numbers = spec_numbers(report.shard) if report.ok and report.shard else None
    if numbers is None:
        return None
    index, count = numbers
    seat = Path(report.build_log).parent / "seat.jsonl" if report.build_log is not None else None
    if seat is not None and seat.is_file():
        return Measured(index, count, _cold(seat_log.read_entries(seat)), report.build_s, str(seat))
    archive = path.with_name(path.name.removesuffix(".report.json") + SUFFIX)
    if not archive.is_file():
        print(f"{path}: neither its seat log ({seat}) nor its archive is here; left out", file=sys.stderr)
        return None
    manifest = read_manifest(archive)
    entries = [e for e in map(seat_log.timeline_entry, manifest.timeline) if e is not None]
    return Measured(index, count, _cold(entries), report.build_s, str(archive))


def gather(folder: Path) -> list[Measured]:
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (give a finished cell's folder of shard reports)")
    shards = [m for m in map(_from_report, sorted(folder.rglob("cuw-shard-*.report.json"))) if m is not None]
    counts = {m.count for m in shards}
    if len(counts) > 1:
        raise CuwError(f"{folder}: shard reports of several shard counts ({sorted(counts)}): give one cell's folder")
    seen: dict[int, str] = {}
    for m in shards:
        if m.index in seen:
            raise InputError(f"{folder}: shard {m.index}/{m.count} twice ({seen[m.index]}, {m.source}): give one cell's folder")
        seen[m.index] = m.source
    if not shards:
        raise CuwError(f"{folder}: no passing shard report (cuw-shard-*.report.json) in it")
    return sorted(shards, key=lambda m: m.index)


def _ratio(predicted: Optional[float], measured: Optional[float]) -> Optional[float]:
    return None if predicted is None or not measured else predicted / measured


def machine_factor(table: CostTable, shards: list[Measured]) -> Optional[float]:
    """Over the TUs the table has CPU seconds for, their measured CPU seconds / the table's: how much
    faster (< 1) or slower this machine compiled them than the one the table was learned on."""
    pairs = [(e.cpu_s, table.cpu[str(e.key)]) for m in shards for e in m.compiles if e.cpu_s and table.cpu.get(str(e.key))]
    return round(sum(a for a, _ in pairs) / sum(b for _, b in pairs), 3) if pairs else None


def compare(table: CostTable, shards: list[Measured], tolerance: float) -> list[dict]:
    count = shards[0].count
    factor = machine_factor(table, shards)
    owners = {str(e.key): m.index for m in shards for e in m.compiles}
    predicted = {p.index: p for p in predict_shards(table, owners, count, None, None)}
    rows = []
    for m in shards:
        p = predicted[m.index]
        cpu = [e.cpu_s for e in m.compiles if e.cpu_s is not None]
        peaks = [e.peak_mb for e in m.compiles if e.peak_mb is not None]
        cpu_measured = round(sum(cpu), 3) if cpu else None
        keys = {str(e.key) for e in m.compiles}
        cpu_ratio, wall_ratio = _ratio(p.cpu_s, cpu_measured), _ratio(p.wall_s, m.build_s)
        rows.append(
            {
                "shard": f"{m.index}/{count}",
                "tus": len(keys),
                "untabled_tus": len(keys - set(table.costs)),
                "cpu_predicted_s": p.cpu_s,
                "cpu_measured_s": cpu_measured,
                "cpu_ratio": None if cpu_ratio is None else round(cpu_ratio, 3),
                "cpu_within": None if cpu_ratio is None else abs(cpu_ratio - 1) <= tolerance,
                "machine_factor": factor,
                "cpu_ratio_after_factor": None if cpu_ratio is None or factor is None else round(cpu_ratio * factor, 3),
                "wall_predicted_s": p.wall_s,
                "wall_measured_s": m.build_s,
                "wall_ratio": None if wall_ratio is None else round(wall_ratio, 3),
                "wall_within": None if wall_ratio is None else abs(wall_ratio - 1) <= tolerance,
                "peak_predicted_mb": max((table.peaks[k] for k in keys if k in table.peaks), default=None),
                "peak_measured_mb": max(peaks, default=None),
                "from": m.source,
            }
        )
    return rows


def _cell(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def render(rows: list[dict], tolerance: float) -> str:
    pct = f"{tolerance:.0%}"
    lines = [f"CPU seconds per shard (the measure the planner is held to, within {pct}):", ""]
    lines.append(f"{'shard':>7} {'TUs':>4} {'untabled':>8} {'predicted':>10} {'measured':>10} {'ratio':>6} {'within':>6}")
    for r in rows:
        lines.append(
            f"{r['shard']:>7} {r['tus']:>4} {r['untabled_tus']:>8} {_cell(r['cpu_predicted_s'], '.1f'):>10} "
            f"{_cell(r['cpu_measured_s'], '.1f'):>10} {_cell(r['cpu_ratio'], '.3f'):>6} {_cell(r['cpu_within']):>6}"
        )
    judged = [r for r in rows if r["cpu_within"] is not None]
    lines += ["", f"{sum(r['cpu_within'] for r in judged)} of {len(judged)} shards within {pct} in CPU seconds"]
    factor = rows[0]["machine_factor"] if rows else None
    if factor is not None:
        scaled = [r["cpu_ratio_after_factor"] for r in judged]
        inside = sum(abs(v - 1) <= tolerance for v in scaled)
        lines.append(
            f"machine factor (the cell's measured / table CPU seconds, TU by TU): {factor:.3f}; with the table scaled by it, "
            f"{inside} of {len(scaled)} shards within {pct} (ratios {min(scaled):.3f} to {max(scaled):.3f}): "
            "a factor far from 1: the table was learned on a machine, or at a time, that compiled faster or slower"
        )
    lines.append("")
    lines.append("Wall seconds per shard (the plan's model: compiles in one slot + beside; measured: the build):")
    lines += [
        "",
        f"{'shard':>7} {'predicted':>10} {'measured':>10} {'ratio':>6} {'within':>6} {'peak pred MB':>12} {'peak meas MB':>12}",
    ]
    for r in rows:
        lines.append(
            f"{r['shard']:>7} {_cell(r['wall_predicted_s'], '.1f'):>10} {_cell(r['wall_measured_s'], '.1f'):>10} "
            f"{_cell(r['wall_ratio'], '.3f'):>6} {_cell(r['wall_within']):>6} "
            f"{_cell(r['peak_predicted_mb'], '.0f'):>12} {_cell(r['peak_measured_mb'], '.0f'):>12}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a finished cell's shard reports (and archives or work folders)")
    ap.add_argument("--costs", type=Path, default=None, help="the cost table the prediction uses")
    ap.add_argument("--recipe", default=None, help="instead of --costs: recipes/<NAME>/costs.json")
    ap.add_argument("--tolerance", type=float, default=0.15, help="how far a ratio may be from 1 (default: 0.15)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    if (args.costs is None) == (args.recipe is None):
        ap.error("give --costs COSTS.json or --recipe NAME")
    if not 0 < args.tolerance < 1:
        ap.error(f"--tolerance {args.tolerance}: a fraction between 0 and 1 (0.15 is 15 %)")
    try:
        if args.json is not None:
            check_destination(args.json, "--json")
        if args.recipe is not None:
            check_recipe_name(args.recipe)
        table = load(args.costs or REPO / "recipes" / args.recipe / "costs.json")
        if not table.cpu:
            print(
                f"{table.path}: no cpu_s in the table (recorded before the seat measured CPU): record it again", file=sys.stderr
            )
        rows = compare(table, gather(args.folder), args.tolerance)
    except CuwError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(rows, args.tolerance))
    if args.json:
        try:
            write_text(args.json, json.dumps(rows, indent=2) + "\n", "--json")
        except CuwError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
