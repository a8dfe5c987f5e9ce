"""farm.yml's dispatcher, .github/scripts/dispatch_chunks.py, against a stand-in for GitHub's REST API served
over real HTTP on 127.0.0.1: rate limits (429 with Retry-After, 403 with GitHub's secondary rate limit message),
a 500 that never ends, a 403 that is a missing permission. The script runs as farm.yml runs it, a subprocess;
$CUW_DISPATCH_WAIT_SCALE shrinks its waits, and the stand-in times every request it gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO
from github_standin import JsonHandler, StandIn as BaseStandIn

SCRIPT = REPO / ".github" / "scripts" / "dispatch_chunks.py"
CHUNKS = [{"id": "linux-13.0-1", "jobs": 3}, {"id": "linux-13.0-2", "jobs": 0}, {"id": "linux-13.0-3", "jobs": 5}]
SENT = ["linux-13.0-1", "linux-13.0-3"]  # the chunk with no jobs is never dispatched
SCALE = 0.02
SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."


class StandIn(BaseStandIn):
    def __init__(self) -> None:
        super().__init__(Handler)
        self.log: list[tuple[float, str, dict]] = []  # (when, path, body) of every request


class Handler(JsonHandler):
    server: StandIn

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.log.append((time.monotonic(), self.path, body))
        assert self.headers["Authorization"] == "Bearer t0k"
        answer = self.server.faults.pop(0) if self.server.faults else self.server.forever
        if answer is None:
            self.send_response(204)
            self.end_headers()
            return
        code, headers, payload = answer
        self.answer(code, payload, headers)


@pytest.fixture
def github():
    server = StandIn()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _dispatch(github: StandIn, tmp_path: Path) -> subprocess.CompletedProcess:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"chunks": CHUNKS}))
    env = {
        "PATH": os.environ["PATH"],
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": "o/r",
        "GH_TOKEN": "t0k",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "CUW_DISPATCH_WAIT_SCALE": str(SCALE),
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(plan), "--ref", "main", "--pause", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _chunks(github: StandIn) -> list[str]:
    return [body["inputs"]["chunk"] for _, _, body in github.log]


def test_a_429_and_a_secondary_rate_limit_403_are_retried_after_the_wait_github_names(github, tmp_path):
    github.faults = [
        (429, {"Retry-After": "5"}, {"message": "API rate limit exceeded"}),
        (403, {}, {"message": SECONDARY}),
    ]  # no Retry-After: a minute, GitHub's advice
    proc = _dispatch(github, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _chunks(github) == [SENT[0], SENT[0], SENT[0], SENT[1]], "the first chunk three times, then the other"
    assert all(path == "/repos/o/r/actions/workflows/build.yml/dispatches" for _, path, _ in github.log)
    assert github.log[0][2] == github.log[2][2], "the retry sends the same dispatch"
    assert proc.stderr.splitlines() == [
        f"rate limited (HTTP 429); waiting {5 * SCALE:g} s",
        f"rate limited (HTTP 403); waiting {60 * SCALE:g} s",
    ]
    times = [t for t, _, _ in github.log]
    assert times[1] - times[0] >= 5 * SCALE and times[2] - times[1] >= 60 * SCALE, "each wait honoured"
    assert "2/2 chunks dispatched (8 jobs)" in proc.stdout
    assert "### farm: 2/2 chunks dispatched (8 jobs)" in (tmp_path / "summary.md").read_text()


def test_rate_limits_that_never_end_give_up_after_four_tries_per_chunk_and_exit_1(github, tmp_path):
    github.forever = (429, {"Retry-After": "1"}, {"message": "API rate limit exceeded"})
    proc = _dispatch(github, tmp_path)
    assert proc.returncode == 1
    assert _chunks(github) == [SENT[0]] * 4 + [SENT[1]] * 4
    assert proc.stderr.count("rate limited (HTTP 429)") == 6, "three waits per chunk: none after the last try"
    for chunk in SENT:
        assert f'could not dispatch {chunk}: HTTP 429: {{"message": "API rate limit exceeded"}}' in proc.stderr
    assert "0/2 chunks dispatched (8 jobs)" in proc.stdout


def test_a_500_that_never_ends_fails_each_chunk_once_tries_every_chunk_and_exits_1(github, tmp_path):
    """A server error is not a rate limit: no retry, no wait; the error names GitHub's answer, and the
    summary lists each chunk as not dispatched."""
    github.forever = (500, {}, {"message": "Server Error"})
    started = time.monotonic()
    proc = _dispatch(github, tmp_path)
    assert proc.returncode == 1
    assert _chunks(github) == SENT and time.monotonic() - started < 30
    assert proc.stderr.splitlines() == [f'could not dispatch {chunk}: HTTP 500: {{"message": "Server Error"}}' for chunk in SENT]
    summary = (tmp_path / "summary.md").read_text()
    assert "### farm: 0/2 chunks dispatched (8 jobs)" in summary
    assert '| linux-13.0-1 | 3 | ❌ HTTP 500: {"message": "Server Error"} |' in summary
    assert "| linux-13.0-2 | 0 | up to date, not dispatched |" in summary


def test_a_403_that_is_not_a_rate_limit_is_not_retried(github, tmp_path):
    """A token without ``actions: write`` gets 403 too: waiting cannot fix it, so it fails at once."""
    github.forever = (403, {}, {"message": "Resource not accessible by integration"})
    proc = _dispatch(github, tmp_path)
    assert proc.returncode == 1
    assert _chunks(github) == SENT, "one try per chunk"
    assert "rate limited" not in proc.stderr
    assert f'could not dispatch {SENT[0]}: HTTP 403: {{"message": "Resource not accessible by integration"}}' in proc.stderr


def test_a_403_with_no_requests_left_is_a_rate_limit_whatever_its_message(github, tmp_path):
    github.faults = [(403, {"X-RateLimit-Remaining": "0", "Retry-After": "2"}, {"message": "Forbidden"})]
    proc = _dispatch(github, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _chunks(github) == [SENT[0], SENT[0], SENT[1]]
    assert proc.stderr.splitlines() == [f"rate limited (HTTP 403); waiting {2 * SCALE:g} s"]
