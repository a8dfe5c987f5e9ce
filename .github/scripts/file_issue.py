"""Keeps one open issue per watcher (watch.yml): filed on news, updated when the news changes, closed when it is over.

    python .github/scripts/file_issue.py grid|audit FINDINGS.md --outcome findings|clear [--dry-run]

FINDINGS.md is what the watcher printed (`cuw grid --check`, `cuw audit`). Its fingerprint is
the sha256 of its finding lines (`MISSING …` and `HOLE …` lines and markdown table rows; the whole text when
it has neither), each with its volatile parts taken out (times, durations, a URL's query and
credentials), whitespace collapsed, sorted; the first 12 hex digits go into the issue's title:
`[watch:grid] 3 findings (fp 1a2b3c4d5e6f)`. The watcher's open issue is the one labelled
`watch:<name>`:

* outcome findings, none open: one is created with that label;
* outcome findings, one open with the same fingerprint: nothing is sent (the same news never
  files twice);
* outcome findings, another fingerprint: its title and body are replaced and a comment lists
  the findings that are new and those that are gone;
* outcome clear: the open one, if any, is closed with a comment.

The REST API is $GITHUB_API_URL (default https://api.github.com), the repository
$GITHUB_REPOSITORY, the token $GH_TOKEN (`issues: write`). A rate-limited answer (429, or a 403
that says so) is retried after the wait GitHub names (Retry-After, X-RateLimit-Reset), a 5xx or
an unreachable API after a growing pause; what still fails ends the script with one line on
stderr and exit 2. `--dry-run` reads the open issue (when the repository is known) and prints
the writes instead of sending them. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

WATCHERS = ("grid", "audit")
BODY_LIMIT = 60000  # GitHub refuses an issue body or comment over 65536 characters
LISTED = 30  # findings named per side in a "what changed" comment
_START, _END = "<!-- watch:findings -->", "<!-- /watch:findings -->"
_FP = re.compile(r"\(fp ([0-9a-f]{12})\)")

# Volatile parts of a finding: the same news on another day must give the same fingerprint.
_VOLATILE = [
    (re.compile(r"(https?://)[^/\s@]+@"), r"\1"),  # credentials in a URL
    (re.compile(r"(https?://[^\s?#|()<>\"']*)[?#][^\s|()<>\"']*"), r"\1"),  # a URL's query and fragment
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds?|min|mins|minutes?|h|hours?)\b"), "<duration>"),
]


class ApiError(Exception):
    pass


def finding_lines(text: str) -> list[str]:
    """The lines that are findings: `MISSING …` (cuw grid --check) and markdown table rows
    (cuw audit) less their header and separator rows; every non-empty line when there are none."""
    lines = [line.strip() for line in text.splitlines()]
    found = []
    for i, line in enumerate(lines):
        if line.startswith(("MISSING ", "HOLE ")):
            found.append(line)
        elif line.startswith("|") and not re.fullmatch(r"\|[\s|:-]*\|", line):
            header = i + 1 < len(lines) and re.fullmatch(r"\|[\s|:-]*-[\s|:-]*\|", lines[i + 1])
            if not header:
                found.append(line)
    if found:
        return found
    return [line for line in lines if line and not line.startswith("```")]


def normalize(line: str) -> str:
    for pattern, repl in _VOLATILE:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def fingerprint(text: str) -> str:
    """12 hex digits of the sha256 of the normalized finding lines, in sorted order."""
    lines = sorted(normalize(line) for line in finding_lines(text))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def title(name: str, text: str) -> str:
    count = len(finding_lines(text))
    return f"[watch:{name}] {count} finding{'' if count == 1 else 's'} (fp {fingerprint(text)})"


def _run_url() -> str:
    server, repo, run = (os.environ.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else ""


def body(name: str, text: str) -> str:
    shown = text if len(text) <= BODY_LIMIT else text[:BODY_LIMIT] + "\n\n… (cut; the run's log has all of it)\n"
    run = _run_url()
    head = (f"The `{name}` watcher (`.github/workflows/watch.yml`) found this"
            + (f" in [its run]({run})" if run else "") + f". Fingerprint `{fingerprint(text)}`: the same findings "
            "never file twice; other findings update this issue; a run that finds nothing closes it.")  # fmt: skip
    return f"{head}\n\n{_START}\n{shown.rstrip()}\n{_END}\n"


def _old_findings(old_body: str) -> str:
    start, end = old_body.find(_START), old_body.find(_END)
    return old_body[start + len(_START) : end] if 0 <= start < end else ""


def change_comment(old_fp: str, new_fp: str, old_text: str, new_text: str) -> str:
    old = {normalize(line): line for line in finding_lines(old_text)} if old_text.strip() else {}
    new = {normalize(line): line for line in finding_lines(new_text)}
    added = [new[k] for k in new if k not in old]
    gone = [old[k] for k in old if k not in new]
    parts = [f"The findings changed (fp {old_fp or '?'} → {new_fp}): {len(added)} new, {len(gone)} gone"
             + (f" ([run]({_run_url()}))" if _run_url() else "") + "."]  # fmt: skip
    for label, rows, sign in (("New", added, "+"), ("Gone", gone, "-")):
        if rows:
            listing = "\n".join(f"{sign} {row}" for row in rows[:LISTED])
            more = f"\n… and {len(rows) - LISTED} more" if len(rows) > LISTED else ""
            parts.append(f"{label}:\n```diff\n{listing}{more}\n```")
    return "\n\n".join(parts)[:BODY_LIMIT]


class GitHub:
    def __init__(self, api: str, repo: str, token: str, tries: int, backoff: float, rate_limit_wait: float,
                 max_wait: float) -> None:  # fmt: skip
        self.api, self.repo, self.token = api.rstrip("/"), repo, token
        self.tries, self.backoff, self.rate_limit_wait, self.max_wait = tries, backoff, rate_limit_wait, max_wait

    def _rate_limit_wait(self, code: int, headers: Any, text: str) -> Optional[float]:
        """Seconds to wait before a rate-limited request is sent again; None when it is not rate-limited."""
        retry_after = headers.get("Retry-After")
        if retry_after:
            try:
                return float(retry_after)
            except ValueError:
                pass
        if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
            try:
                return max(0.0, float(headers["X-RateLimit-Reset"]) - time.time()) + 1
            except ValueError:
                pass
        if code == 429 or "rate limit" in text.lower():
            return self.rate_limit_wait  # a secondary rate limit that names no wait: at least a minute
        return None  # a 403 that is not a rate limit (a missing permission) is not retried

    def request(self, method: str, path: str, payload: Optional[dict] = None) -> Any:
        url = f"{self.api}{path}"
        data = json.dumps(payload).encode() if payload is not None else None
        why = ""
        for attempt in range(self.tries):
            headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                       "User-Agent": "cuda-wheels-forge-watch"}  # fmt: skip
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            if data is not None:
                headers["Content-Type"] = "application/json"
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            wait: Optional[float]
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw.strip() else None
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                try:
                    message = str(json.loads(text).get("message", text))
                except (ValueError, AttributeError):
                    message = text
                why = f"HTTP {exc.code}: {' '.join(message.split())[:200]}"
                if exc.code in (403, 429):
                    wait = self._rate_limit_wait(exc.code, exc.headers, message)
                elif exc.code >= 500:
                    wait = self.backoff * 2**attempt
                else:
                    wait = None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                why = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                wait = self.backoff * 2**attempt
            if wait is None or attempt + 1 == self.tries:
                tried = f" after {attempt + 1} tries" if attempt else ""
                raise ApiError(f"{method} {url}: {why}{tried}")
            wait = min(wait, self.max_wait)
            print(f"file_issue: {method} {path}: {why}; trying again in {wait:g} s", file=sys.stderr, flush=True)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def open_issue(self, label: str) -> Optional[dict]:
        query = urllib.parse.urlencode({"labels": label, "state": "open", "per_page": 100})
        found = [i for i in self.request("GET", f"/repos/{self.repo}/issues?{query}") or [] if "pull_request" not in i]
        found.sort(key=lambda i: i["number"])
        if len(found) > 1:
            others = ", ".join(f"#{i['number']}" for i in found[1:])
            print(f"file_issue: more than one open issue labelled {label}; keeping #{found[0]['number']} ({others} "
                  "left as they are)", file=sys.stderr)  # fmt: skip
        return found[0] if found else None


def _summary(line: str) -> None:
    print(line, flush=True)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(line + "\n\n")


def run(args: argparse.Namespace) -> int:
    label = f"watch:{args.watcher}"
    text = ""
    if args.outcome == "findings":
        with open(args.findings, encoding="utf-8") as fh:
            text = fh.read()
        if not text.strip():
            raise ApiError(f"{args.findings} is empty: outcome findings needs what the watcher found")
    api = os.environ.get("GITHUB_API_URL") or "https://api.github.com"
    repo, token = os.environ.get("GITHUB_REPOSITORY", ""), os.environ.get("GH_TOKEN", "")
    if args.dry_run and not repo:  # nothing to read: what it would file
        print(f"no $GITHUB_REPOSITORY: would look for the open issue labelled {label}, then "
              + (f"file or update it as: {title(args.watcher, text)}" if text else "close it"), flush=True)  # fmt: skip
        return 0
    if not repo or (not token and not args.dry_run):
        raise ApiError("needs $GITHUB_REPOSITORY and $GH_TOKEN (or --dry-run)")
    gh = GitHub(api, repo, token, args.tries, args.backoff, args.rate_limit_wait, args.max_wait)
    would = "would " if args.dry_run else ""

    def send(method: str, path: str, payload: dict) -> Any:
        if args.dry_run:
            print(f"would {method} {path} {json.dumps(payload)[:300]}", flush=True)
            return None
        return gh.request(method, path, payload)

    issue = gh.open_issue(label)
    if args.outcome == "clear":
        if issue is None:
            _summary(f"watch:{args.watcher}: nothing found, no open issue; nothing to do")
            return 0
        number = issue["number"]
        run = _run_url()
        send("POST", f"/repos/{repo}/issues/{number}/comments",
             {"body": f"The `{args.watcher}` watcher found nothing" + (f" in [this run]({run})" if run else "")
                      + ": the news is over, closing."})  # fmt: skip
        send("PATCH", f"/repos/{repo}/issues/{number}", {"state": "closed", "state_reason": "completed"})
        _summary(f"watch:{args.watcher}: nothing found; {would}close #{number}")
        return 0

    new_title, new_fp = title(args.watcher, text), fingerprint(text)
    if issue is None:
        created = send("POST", f"/repos/{repo}/issues", {"title": new_title, "body": body(args.watcher, text), "labels": [label]})
        if created is not None and label not in {lab.get("name") for lab in created.get("labels", [])}:
            raise ApiError(f"created #{created['number']} but GitHub dropped its label {label} (the token cannot set "
                           "labels?): the next run would not find it")  # fmt: skip
        where = f" #{created['number']} {created.get('html_url', '')}".rstrip() if created else ""
        _summary(f"watch:{args.watcher}: {would}file{where}: {new_title}")
        return 0
    number = issue["number"]
    match = _FP.search(issue.get("title") or "")
    old_fp = match.group(1) if match else ""
    if old_fp == new_fp:
        _summary(f"watch:{args.watcher}: #{number} already says this (fp {new_fp}); nothing to do")
        return 0
    comment = change_comment(old_fp, new_fp, _old_findings(issue.get("body") or ""), text)
    send("PATCH", f"/repos/{repo}/issues/{number}", {"title": new_title, "body": body(args.watcher, text)})
    send("POST", f"/repos/{repo}/issues/{number}/comments", {"body": comment})
    _summary(f"watch:{args.watcher}: {would}update #{number} (fp {old_fp or '?'} → {new_fp}): {new_title}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("watcher", choices=WATCHERS)
    p.add_argument("findings", help="the watcher's markdown output (read for outcome findings)")
    p.add_argument("--outcome", choices=("findings", "clear"), required=True,
                   help="findings: the watcher exited 1; clear: it exited 0")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="read, and print the writes instead of sending them")
    p.add_argument("--tries", type=int, default=5, help="attempts per request (default 5)")
    p.add_argument("--backoff", type=float, default=2.0, help="first pause after a 5xx or no answer, doubling (default 2 s)")
    p.add_argument("--rate-limit-wait", type=float, default=60.0,
                   help="wait after a rate limit that names none (default 60 s, GitHub's advice)")  # fmt: skip
    p.add_argument("--max-wait", type=float, default=900.0, help="longest single wait (default 900 s)")
    args = p.parse_args(argv)
    try:
        return run(args)
    except (ApiError, OSError) as exc:
        print(f"file_issue: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
