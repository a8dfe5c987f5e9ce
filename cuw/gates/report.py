"""Where a verdict goes: one line on stderr, a JSON report, the GitHub step summary."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional, TypeVar

from cuw.base import records
from cuw.base.errors import CuwError
from cuw.gates.conditions import Verdict

R = TypeVar("R", bound=records.JobReport)


def say(message: str) -> None:
    print(f"cuw: {message}", file=sys.stderr, flush=True)


def write(verdict: Verdict, path: Path, record: records.JobReport) -> Path:
    """``record`` (what the job's report carries beside its verdict) with ``verdict`` in it, finished,
    through the reports' one writer (:func:`cuw.base.records.write_report`)."""
    return records.write_report(path, _judged(record, verdict, "finished"))


def _judged(record: R, verdict: Verdict, state: str) -> R:
    return replace(
        record, gate=verdict.gate, ok=verdict.ok, reasons=list(verdict.reasons), facts=dict(verdict.facts), state=state
    )


def begin(path: Path, record: R) -> Path:
    """Before a job that ends by writing ``path``: ``record`` saying it is running, not ok.

    A run killed before it finishes leaves this one, never the previous run's
    "ok" standing for a result this run was about to replace. The previous
    verdict stays readable under ``previous``.
    """
    previous = None
    try:
        old = records.read_report(path, record.gate)
    except CuwError:
        old = None  # none yet, or one this forge cannot read: nothing to carry over
    if old is not None and old.state == "running":
        previous = old.previous  # killed before: the last finished verdict stays the one shown
    elif old is not None:
        archive = old.archive if isinstance(old, records.ShardReport) else None
        previous = {"ok": old.ok, "state": old.state, "reasons": old.reasons, "archive": archive}
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    reason = (
        f"a run started at {started} (pid {os.getpid()}) has not finished: "
        "no result of it has been handed over; if it is gone, run it again"
    )
    marker = _judged(record, Verdict(record.gate, False, [reason]), "running")
    marker = replace(marker, started_at=started, pid=os.getpid(), previous=previous, nulls=marker.nulls | {"previous"})
    return records.write_report(path, marker)


def append_summary(markdown: str, target: Optional[str]) -> None:
    """Appends to ``target``, the run's ``$GITHUB_STEP_SUMMARY``, when it is set."""
    if target:
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(markdown.rstrip("\n") + "\n\n")
        except OSError as exc:  # the summary is a courtesy: a finished job's outcome does not hang on it
            say(f"the step summary {target} could not be written ({exc.strerror or exc}); the job's result stands")


def step_summary(title: str, verdict: Verdict, target: Optional[str]) -> None:
    """A gate verdict as a markdown table in the GitHub step summary ``target`` (when set)."""
    rows = [f"### {title}: {'✅ pass' if verdict.ok else '❌ FAIL'}", "", "| | |", "|---|---|"]
    rows += [f"| {key} | {value} |" for key, value in verdict.facts.items()]
    rows += [f"| reason | {reason} |" for reason in verdict.reasons]
    append_summary("\n".join(rows), target)
