"""How many compiles a shard runs at once: as many as its runner's memory holds.

One nvcc compile can take gigabytes (one natten TU's cicc peaked at 11.5 GB, a flash-attn TU's
at 5.8 GB) and GitHub's hosted runner has 16 GB: one job per core swaps it, or the kernel kills a
compile. With per-TU peaks in the recipe's cost table (``peak_mb``, learned from the seat log),
the shard takes the largest job count ``k`` up to its cores whose ``k`` largest peaks of its
slice sum within the runner's memory less a headroom (the lane's runner size is policy:
``runners`` in recipes/defaults.yml). A recipe's ``max_jobs`` pins the count instead; a slice
without a measured peak, or a lane without a runner size, keeps one job per core. The shard
job and ``cuw plan`` both ask :func:`choose_jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from cuw.config.policy import Runner
from cuw.partition.costs import CostTable


@dataclass(frozen=True)
class JobChoice:
    jobs: int
    peak_mb: Optional[float]
    """The predicted peak at ``jobs``: the sum of the ``jobs`` largest per-TU peaks (None: unmeasured)."""
    why: str
    """How the count was chosen, for the shard's start line and the plan."""


def fitting_jobs(peaks_mb: Sequence[float], cores: int, budget_mb: float) -> int:
    """The largest ``k`` in 1..cores whose ``k`` largest peaks sum within ``budget_mb``; 1 when not
    even the largest fits (a build needs one job). Fewer peaks than ``k``: all of them count."""
    top = sorted(peaks_mb, reverse=True)
    jobs = 1
    for k in range(2, max(1, cores) + 1):
        if sum(top[:k]) > budget_mb:
            break
        jobs = k
    return jobs


def predicted_peak(peaks_mb: Sequence[float], jobs: int) -> float:
    """What ``jobs`` compiles at once may hold at worst: the ``jobs`` largest peaks together."""
    return sum(sorted(peaks_mb, reverse=True)[:jobs])


def slice_peaks(table: Optional[CostTable], keys: Iterable[str]) -> list[float]:
    """The measured peaks of a slice's TUs (those the table has one for)."""
    if table is None:
        return []
    return [table.peaks[k] for k in keys if k in table.peaks]


def choose_jobs(peaks_mb: Sequence[float], cores: int, runner: Optional[Runner], pinned: Optional[int] = None) -> JobChoice:
    """A shard's parallel compile jobs: ``cores`` capped by the recipe's ``pinned`` max_jobs, else by
    what the runner's memory holds of the slice's ``peaks_mb``."""
    cores = max(1, cores)
    if pinned:
        jobs = min(cores, pinned)
        return JobChoice(jobs, predicted_peak(peaks_mb, jobs) if peaks_mb else None, f"recipe max_jobs {pinned}")
    if runner is None:
        return JobChoice(cores, None, "one per core (no runner size for this lane in the policy)")
    if not peaks_mb:
        return JobChoice(cores, None, "one per core (no peak memory measured for this slice)")
    jobs = fitting_jobs(peaks_mb, cores, runner.budget_mb)
    peak = predicted_peak(peaks_mb, jobs)
    room = f"{runner.memory_gb} GB less {runner.headroom_gb} GB headroom"
    if peak > runner.budget_mb:
        why = f"the largest TU peak alone, {peak / 1024:.1f} GB, exceeds {room}"
    elif jobs < cores:
        over = predicted_peak(peaks_mb, jobs + 1)
        why = f"{cores} cores, but {jobs + 1} compiles could peak at {over / 1024:.1f} GB, over {room}"
    else:
        why = f"one per core: {jobs} compiles peak at {peak / 1024:.1f} GB at most, within {room}"
    return JobChoice(jobs, round(peak), why)
