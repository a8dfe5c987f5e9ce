"""Where a verdict goes: one line on stderr, a JSON report, the GitHub step summary."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from cuw.base import records
from cuw.base.errors import CuwError, OutputError
from cuw.gates.conditions import Verdict


def say(message: str) -> None:
    print(f"cuw: {message}", file=sys.stderr, flush=True)


def write(verdict: Verdict, path: Path, context: dict[str, Any]) -> Path:
    """The report, written beside ``path`` and renamed into place (no reader sees half of it)."""
    from cuw.base.files import write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"report {path}: cannot create {path.parent} ({exc.strerror or exc})") from None
    body = {
        "gate": verdict.gate,
        "ok": verdict.ok,
        "reasons": verdict.reasons,
        "facts": verdict.facts,
        "state": "finished",
        "schema": records.REPORTS[verdict.gate].SCHEMA,
        **context,
    }
    text = json.dumps(body, indent=2, sort_keys=True, default=str) + "\n"
    records.job_report(json.loads(text), str(path))  # never a report its reader would refuse
    written = write_text(path, text, option="report")
    try:
        written.chmod(0o644)  # the temp file it was renamed from was made private (0600)
    except OSError:
        pass
    return written


def begin(gate: str, path: Path, context: dict[str, Any]) -> Path:
    """Before a job that ends by writing ``path``: a report that says it is running, not ok.

    A run killed before it finishes leaves this one, never the previous run's
    "ok" standing for a result this run was about to replace. The previous
    verdict stays readable under ``previous``.
    """
    previous = None
    try:
        old = records.read_report(path, gate)
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
    marker = Verdict(gate, False, [reason])
    body = {**context, "state": "running", "started_at": started, "pid": os.getpid(), "previous": previous}
    written = write(marker, path, body)
    return written


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
