"""The plan's shards at the checked N: per shard its predicted wall and CPU seconds, and the
parallel compile jobs its runner's memory allows with the predicted peak they imply.

CPU seconds are the measure the planner is held to (benchmarks/planner_vs_measured.py): a
shard's compile CPU varies far less with the load of the machine than its wall time, though it is
that machine's (another, or the same one at another time, compiles faster or slower). The job
count is the shard job's own choice (:func:`cuw.partition.parallel_jobs.choose_jobs`).

Wall is given twice: its compiles in one slot (the model the job cap and the recommendation use:
the table's seconds were measured one compile at a time, and compiles side by side on a runner's
cores each run slower than one alone), and in the shard's ``jobs`` slots, longest first (what the
shard would take if its compiles ran side by side at the table's seconds: a lower bound).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional

from cuw.config.policy import Runner
from cuw.partition.costs import CostTable
from cuw.partition.parallel_jobs import choose_jobs, slice_peaks


@dataclass(frozen=True)
class ShardPrediction:
    index: int
    tus: int
    wall_s: Optional[float]
    """Its compiles in one slot and what a shard costs beside them (the plan's slowest-shard model)."""
    cpu_s: Optional[float]
    """Its compiles' CPU seconds (a TU without one in the table: the table's mean); None: no CPU measured."""
    jobs: int
    peak_mb: Optional[float]
    """The predicted peak of ``jobs`` compiles at once; None: no peak measured for its slice."""
    why: str
    wall_jobs_s: Optional[float] = None
    """Its compiles in ``jobs`` slots, longest first, and what a shard costs beside them (a lower bound)."""
    disk_gb: Optional[float] = None
    """The disk a shard used (the table's ``shard.disk_gb``: the largest measured, the same for every
    shard); None: not measured."""


def in_slots(seconds: list[float], slots: int) -> float:
    """The makespan of ``seconds`` on ``slots`` parallel slots, longest first (LPT)."""
    ends = [0.0] * max(slots, 1)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(ends, ends[0] + s)
    return max(ends)


def predict_shards(
    table: Optional[CostTable], owners: dict[str, int], n: int, runner: Optional[Runner], pinned: Optional[int]
) -> list[ShardPrediction]:
    """Every shard of ``n`` with the keys ``owners`` gives it, on ``runner`` (its cores are the jobs it may run)."""
    slices: dict[int, list[str]] = {i: [] for i in range(1, n + 1)}
    for key, shard in owners.items():
        slices[shard].append(key)
    disk = table.shard.disk_gb if table is not None and table.shard else None
    out = []
    for index, keys in slices.items():
        choice = choose_jobs(slice_peaks(table, keys), runner.cores if runner else 1, runner, pinned)
        cpu = table.cpu_of(keys) if table is not None else None
        out.append(
            ShardPrediction(
                index,
                len(keys),
                None if table is None else round(table.wall_of(keys) + table.beside_s, 3),
                None if cpu is None else round(cpu, 3),
                choice.jobs,
                choice.peak_mb,
                choice.why,
                None if table is None else round(in_slots([table.seconds(k) for k in keys], choice.jobs) + table.beside_s, 3),
                disk,
            )
        )
    return out


def _gb(mb: Optional[float]) -> str:
    return "-" if mb is None else f"{mb / 1024:.1f}"


def _s(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def _disk(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def runner_line(lane: str, runner: Optional[Runner]) -> str:
    if runner is None:
        return f"lane {lane}: no runner size in the policy (runners.{lane} in defaults.yml), one job per core"
    disk = "" if runner.free_disk_gb is None else f", {runner.free_disk_gb} GB free disk"
    return f"lane {lane}'s runner: {runner.cores} cores, {runner.memory_gb} GB ({runner.headroom_gb} GB headroom){disk}"


def render_shards(shards: list[ShardPrediction], n: int, runner: str) -> list[str]:
    """The per-shard table for a terminal."""
    lines = [
        f"shards at N={n} ({runner}):",
        f"{'shard':>6} {'TUs':>5} {'wall s':>8} {'cpu s':>8} {'jobs':>4} {'in jobs s':>9} {'peak GB':>7} {'disk GB':>7}  why",
    ]
    for s in shards:
        lines.append(
            f"{s.index:>6} {s.tus:>5} {_s(s.wall_s):>8} {_s(s.cpu_s):>8} {s.jobs:>4} {_s(s.wall_jobs_s):>9} "
            f"{_gb(s.peak_mb):>7} {_disk(s.disk_gb):>7}  {s.why}"
        )
    return lines


def markdown_shards(shards: list[ShardPrediction], n: int, runner: str) -> list[str]:
    """The per-shard table in markdown."""
    lines = [
        f"Shards at N={n} ({runner}):",
        "",
        "| shard | TUs | wall s | cpu s | jobs | in jobs s | peak GB | disk GB | why |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in shards:
        cells = (s.index, s.tus, _s(s.wall_s), _s(s.cpu_s), s.jobs, _s(s.wall_jobs_s), _gb(s.peak_mb), _disk(s.disk_gb), s.why)
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def html_shards(shards: list[ShardPrediction], n: int, runner: str) -> str:
    """The per-shard table as an HTML fragment."""
    from html import escape

    names = ("shard", "TUs", "wall s", "cpu s", "jobs", "in jobs s", "peak GB", "disk GB", "why")
    head = "".join(f"<th>{h}</th>" for h in names)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(str(c))}</td>"
            for c in (
                s.index,
                s.tus,
                _s(s.wall_s),
                _s(s.cpu_s),
                s.jobs,
                _s(s.wall_jobs_s),
                _gb(s.peak_mb),
                _disk(s.disk_gb),
                s.why,
            )
        )
        + "</tr>"
        for s in shards
    )
    return f'<h2>Shards at N={n}</h2><p>{escape(runner)}</p><table class="shards"><tr>{head}</tr>{rows}</table>'
