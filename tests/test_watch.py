"""The watchers (.github/workflows/watch.yml) and their issue filer, .github/scripts/file_issue.py.

file_issue.py runs as a subprocess against a local stand-in for the few GitHub endpoints it uses
(list issues by label, create, update, comment), served over real HTTP on 127.0.0.1; faults
(429 and 403 rate limits, a 500 that never ends, a 403 that is a missing permission) are
queued answers the stand-in gives before it serves the request itself.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import yaml

from conftest import REPO
from github_standin import JsonHandler, StandIn as BaseStandIn

SCRIPT = REPO / ".github" / "scripts" / "file_issue.py"
WORKFLOW = REPO / ".github" / "workflows" / "watch.yml"
OWNER_REPO = "forge/wheels"
TOKEN = "test-token"

GRID = """asked 12.8: https://download.pytorch.org/whl/cu128
asked 13.0: https://download.pytorch.org/whl/cu130
CUDA 12.8 publishes: torch 2.14.1 (Python 3.12); torch 2.15.0 (Python 3.12)
CUDA 13.0 publishes: torch 2.14.1 (Python 3.12); torch 2.15.0 (Python 3.12)
MISSING torch 2.15.0 (line 2.15) for CUDA 12.8, Python 3.12 (a torch line the grid lacks)
MISSING torch 2.15.0 (line 2.15) for CUDA 13.0, Python 3.12 (a torch line the grid lacks)
MISSING torch 2.14.1 (line 2.14) for CUDA 13.0, Python 3.13 (missing from the grid's entry)

fix: in recipes/defaults.yml, make grid.torch read:
  torch:
    "2.14": {cuda: ["12.8", "13.0"], python: ["3.12", "3.13"]}
"""

AUDIT = """### audit of https://wheels.example/index/?token=abc123: 1 gap(s), 1 stale, 0 wheel finding(s)

| kind | what | detail |
|---|---|---|
| gap | natten-linux-3.12-12.8-2.14 | no published wheel |
| stale | natten-linux-3.12-13.0-2.14 | built from https://wheels.example/src.tar.gz?sig=ff01 at 2025-01-02T03:04:05Z (took 312.5 s) |
"""  # noqa: E501 (an audit table row as the audit writes it)


class StandIn(BaseStandIn):
    def __init__(self) -> None:
        super().__init__(Handler)
        self.issues: dict[int, dict] = {}
        self.comments: dict[int, list[str]] = {}
        self.log: list[tuple[str, str]] = []
        self.lock = threading.Lock()


class Handler(JsonHandler):
    server: StandIn

    def _handle(self, method: str) -> None:
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        with srv.lock:
            srv.log.append((method, self.path))
            fault = srv.forever or (srv.faults.pop(0) if srv.faults else None)
            if fault:
                code, headers, body = fault
                return self.answer(code, body, headers)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.answer(401, {"message": "Bad credentials"})
            url = urllib.parse.urlsplit(self.path)
            base = f"/repos/{OWNER_REPO}/issues"
            m = re.fullmatch(rf"{base}/(\d+)(/comments)?", url.path)
            if method == "GET" and url.path == base:
                query = urllib.parse.parse_qs(url.query)
                wanted = set(query["labels"][0].split(","))
                state = query.get("state", ["open"])[0]
                found = [
                    i
                    for i in srv.issues.values()
                    if wanted <= {lab["name"] for lab in i["labels"]} and (state == "all" or i["state"] == state)
                ]
                return self.answer(200, sorted(found, key=lambda i: -i["number"]))
            if method == "POST" and url.path == base:
                number = len(srv.issues) + 1
                srv.issues[number] = {
                    "number": number,
                    "title": payload["title"],
                    "body": payload.get("body", ""),
                    "state": "open",
                    "labels": [{"name": name} for name in payload.get("labels", [])],
                    "html_url": f"https://github.example/{OWNER_REPO}/issues/{number}",
                }
                return self.answer(201, srv.issues[number])
            if m and int(m.group(1)) in srv.issues:
                issue = srv.issues[int(m.group(1))]
                if method == "PATCH" and not m.group(2):
                    issue.update({k: v for k, v in payload.items() if k in ("title", "body", "state", "state_reason")})
                    return self.answer(200, issue)
                if method == "POST" and m.group(2):
                    srv.comments.setdefault(issue["number"], []).append(payload["body"])
                    return self.answer(201, {"body": payload["body"]})
            return self.answer(404, {"message": "Not Found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")


@pytest.fixture
def github():
    srv = StandIn()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def file_issue(
    github: StandIn, tmp_path, watcher: str, text: str | None, outcome: str = "findings", *extra: str, timeout: int = 60
) -> subprocess.CompletedProcess:
    findings = tmp_path / f"{watcher}-{len(github.log)}.md"
    findings.write_text(text or "")
    env = {
        "PATH": "/usr/bin:/bin",
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": OWNER_REPO,
        "GH_TOKEN": TOKEN,
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_RUN_ID": "77",
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), watcher, str(findings), "--outcome", outcome, "--backoff", "0.05", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _module():
    spec = importlib.util.spec_from_file_location("file_issue", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the fingerprint ------------------------------------------------------------------------


def test_the_fingerprint_ignores_volatile_parts_and_changes_with_the_findings():
    fi = _module()
    fp = fi.fingerprint(AUDIT)
    assert re.fullmatch(r"[0-9a-f]{12}", fp)
    volatile = (
        AUDIT.replace("token=abc123", "token=zzz999")
        .replace("sig=ff01", "sig=0a0b&x=1")
        .replace("2025-01-02T03:04:05Z", "2025-02-03T10:11:12+01:00")
        .replace("312.5 s", "9 s")
        .replace("| no published wheel |", "|   no   published  wheel   |")
    )
    assert volatile != AUDIT and fi.fingerprint(volatile) == fp
    reordered = AUDIT.splitlines()
    reordered[-2], reordered[-1] = reordered[-1], reordered[-2]  # the same findings in another order
    assert fi.fingerprint("\n".join(reordered)) == fp
    assert fi.fingerprint(AUDIT.replace("natten-linux-3.12-12.8-2.14", "natten-linux-3.13-12.8-2.14")) != fp
    assert fi.fingerprint(AUDIT.replace("| gap |", "| stale |")) != fp
    # cuw grid --check: the MISSING lines are the findings; what the indexes publish is context
    assert fi.fingerprint(
        GRID.replace("torch 2.14.1 (Python 3.12); torch 2.15.0", "torch 2.14.2 (Python 3.12); torch 2.15.0")
    ) == fi.fingerprint(GRID)
    assert fi.fingerprint(GRID.replace("for CUDA 13.0, Python 3.13", "for CUDA 13.0, Python 3.14")) != fi.fingerprint(GRID)
    assert fi.fingerprint("```text\n" + GRID + "```\n") == fi.fingerprint(GRID)  # fenced as the workflow files it
    assert fi.title("grid", GRID) == f"[watch:grid] 3 findings (fp {fi.fingerprint(GRID)})"
    assert fi.title("audit", AUDIT) == f"[watch:audit] 2 findings (fp {fp})"
    assert fi.title("audit", "one odd line\n").startswith("[watch:audit] 1 finding (fp ")  # no rows: the text itself


# --- file_issue.py against the stand-in -------------------------------------------------------


def test_first_run_files_one_issue_with_the_watchers_label(github, tmp_path):
    proc = file_issue(github, tmp_path, "grid", GRID)
    assert proc.returncode == 0, proc.stderr
    assert [m for m, _ in github.log] == ["GET", "POST"]
    assert "labels=watch%3Agrid" in github.log[0][1] and "state=open" in github.log[0][1]
    (issue,) = github.issues.values()
    fp = _module().fingerprint(GRID)
    assert issue["title"] == f"[watch:grid] 3 findings (fp {fp})"
    assert issue["labels"] == [{"name": "watch:grid"}]
    assert "MISSING torch 2.15.0 (line 2.15) for CUDA 13.0" in issue["body"]
    assert "https://github.example/forge/wheels/actions/runs/77" in issue["body"]
    assert "file #1" in proc.stdout


def test_the_same_news_never_files_twice_and_other_news_updates_the_issue(github, tmp_path):
    fi = _module()
    assert file_issue(github, tmp_path, "audit", AUDIT).returncode == 0
    assert len(github.issues) == 1

    before = len(github.log)
    proc = file_issue(github, tmp_path, "audit", AUDIT)  # the same findings: only the list is asked
    assert proc.returncode == 0, proc.stderr
    assert [m for m, _ in github.log[before:]] == ["GET"]
    assert "nothing to do" in proc.stdout

    before = len(github.log)
    volatile = AUDIT.replace("token=abc123", "token=new").replace("took 312.5 s", "took 4 s")
    assert file_issue(github, tmp_path, "audit", volatile).returncode == 0  # volatile differences: the same news
    assert [m for m, _ in github.log[before:]] == ["GET"]

    before = len(github.log)
    changed = AUDIT.replace("| gap | natten-linux-3.12-12.8-2.14 |", "| gap | natten-linux-3.13-12.8-2.14 |")
    proc = file_issue(github, tmp_path, "audit", changed)
    assert proc.returncode == 0, proc.stderr
    assert [m for m, _ in github.log[before:]] == ["GET", "PATCH", "POST"]
    (issue,) = github.issues.values()
    assert issue["state"] == "open"
    assert (
        issue["title"]
        == f"[watch:audit] 2 findings (fp {fi.fingerprint(changed)})"
        != f"[watch:audit] 2 findings (fp {fi.fingerprint(AUDIT)})"
    )
    assert "natten-linux-3.13-12.8-2.14" in issue["body"] and "natten-linux-3.12-12.8-2.14" not in issue["body"]
    (comment,) = github.comments[1]
    assert f"fp {fi.fingerprint(AUDIT)} → {fi.fingerprint(changed)}" in comment and "1 new, 1 gone" in comment
    assert "+ | gap | natten-linux-3.13-12.8-2.14 |" in comment and "- | gap | natten-linux-3.12-12.8-2.14 |" in comment
    assert "stale" not in comment  # the finding that stayed is not news

    # another watcher's issue is its own
    assert file_issue(github, tmp_path, "grid", GRID).returncode == 0
    assert len(github.issues) == 2


def test_a_clear_outcome_closes_the_open_issue_and_then_does_nothing(github, tmp_path):
    assert file_issue(github, tmp_path, "grid", GRID).returncode == 0
    proc = file_issue(github, tmp_path, "grid", None, "clear")
    assert proc.returncode == 0, proc.stderr
    assert github.issues[1]["state"] == "closed" and github.issues[1]["state_reason"] == "completed"
    assert "news is over" in github.comments[1][0]
    before = len(github.log)
    proc = file_issue(github, tmp_path, "grid", None, "clear")  # nothing open: only the list
    assert proc.returncode == 0 and [m for m, _ in github.log[before:]] == ["GET"]
    assert file_issue(github, tmp_path, "grid", GRID).returncode == 0  # news again: a new issue
    assert [i["state"] for i in github.issues.values()] == ["closed", "open"]


def test_dry_run_reads_but_sends_nothing(github, tmp_path):
    proc = file_issue(github, tmp_path, "grid", GRID, "findings", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert [m for m, _ in github.log] == ["GET"] and not github.issues
    assert "would POST /repos/forge/wheels/issues" in proc.stdout and "[watch:grid] 3 findings" in proc.stdout


@pytest.mark.parametrize(
    "fault, extra",
    [
        ((429, {"Retry-After": "1"}, {"message": "API rate limit exceeded"}), []),
        (
            (403, {}, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}),
            ["--rate-limit-wait", "1"],
        ),  # no Retry-After: the wait it is told
        (
            (
                403,
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0"},
                {"message": "API rate limit exceeded for installation"},
            ),
            [],
        ),
    ],
    ids=["429-retry-after", "403-secondary", "403-primary-reset"],
)
def test_a_rate_limited_answer_is_retried_after_the_wait_github_names(github, tmp_path, fault, extra):
    github.faults = [fault]
    started = time.monotonic()
    proc = file_issue(github, tmp_path, "grid", GRID, "findings", *extra)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert [m for m, _ in github.log] == ["GET", "GET", "POST"]  # the list again, then the create
    assert len(github.issues) == 1
    assert f"HTTP {fault[0]}" in proc.stderr and "trying again in" in proc.stderr
    assert elapsed >= 1.0  # the named wait, honoured (a reset in the past still waits a second)


def test_a_500_that_never_ends_is_one_line_and_exit_2(github, tmp_path):
    github.forever = (500, {}, {"message": "Server Error"})
    proc = file_issue(github, tmp_path, "grid", GRID, "findings", "--tries", "3")
    assert proc.returncode == 2
    assert len(github.log) == 3 and not github.issues
    errors = [line for line in proc.stderr.splitlines() if not line.endswith(tuple(f"again in {w:g} s" for w in (0.05, 0.1)))]
    assert errors == [
        f"file_issue: error: GET {github.url}/repos/forge/wheels/issues?labels=watch%3Agrid&state=open&per_page=100: "
        "HTTP 500: Server Error after 3 tries"
    ]
    assert "Traceback" not in proc.stderr


def test_a_403_that_is_not_a_rate_limit_is_not_retried(github, tmp_path):
    github.forever = (403, {}, {"message": "Resource not accessible by integration"})
    proc = file_issue(github, tmp_path, "audit", AUDIT)
    assert proc.returncode == 2 and len(github.log) == 1
    assert proc.stderr.strip().splitlines() == [
        f"file_issue: error: GET {github.url}/repos/forge/wheels/issues?labels=watch%3Aaudit&state=open&per_page=100: "
        "HTTP 403: Resource not accessible by integration"
    ]


def test_no_token_is_a_one_line_error(tmp_path):
    findings = tmp_path / "f.md"
    findings.write_text(GRID)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "grid", str(findings), "--outcome", "findings"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "file_issue: error: needs $GITHUB_REPOSITORY and $GH_TOKEN (or --dry-run)"
    dry = subprocess.run(
        [sys.executable, str(SCRIPT), "grid", str(findings), "--outcome", "findings", "--dry-run"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert "would look for the open issue labelled watch:grid" in dry.stdout and "[watch:grid] 3 findings (fp " in dry.stdout


# --- the workflow ---------------------------------------------------------------------------


def test_the_watch_workflow_runs_each_watcher_on_its_own_schedule_with_least_privilege():
    flow = yaml.safe_load(WORKFLOW.read_text())
    on = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on` as true
    crons = [entry["cron"] for entry in on["schedule"]]
    assert len(crons) == 2
    daily = [c for c in crons if c.split()[2:] == ["*", "*", "*"]]
    weekly = [c for c in crons if c.split()[4] != "*"]
    assert len(daily) == 1 and len(weekly) == 1
    assert set(on["workflow_dispatch"]["inputs"]["watcher"]["options"]) >= {"grid", "audit"}
    assert flow["permissions"] == {}
    jobs = flow["jobs"]
    assert set(jobs) == {"grid", "audit"}
    for name, cron in (("grid", daily[0]), ("audit", weekly[0])):
        job = jobs[name]
        assert job["permissions"] == {"contents": "read", "issues": "write"}
        assert "timeout-minutes" in job
        assert f"github.event.schedule == '{cron}'" in job["if"], f"{name} runs on another schedule than its cron"
        assert job["concurrency"]["cancel-in-progress"] is False  # two runs never race to file the same news
        runs = "\n".join(str(step.get("run", "")) for step in job["steps"])
        assert ".github/scripts/install-forge.sh" in runs
        assert f"args=({name} {name}-findings.md)" in runs and 'python .github/scripts/file_issue.py "${args[@]}"' in runs
    assert "nox -s grid -- --check" in WORKFLOW.read_text()
    assert 'nox -s audit -- --index "$INDEX"' in WORKFLOW.read_text()
    assert "vars.CUW_INDEX_URL" in str(jobs["audit"]["steps"][0])
    build = (REPO / ".github/workflows/build.yml").read_text()
    for uses in re.findall(r"uses: (\S+ # \S+)", WORKFLOW.read_text()):
        assert f"uses: {uses}" in build, f"{uses} is not pinned as build.yml pins it"


def _run_step(step_script: str, rc: int, tmp_path) -> tuple[subprocess.CompletedProcess, str]:
    """The watcher step's shell with a stand-in for nox that prints and exits `rc`, and a stand-in
    file_issue.py that records how it was called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nox").write_text(f"#!/bin/sh\necho 'MISSING torch 9.9.0 (line 9.9)'\nexit {rc}\n")
    (bin_dir / "nox").chmod(0o755)
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/called\n')
    (bin_dir / "python").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "sum"),
        "INDEX": "https://wheels.example/",
        "DRY_RUN": "false",
    }
    proc = subprocess.run(["bash", "-e", "-c", step_script], cwd=tmp_path, env=env, capture_output=True, text=True)
    called = (tmp_path / "called").read_text() if (tmp_path / "called").exists() else ""
    return proc, called


@pytest.mark.parametrize("name", ["grid", "audit"])
def test_the_watcher_step_maps_the_exit_code_to_an_outcome(name, tmp_path):
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    (step,) = [s for s in jobs[name]["steps"] if "file_issue.py" in str(s.get("run", ""))]
    for rc, outcome in ((1, "--outcome findings"), (0, "--outcome clear")):
        proc, called = _run_step(step["run"], rc, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert called.startswith(f".github/scripts/file_issue.py {name} ") and outcome in called, called
        (tmp_path / "called").unlink()
    assert "MISSING torch 9.9.0" in (tmp_path / f"{name}-findings.md").read_text()
    proc, called = _run_step(step["run"], 2, tmp_path)  # could not check: the job fails, nothing is filed
    assert proc.returncode == 2 and called == ""
