"""Generates docs/cli.md, the command-line reference, from the parser (:func:`cuw.cli.parser.parser`).

``python -m cuw.cli.reference`` rewrites it; tests/test_docs.py fails when the committed file drifts,
so a verb, option, choice or default exists in the reference exactly when ``cuw`` has it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import cuw
from cuw.cli.parser import parser
from cuw.config.docs import write_pages

CLI_MD = Path(cuw.FORGE_ROOT) / "docs" / "cli.md"


def _escape(text: str) -> str:
    """Markdown table text: ``<name>`` stays visible, ``|`` and ``*`` are literal; code spans kept as written."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside backticks
        plain = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = re.sub(r"([|*])", r"\\\1", plain)
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def _verbs(top: argparse.ArgumentParser) -> tuple[dict[str, argparse.ArgumentParser], dict[str, str]]:
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices), {c.dest: c.help or "" for c in sub._choices_actions}


def _value(action: argparse.Action) -> str:
    """What the argument takes: its choices, its metavar, or nothing for a switch."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return ""
    if action.choices:
        return " \\| ".join(_code(str(c)) for c in action.choices)
    if action.metavar:
        return _code(str(action.metavar))
    return _code(action.dest.upper()) if action.option_strings else ""


def _default(action: argparse.Action) -> str:
    if action.required or action.default in (None, False, [], "") or action.default is argparse.SUPPRESS:
        return ""
    return _code(str(action.default))


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(action.dest + ("?" if action.nargs == "?" else ""))
    flags = ", ".join(_code(f) for f in action.option_strings)
    if isinstance(action, argparse._AppendAction):
        flags += " (repeatable)"
    if action.required:
        flags += " (required)"
    return flags


def _help(action: argparse.Action, elsewhere: dict[str, str]) -> str:
    """The option's help; one given none (``--recipes`` on most verbs) takes the same flag's help elsewhere."""
    text = (action.help or "").replace("%(default)s", str(action.default))
    if not text and action.option_strings:
        text = elsewhere.get(action.option_strings[-1], "")
    return _escape(" ".join(text.split()))


def _helps(verbs: dict[str, argparse.ArgumentParser]) -> dict[str, str]:
    """Each flag's first help text across the verbs."""
    found: dict[str, str] = {}
    for p in verbs.values():
        for action in p._actions:
            if action.help and action.option_strings:
                found.setdefault(action.option_strings[-1], action.help.replace("%(default)s", str(action.default)))
    return found


def _usage(verb: str, p: argparse.ArgumentParser) -> str:
    words = ["cuw", verb]
    for action in p._actions:
        if not action.option_strings:
            words.append(f"[{action.dest}]" if action.nargs == "?" else action.dest)
    return " ".join(words + ["[options]"])


def verb_section(verb: str, summary: str, p: argparse.ArgumentParser, elsewhere: dict[str, str]) -> list[str]:
    session = verb.replace("-", "_")
    lines = [
        f"## cuw {verb}",
        "",
        _escape(summary[:1].upper() + summary[1:]) + ".",
        "",
        f"`{_usage(verb, p)}`; also `nox -s {session} -- …` and `invoke {verb} …`.",
        "",
        "| argument | value | default | meaning |",
        "|---|---|---|---|",
    ]
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        lines.append(f"| {_name(action)} | {_value(action)} | {_default(action)} | {_help(action, elsewhere)} |")
    return lines + [""]


def reference() -> str:
    top = parser()
    verbs, summaries = _verbs(top)
    lines = [
        "# Command-line reference",
        "",
        "Generated from `cuw/cli/parser.py` by `python -m cuw.cli.reference`; do not edit by hand.",
        f"{_escape(top.description or '')} Every verb is the same function behind three front ends:",
        "`cuw <verb>`, `nox -s <verb> -- …` (a `-` in a verb is `_` in its session) and `invoke <verb> …`",
        "(an option given several times is comma-separated there). Exit codes and errors:",
        "[The verbs](verbs.md#exit-codes-and-errors).",
        "",
        "| verb | what it does |",
        "|---|---|",
        *(f"| [{verb}](#cuw-{verb}) | {_escape(summaries.get(verb, ''))} |" for verb in verbs),
        "",
    ]
    elsewhere = _helps(verbs)
    for verb, p in verbs.items():
        lines += verb_section(verb, summaries.get(verb, ""), p, elsewhere)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    return write_pages({CLI_MD: reference()})


if __name__ == "__main__":
    sys.exit(main())
