"""Where a verdict goes: one line on stderr, a JSON report, the GitHub step summary."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from .gates import Verdict


def say(message: str) -> None:
    print(f"cuw: {message}", file=sys.stderr, flush=True)


def write(verdict: Verdict, path: Path, context: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"gate": verdict.gate, "ok": verdict.ok, "reasons": verdict.reasons, "facts": verdict.facts, **context}
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path


def append_summary(markdown: str) -> None:
    """Appends to ``$GITHUB_STEP_SUMMARY`` when it is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(markdown.rstrip("\n") + "\n\n")


def step_summary(title: str, verdict: Verdict) -> None:
    """A gate verdict as a markdown table in the GitHub step summary."""
    rows = [f"### {title}: {'✅ pass' if verdict.ok else '❌ FAIL'}", "", "| | |", "|---|---|"]
    rows += [f"| {key} | {value} |" for key, value in verdict.facts.items()]
    rows += [f"| reason | {reason} |" for reason in verdict.reasons]
    append_summary("\n".join(rows))
