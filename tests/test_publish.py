"""The publish stage without a build: build records, the append-only publish, the farm runner's pieces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, need, shared_dir, run_settings
from wheel_maker import make_wheel
from cuw.ci import workflow_run
from cuw.base.errors import CuwError, InputError, ToolError
from cuw.wheel.index import MARKER
from cuw.wheel.publish import RECORD_SUFFIX, publish, sha256_file, summarize

CELL_A = "example-linux-py3.11-cu13.0-notorch"
CELL_B = "example-linux-py3.12-cu13.0-notorch"


def _wheel(folder: Path, name: str, payload: bytes, record: bool = True) -> Path:
    """A small real wheel (the payload makes its bytes) and, with ``record``, its passed build record."""
    return make_wheel(folder, name, payload, record)


def _payload(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read("cuw_example/payload.bin")


W311 = "cuw_example-0.1.0+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
W312 = "cuw_example-0.1.0+cu130-cp312-cp312-manylinux_2_34_x86_64.whl"
W311_NEXT = "cuw_example-0.1.1+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_publish_adds_wheels_with_their_records_and_keeps_older_versions(tmp_path):
    index = tmp_path / "index"
    _wheel(tmp_path / "run1", W311, b"one")
    _wheel(tmp_path / "run1", W312, b"two")
    first = publish(tmp_path / "run1", index)
    assert sorted(first.published) == [W311, W312] and first.ok
    for name in (W311, W312):
        assert _payload(index / "files" / name) in (b"one", b"two")
        assert json.loads((index / "files" / f"{name}{RECORD_SUFFIX}").read_text())["wheel"] == name
    page = (index / "cu130" / "cuw-example" / "index.html").read_text()
    assert f"#sha256={sha256_file(index / 'files' / W311)}" in page

    _wheel(tmp_path / "run2", W311_NEXT, b"three")
    second = publish(tmp_path / "run2", index)
    assert second.published == [W311_NEXT]
    page = (index / "cu130" / "cuw-example" / "index.html").read_text()
    assert W311 in page and W311_NEXT in page, "an older version stays installable"
    assert set(json.loads((index / MARKER).read_text())["files"]) == {W311, W312, W311_NEXT}


def test_republishing_is_harmless_with_the_same_bytes_and_refused_with_others(tmp_path):
    index = tmp_path / "index"
    _wheel(tmp_path / "run1", W311, b"one")
    publish(tmp_path / "run1", index)
    again = publish(tmp_path / "run1", index)
    assert again.already == [W311] and again.ok and not again.published

    _wheel(tmp_path / "run2", W311, b"other bytes")
    _wheel(tmp_path / "run2", W312, b"two")
    mixed = publish(tmp_path / "run2", index)
    assert W311 in mixed.refused and "never replaced" in mixed.refused[W311]
    assert "build 0 of its version and tags is taken" in mixed.refused[W311], "the version is upstream's: no 'bump' of it"
    assert "gives the cell build 1" in mixed.refused[W311] and "--build-number 1" in mixed.refused[W311]
    assert mixed.published == [W312], "one refused wheel does not hold back the others"
    assert _payload(index / "files" / W311) == b"one"
    assert not mixed.ok


def test_a_wheel_without_its_build_record_or_with_a_wrong_one_is_not_published(tmp_path):
    _wheel(tmp_path / "in", W311, b"one", record=False)
    w312 = _wheel(tmp_path / "in", W312, b"two")
    w312.write_bytes(w312.read_bytes() + b"appended after the record")
    out = publish(tmp_path / "in", tmp_path / "index")
    assert "no build record" in out.refused[W311]
    assert "other bytes" in out.refused[W312]
    assert not out.published and not (tmp_path / "index" / "files").exists()


def test_a_failed_cell_is_named_with_its_missing_shard(tmp_path):
    _wheel(tmp_path / "in", W312, b"two")
    failed = tmp_path / "reports" / CELL_A
    failed.mkdir(parents=True)
    (failed / "link.report.json").write_text(
        json.dumps(
            {
                "gate": "link",
                "ok": False,
                "shard_count": 4,
                "facts": {"missing_shards": [2]},
                "reasons": ["2 cache misses: csrc/kernels/k03.cu (shard 2/4, archive missing)"],
            }
        )
    )
    out = publish(tmp_path / "in", tmp_path / "index", tmp_path / "reports")
    assert out.published == [W312]
    assert "missing shard(s) 2/4" in out.failed_cells[CELL_A]
    text = summarize(out, tmp_path / "index")
    assert f"cell {CELL_A} | not published" in text and "2/4" in text


def test_publish_cli_exit_codes(tmp_path):
    (tmp_path / "empty").mkdir()
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "cuw", "publish", *map(str, a)],
        capture_output=True,  # noqa: E731
        text=True,
        cwd=REPO,
    )
    nothing = run(tmp_path / "empty", tmp_path / "index")
    assert nothing.returncode == 1 and "nothing published" in nothing.stderr
    _wheel(tmp_path / "in", W311, b"one")
    ok = run(tmp_path / "in", tmp_path / "index")
    assert ok.returncode == 0, ok.stderr
    assert f"published {W311}" in ok.stderr


# The farm runner's pieces (the run itself is tests/test_farm.py, nox -s farm).


def test_install_cuda_is_a_no_op_when_the_pinned_release_is_there(tmp_path):
    need("cuda-13.0.2")
    env = {"PATH": "/usr/bin:/bin", "GITHUB_ENV": str(tmp_path / "env"), "GITHUB_PATH": str(tmp_path / "path")}
    proc = subprocess.run(
        ["bash", str(REPO / ".github/scripts/install-cuda.sh"), "13.0"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "already installed" in proc.stdout
    assert (tmp_path / "env").read_text() == "CUDA_HOME=/usr/local/cuda-13.0\n"


def test_every_job_installs_the_forge_into_its_own_venv_and_publish_follows_the_links():
    text = (REPO / ".github/workflows/build.yml").read_text()
    flow = yaml.safe_load(text)
    assert "pip install" not in text, "jobs install through install-forge.sh (a job-local venv)"
    for name, job in flow["jobs"].items():
        runs = [s.get("run", "") for s in job["steps"]]
        assert any("install-forge.sh" in r for r in runs), f"{name} does not install the forge into its own venv"
    publish_job = flow["jobs"]["publish"]
    assert set(publish_job["needs"]) >= {"link", "compile"} and "!cancelled()" in publish_job["if"]
    assert "fail_shard" in flow[True]["workflow_dispatch"]["inputs"]
    script = (REPO / ".github/scripts/install-forge.sh").read_text()
    assert ".cuw/venv" in script and "GITHUB_PATH" in script


def test_offline_actions_cover_every_pin_of_the_workflow():
    folder = need("offline-actions")
    args = workflow_run.local_repositories((REPO / ".github/workflows/build.yml").read_text(), folder)
    pairs = dict(a.split("=", 1) for a in args[1::2])
    assert set(pairs) == {
        "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
        "actions/setup-python@0b93645e9fea7318ecaed2b359559ac225c90a2b",
        "actions/upload-artifact@65c4c4a1ddee5b72f698fdd19549f0f0fb45cf08",
        "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093",
    }
    with pytest.raises(InputError, match="holds no action.yml"):
        workflow_run.local_repositories("uses: actions/cache@" + "0" * 40, folder)


def test_the_tool_cache_gets_this_interpreter_for_setup_python(tmp_path, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    [found] = workflow_run.fill_tool_cache(tmp_path / "tc", [minor], run_settings())
    slot = tmp_path / "tc" / "Python" / found.version
    assert (slot / "x64.complete").exists() and (slot / "x64" / "bin").is_dir()
    assert workflow_run.fill_tool_cache(tmp_path / "tc", [minor], run_settings())[0].version == found.version  # again: same slot
    with pytest.raises(ToolError, match="Python 2.1"):
        workflow_run.fill_tool_cache(tmp_path / "tc", ["2.1"], run_settings())


def test_progress_reads_acts_json_log():
    lines = [
        {"job": "build/shard c 2/4-2", "msg": "⭐ Run Main Compile shard", "step": "Compile shard"},
        {
            "job": "build/shard c 2/4-2",
            "msg": "fault switch: shard 2/4 of c fails on purpose\n",
            "raw_output": True,
            "step": "Compile shard",
        },
        {
            "job": "build/shard c 2/4-2",
            "msg": "  ❌  Failure - Main Compile shard",
            "step": "Compile shard",
            "stepResult": "failure",
        },
        {"job": "build/shard c 2/4-2", "msg": "🏁  Job failed", "jobResult": "failure"},
        {"job": "build/link c-1", "command": "summary", "content": "### example link: ❌ FAIL\n", "msg": "x"},
        {"job": "build/shard c 1/4-1", "msg": "cuw: shard gate PASS: compiled 2 TUs\n", "raw_output": True},
        {"job": "build/shard c 1/4-1", "msg": "🏁  Job failed", "jobResult": "failure"},  # act: a sibling failed
    ]
    progress = workflow_run.Progress(out=open(os.devnull, "w"))
    for line in lines:
        progress.feed(json.dumps(line))
    job = progress.jobs["build/shard c 2/4-2"]
    assert job.result == "failure" and "Compile shard" in job.verdict() and "fault switch" in job.verdict()
    assert progress.jobs["build/link c-1"].summary == ["### example link: ❌ FAIL\n"]
    assert progress.jobs["build/shard c 1/4-1"].result == "success", "its own steps passed"


def test_offline_actions_default_and_override(tmp_path):
    from cuw.base.settings import Settings

    def offline(value):  # as the command line reads $CUW_OFFLINE_ACTIONS
        return workflow_run.offline_actions(REPO, Settings.from_env({"CUW_OFFLINE_ACTIONS": value}).offline_actions)

    with pytest.raises(CuwError, match="not a folder"):
        offline(str(tmp_path / "missing"))
    assert offline(str(tmp_path)) == tmp_path.resolve()
    default = shared_dir() / "actions"
    assert offline("") == (default.resolve() if default.is_dir() else None)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_dispatcher_sends_one_build_dispatch_per_chunk(tmp_path):
    """farm.yml's script against a local stand-in for the REST API: one POST per chunk, same filters."""
    import http.server
    import threading

    plan = tmp_path / "plan.json"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "matrix",
            "--package",
            "all",
            "--platform",
            "linux",
            "--cuda",
            "13.0",
            "--output",
            str(plan),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    chunks = json.loads(plan.read_text())["chunks"]
    assert len(chunks) > 1 and all(c["jobs"] <= 256 for c in chunks)
    seen: list[tuple[str, dict]] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body, self.headers["Authorization"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        **os.environ,
        "GITHUB_API_URL": f"http://127.0.0.1:{server.server_port}",
        "GITHUB_REPOSITORY": "o/r",
        "GH_TOKEN": "t0k",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / ".github/scripts/dispatch_chunks.py"),
                str(plan),
                "--ref",
                "main",
                "--platform",
                "linux",
                "--cuda",
                "13.0",
                "--pause",
                "0",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert [b["inputs"]["chunk"] for _, b, _ in seen] == [c["id"] for c in chunks]
    path, body, auth = seen[0]
    assert path == "/repos/o/r/actions/workflows/build.yml/dispatches" and auth == "Bearer t0k"
    assert body["ref"] == "main" and body["inputs"]["platform"] == "linux" and body["inputs"]["cuda"] == "13.0"
    assert f"{len(chunks)}/{len(chunks)} chunks dispatched" in (tmp_path / "summary.md").read_text()
    dry = subprocess.run(
        [sys.executable, str(REPO / ".github/scripts/dispatch_chunks.py"), str(plan), "--ref", "main", "--dry-run"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert dry.returncode == 0 and dry.stdout.count("would dispatch") == len(chunks)


def test_eight_publishes_at_once_into_one_index_lose_nothing(tmp_path):
    index = tmp_path / "index"
    names = [f"cuw_example-0.1.{i}+cu130-cp311-cp311-manylinux_2_34_x86_64.whl" for i in range(8)]
    for i, name in enumerate(names):
        _wheel(tmp_path / f"in{i}", name, f"wheel {i}".encode())
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "cuw", "publish", str(tmp_path / f"in{i}"), str(index)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
    assert set(json.loads((index / MARKER).read_text())["files"]) == set(names)
    page = (index / "cu130" / "cuw-example" / "index.html").read_text()
    assert all(name in page for name in names)
    assert all((index / "files" / f"{name}{RECORD_SUFFIX}").is_file() for name in names)


def test_a_first_publish_beside_another_runs_temporary_files_is_not_refused(tmp_path):
    """Into a new index, a concurrent first publish leaves, for moments, its write probe and its
    marker's temp at the top: they are no foreign files (they made one of eight runs refuse the folder)."""
    index = tmp_path / "index"
    index.mkdir()
    (index / ".cuw-write-probe-x1y2").write_text("")
    (index / f".{MARKER}.abc123.partial").write_text("{")
    _wheel(tmp_path / "in", W311, b"one")
    assert publish(tmp_path / "in", index).published == [W311]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not an index")
    with pytest.raises(InputError, match="not an index made by `cuw index`"):
        publish(tmp_path / "in", tmp_path / "other")


def test_a_publish_that_looked_before_another_runs_marker_and_after_its_pages_is_not_refused(tmp_path, monkeypatch):
    """Into a new index: one publish finds no marker, then a concurrent first publish writes its marker
    and its pages, then the first lists the folder and sees pages (one of eight runs was refused so).
    The marker comes before any page, so the pages it sees are an index's."""
    from cuw.wheel.index import published_files

    index = tmp_path / "index"
    _wheel(tmp_path / "in", W311, b"one")
    publish(tmp_path / "in", index)  # the other run's marker and pages
    real_is_file = Path.is_file
    looked: list[Path] = []

    def before_the_marker(path: Path) -> bool:
        if path == index / MARKER and not looked:
            looked.append(path)
            return False  # the first look, before the other run wrote it
        return real_is_file(path)

    monkeypatch.setattr(Path, "is_file", before_the_marker)
    assert set(published_files(index)) == {W311} and looked


def test_two_different_wheels_under_one_name_are_both_refused(tmp_path):
    _wheel(tmp_path / "in" / "link-a", W311, b"one")
    _wheel(tmp_path / "in" / "link-b", W311, b"another")
    _wheel(tmp_path / "in" / "link-c", W312, b"two")
    outcome = publish(tmp_path / "in", tmp_path / "index")
    assert "2 different wheels arrived under this name" in outcome.refused[W311]
    assert outcome.published == [W312] and W311 not in json.loads((tmp_path / "index" / MARKER).read_text())["files"]


def test_pages_a_killed_publish_left_behind_the_marker_are_brought_up_to_it(tmp_path):
    index = tmp_path / "index"
    _wheel(tmp_path / "in", W311, b"one")
    _wheel(tmp_path / "in", W312, b"two")
    publish(tmp_path / "in", index)
    page = index / "cu130" / "cuw-example" / "index.html"
    page.write_text(page.read_text().replace(W312, "gone"))  # killed after the marker, before this page
    again = publish(tmp_path / "in", index)
    assert sorted(again.already) == [W311, W312] and W312 in page.read_text()


def test_publish_checks_each_wheel_and_its_record_and_refuses_that_wheel_alone(tmp_path):
    """A record saying verify failed or the link missed, a renamed wheel, a member outside the install
    tree, an unreadable record: each refuses its own wheel, and the sound one beside them is published."""
    import base64
    import hashlib

    incoming = tmp_path / "in"
    make_wheel(incoming, W311, b"sound")
    make_wheel(incoming, W312, b"verify failed", verify={"ok": False, "checks": []})
    make_wheel(incoming, "cuw_example-0.1.2+cu130-cp311-cp311-manylinux_2_34_x86_64.whl", b"7 misses", link={"misses": 7})
    renamed = make_wheel(tmp_path / "x", "cuw_example-0.1.0+cu130-cp310-cp310-manylinux_2_34_x86_64.whl", b"old", record=False)
    as_new = incoming / "cuw_example-9.9.9+cu130-cp310-cp310-manylinux_2_34_x86_64.whl"
    renamed.rename(as_new)  # a 0.1.0 wheel renamed 9.9.9, with a record vouching for its bytes
    (incoming / f"{as_new.name}{RECORD_SUFFIX}").write_text(
        json.dumps(
            {"format": 2, "wheel": as_new.name, "sha256": sha256_file(as_new), "verify": {"ok": True}, "link": {"misses": 0}}
        )
    )
    evil = incoming / "cuw_example-0.1.3+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(evil, "w") as zf:  # a RECORD that lists the escaping member with its true hash
        body = b"import os\n"
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        zf.writestr("../evil.py", body)
        info = "cuw_example-0.1.3+cu130.dist-info"
        meta = b"Metadata-Version: 2.1\nName: cuw-example\nVersion: 0.1.3+cu130\n"
        zf.writestr(f"{info}/METADATA", meta)
        meta_digest = base64.urlsafe_b64encode(hashlib.sha256(meta).digest()).rstrip(b"=").decode()
        zf.writestr(
            f"{info}/RECORD",
            f"../evil.py,sha256={digest},{len(body)}\n{info}/METADATA,sha256={meta_digest},{len(meta)}\n{info}/RECORD,,\n",
        )
    (incoming / f"{evil.name}{RECORD_SUFFIX}").write_text(
        json.dumps({"format": 2, "wheel": evil.name, "sha256": sha256_file(evil), "verify": {"ok": True}, "link": {"misses": 0}})
    )
    broken = make_wheel(incoming, "cuw_example-0.1.4+cu130-cp311-cp311-manylinux_2_34_x86_64.whl", b"broken record")
    broken.with_name(broken.name + RECORD_SUFFIX).write_text("{not json")

    out = publish(incoming, tmp_path / "index")
    assert out.published == [W311], out.refused
    why = {name.split("-")[1].split("+")[0] + "-" + name.split("-")[2]: text for name, text in out.refused.items()}
    assert why["0.1.0-cp312"] == "its build record says verify did not pass"
    assert why["0.1.2-cp311"] == "its build record says the link missed the cache (7)"
    # Renamed, its dist-info no longer matches its name (the wheel format finds that first).
    assert why["9.9.9-cp310"] == "RECORD or archive: Missing cuw_example-9.9.9+cu130.dist-info/RECORD file"
    assert why["0.1.3-cp311"] == "member '../evil.py' would be installed outside site-packages"
    assert why["0.1.4-cp311"].endswith(
        ".build.json: unreadable build record (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    )
    assert set(json.loads((tmp_path / "index" / MARKER).read_text())["files"]) == {W311}


def test_a_stale_failed_link_report_of_a_published_cell_is_history_and_an_unwritable_summary_is_no_failure(tmp_path, monkeypatch):
    cell = {"recipe": "example", "lane": "linux", "python": "3.11", "cuda": "13.0", "torch": None}
    make_wheel(tmp_path / "in", W311, b"one", cell=cell)
    stale = tmp_path / "reports" / CELL_A
    stale.mkdir(parents=True)
    (stale / "link.report.json").write_text(
        json.dumps({"ok": False, "shard_count": 4, "reasons": ["an earlier try"], "facts": {"missing_shards": [2]}})
    )
    out = publish(tmp_path / "in", tmp_path / "index", tmp_path / "reports")
    assert out.published == [W311] and out.failed_cells == {}, "the cell passed this time: not also 'link failed'"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no-such-folder" / "summary.md"))
    proc = subprocess.run(
        [sys.executable, "-m", "cuw", "publish", str(tmp_path / "in"), str(tmp_path / "index")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "could not be written" in proc.stderr and "already published" in proc.stderr
