"""A hostile user of today's verbs and options: ``matrix --published``, ``audit --index``,
``publish --from-url/--asset-url/--upload``, ``--image LANE=REF`` and the local registry.

Each bad input must end in one ``cuw: error:`` line naming the option and the fix (exit 2), an
index fault in a finding or an error (never a crash or a silently wrong plan), and nothing written
where the run was refused. No build here: small real wheels (``wheel_maker``), real HTTP servers
on 127.0.0.1, the CLI called in-process (``cuw.cli.main.main``).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, need, path_without, serving
from wheel_maker import make_wheel
from cuw.base.errors import CuwError
from cuw.ci import audit
from cuw.ci.published import cell_status, read_records
from cuw.cli.main import main
from cuw.config.cell import Cell
from cuw.config.inputs import cell_inputs, inputs_digest
from cuw.config.policy import image_overrides, load_policy
from cuw.config.recipe import load_recipe
from cuw.toolchain.toolkit import Toolkit
from cuw.wheel.index import MARKER
from cuw.wheel.publish import RECORD_SUFFIX, AssetStore, check_asset_store, continue_from, publish

# The plan's cell of the example on linux / CUDA 13.0 (the Python axis collapses to the lowest).
CELL = Cell("example", "linux", "3.10", "13.0", None)
WHEEL = "cuw_example-0.1.0+cu130-py3-none-manylinux_2_31_x86_64.whl"
DIGEST = "a" * 64
ASSETS = "https://github.com/o/r/releases/download/wheels-{recipe}/{wheel}"


def _incoming(folder: Path, payload: bytes = b"one") -> Path:
    recipes = REPO / "recipes"
    inputs = cell_inputs(load_recipe("example", recipes), load_policy(recipes), CELL, "")
    make_wheel(folder, WHEEL, payload, cell=CELL.to_dict(), inputs=inputs, inputs_digest=inputs_digest(inputs), recipe="example")
    return folder


@pytest.fixture
def index(tmp_path) -> Path:
    """An index holding the example's linux / CUDA 13.0 wheel with today's inputs."""
    out = tmp_path / "index"
    assert publish(_incoming(tmp_path / "incoming"), out).published == [WHEEL]
    return out


def _edit_record(index: Path, drop: tuple[str, ...] = (), **fields) -> None:
    path = index / "files" / f"{WHEEL}{RECORD_SUFFIX}"
    record = {k: v for k, v in json.loads(path.read_text()).items() if k not in drop}
    record.update(fields)
    path.write_text(json.dumps(record))


def _cuw(capsys, *argv: str) -> tuple[int, str]:
    """``cuw ARGV`` in this process: its exit code and its stderr."""
    code = main(list(argv))
    return code, capsys.readouterr().err


def _one_error(err: str, *words: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("cuw: error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# -- where the index is ---------------------------------------------------------------------------


def test_an_index_location_is_a_folder_or_an_http_url_and_anything_else_says_which(index, tmp_path, capsys):
    folder = read_records(str(index))
    assert read_records(index.as_uri()) == folder, "file:// is the folder"
    with pytest.raises(CuwError, match=r"--published: an empty value"):
        read_records("")  # before: the current folder, read as an index
    with pytest.raises(
        CuwError, match=r"--published ftp://127.0.0.1/x: ftp:// is not read; give the index folder or the http\(s\) URL"
    ):
        read_records("ftp://127.0.0.1/x")
    with pytest.raises(CuwError, match=r"is a file, not an index folder"):
        read_records(str(index / MARKER))
    with pytest.raises(CuwError, match=r"--index .*: no such index folder") as exc:
        read_records(str(tmp_path / "nowhere"), "--index")
    assert "--published" not in str(exc.value), "audit's error names audit's option"
    with serving(index) as url:
        assert read_records("HTTP" + url[4:] + "/") == folder, "a scheme is case-blind, a trailing / is no matter"
    code, err = _cuw(capsys, "matrix", "--package", "example", "--on-host", "--published", "   ")
    assert code == 2
    _one_error(err, "--published", "empty")


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers 200 at once, then one byte of its body every 0.2 s (for 8 s at most)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(40):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.2)

    def log_message(self, *args) -> None:
        pass


def test_a_server_that_trickles_or_never_answers_is_given_up_on_at_the_deadline(monkeypatch):
    from cuw.base import http as cuw_http

    monkeypatch.setattr(cuw_http, "DEADLINE_S", 1.0)
    monkeypatch.setattr(cuw_http, "TIMEOUT_S", 0.5)
    trickle = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=trickle.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does), never answers
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen(8)

    def not_http() -> None:
        while True:
            try:
                conn, _ = garbage.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"hello, this is no web server\r\n\r\n")

    threading.Thread(target=not_http, daemon=True).start()
    try:
        for url, why in (
            (f"http://127.0.0.1:{trickle.server_address[1]}", "no whole answer in 1 s"),
            (f"http://127.0.0.1:{silent.getsockname()[1]}", "timed out"),
            (f"http://127.0.0.1:{garbage.getsockname()[1]}", "hello, this is no web server"),
        ):
            started = time.monotonic()
            with pytest.raises(CuwError, match=rf"--published: cannot read {url}/cuw-index.json \({why}"):
                read_records(url)  # before: the trickle was read to its end, a byte at a time
            assert time.monotonic() - started < 4
            with pytest.raises(CuwError, match=r"--from-url: cannot read"):
                continue_from(url, Path("/nonexistent/never-made"))
    finally:  # before: a BadStatusLine from the last one was an internal error
        trickle.shutdown()
        silent.close()
        garbage.close()


# -- build records the plan cannot read ------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"cell": "linux", "inputs": [1, 2]},
        {"inputs": {"cell": ["example-linux-py3.10-cu13.0-notorch"]}},
        {"inputs": "example-linux-py3.10-cu13.0-notorch"},
        {
            "drop": ("inputs", "inputs_digest"),
            "cell": {"recipe": "example", "lane": "linux", "python": 3.1, "cuda": ["13.0"], "torch": None},
        },
    ],
    ids=["cell-a-string-inputs-a-list", "inputs-cell-a-list", "inputs-a-string", "old-record-cell-of-wrong-types"],
)
def test_a_record_that_names_no_cell_stops_the_plan_instead_of_rebuilding_the_cell(index, capsys, fields):
    recipes = REPO / "recipes"
    assert cell_status([(load_recipe("example", recipes), CELL, "")], load_policy(recipes), read_records(str(index))).current == [
        CELL.id
    ]
    _edit_record(index, **fields)
    # Before: the cell was planned as missing; its rebuild would then be refused by publish (same name).
    code, err = _cuw(capsys, "matrix", "--package", "example", "--on-host", "--published", str(index))
    assert code == 2
    # The record's reader names the field that does not check; one that checks but names no cell, the plan.
    _one_error(err, "--published", WHEEL, "restore the index")
    assert "names no cell" in err or "not an object" in err or "not a string" in err, err


# -- audit ----------------------------------------------------------------------------------------

TOOLKIT = Toolkit(Path("/nonexistent-toolkit"), "13.0")  # no wheel here has device code to read


def _audit(location: str) -> list[audit.Finding]:
    recipes = REPO / "recipes"
    return audit.audit(location, [load_recipe("example", recipes)], load_policy(recipes), TOOLKIT, {})


@pytest.mark.parametrize(
    "fields",
    [
        {"cell": {"recipe": "example", "lane": "linux", "python": "3.10", "cuda": ["13.0"], "torch": None}},
        {"cell": {"recipe": "example", "lane": "nolane", "python": "3.10", "cuda": "13.0", "torch": None}},
        {"cell": {"recipe": "example", "lane": "linux", "python": "3.10", "cuda": "13.0"}},
        {"cell": {"recipe": "torchsort", "lane": "linux", "python": "3.10", "cuda": "13.0", "torch": None}},
        {"recipe": ["example"]},
        {"recipe": {"a": 1}},
    ],
    ids=["cuda-a-list", "unknown-lane", "no-torch-key", "cell-of-another-recipe", "recipe-a-list", "recipe-an-object"],
)
def test_audit_reports_a_junk_record_as_a_finding_of_its_wheel_and_never_crashes(index, fields):
    _edit_record(index, **fields)
    findings = _audit(str(index))  # before: TypeError (unhashable list), or "unknown lane" naming no file
    mine = [f for f in findings if f.kind == "wheel" and f.subject == WHEEL]
    assert [f.detail for f in mine] == ["its build record names no cell of a known recipe"], findings


def test_audit_names_a_wheel_of_a_cuda_line_the_policy_dropped_instead_of_failing(index):
    _edit_record(index, cell={"recipe": "example", "lane": "linux", "python": "3.10", "cuda": "12.6", "torch": None})
    findings = _audit(str(index))  # before: exit 2, "recipes/defaults.yml: archs.cuda has no list for CUDA 12.6"
    assert [f.detail for f in findings if f.subject == WHEEL] == [
        "not checked: its cell is outside today's policy (recipes/defaults.yml: archs.cuda has no list for CUDA 12.6 "
        "(cell example-linux-py3.10-cu12.6-notorch))"
    ]


def test_audit_reads_the_wheels_of_a_release_asset_index_from_their_urls(tmp_path):
    assets, site = tmp_path / "assets", tmp_path / "site"
    assets.mkdir()
    with serving(assets) as a_url:
        store = AssetStore(a_url + "/{recipe}/{wheel}", tmp_path / "upload")
        assert publish(_incoming(tmp_path / "incoming"), site, store=store).published == [WHEEL]
        (assets / "example").mkdir()
        shutil.copy2(tmp_path / "upload" / WHEEL, assets / "example" / WHEEL)
        assert not (site / "files" / WHEEL).exists(), "the wheel is an asset, not a file of the site"
        with serving(site) as s_url:
            for location in (str(site), s_url):
                details = [f.detail for f in _audit(location) if f.subject == WHEEL]
                # Before: "cannot read <site>/files/<wheel> (404)" over HTTP, "No such file" from the folder.
                assert details and all(d.startswith(("compiled:", "arch:")) for d in details), (location, details)
        (assets / "example" / WHEEL).write_bytes(b"not a zip")  # an asset replaced by junk: a finding, not a crash
        # The audit checks the size and sha256 of what it reads before it opens it: not checked further.
        details = [f.detail for f in _audit(str(site)) if f.subject == WHEEL]
        assert len(details) == 1 and details[0].startswith(("truncated:", "other bytes:")), details


def test_audit_never_writes_its_report_into_the_index_it_reads(index, capsys):
    marker = (index / MARKER).read_bytes()
    for target in (index / MARKER, index / "files" / "report.md", index / "audit.html"):
        code, err = _cuw(capsys, "audit", "--package", "example", "--on-host", "--index", str(index), "--output", str(target))
        assert code == 2
        _one_error(err, "--output", "inside the index")
    assert (index / MARKER).read_bytes() == marker, "before: the marker was overwritten by the report"
    code, err = _cuw(
        capsys, "matrix", "--package", "example", "--on-host", "--published", str(index), "--output", str(index / MARKER)
    )
    assert code == 2 and (index / MARKER).read_bytes() == marker
    _one_error(err, "--output", "inside the index")


# -- publish: --asset-url, --upload, --from-url ---------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "https://x/{wheel}/{wheel.__class__}",  # attribute access: the str class's repr in every URL
        "https://x/{wheel}/{wheel.__class__.__init__.__globals__}",  # before: an internal error
        "https://x/{recipe[0]}/{wheel}",  # indexing
        "https://x/{{wheel}}",  # escaped: every wheel the same URL
        "https://x/{wheel!r}",
        "https://x/{wheel:>90}",
        "https://x/{0}/{wheel}",
        "https://x/{}/{wheel}",
        "https://x/{unknown}/{wheel}",
        "https://x/{recipe}/",
        "https://{wheel}",  # the host made of the wheel's name
        "https://x y/{wheel}",
        "https://x/{wheel}\n",
        'https://x/{wheel}"><script>',
        "ftp://x/{wheel}",
        "https:///{wheel}",
        "https://x/{wheel}/{",
    ],
)
def test_an_asset_url_template_fills_in_recipe_and_wheel_only(template, tmp_path):
    with pytest.raises(CuwError, match=r"^--asset-url "):
        check_asset_store(AssetStore(template, tmp_path / "upload"))


@pytest.mark.parametrize(
    "template", [ASSETS, "http://127.0.0.1:8000/{recipe}/{wheel}", "https://x/{wheel}", "https://x/a%20b/{wheel}?raw=1"]
)
def test_a_plain_asset_url_template_is_taken(template, tmp_path):
    check_asset_store(AssetStore(template, tmp_path / "upload"))


@pytest.mark.parametrize(
    "layout",
    ["upload=index", "upload-in-index", "upload=incoming", "upload-in-incoming", "index-in-incoming", "incoming-in-index"],
)
def test_publish_refuses_folders_that_overlap_before_writing(tmp_path, capsys, layout):
    incoming = _incoming(tmp_path / "in")
    index = {"index-in-incoming": incoming / "idx"}.get(layout, tmp_path / "idx")
    if layout == "incoming-in-index":
        index = tmp_path / "idx"
        publish(_incoming(tmp_path / "first"), index)
        incoming = _incoming(index / "new")
    upload = {
        "upload=index": index,
        "upload-in-index": index / "assets",
        "upload=incoming": incoming,
        "upload-in-incoming": incoming / "up",
    }.get(layout, tmp_path / "up")
    before = _files(tmp_path)
    code, err = _cuw(capsys, "publish", str(incoming), str(index), "--asset-url", ASSETS, "--upload", str(upload))
    assert code == 2, err
    _one_error(err, "give")
    assert _files(tmp_path) == before, "a refused publish writes nothing"


def test_a_read_only_index_is_named_with_the_fix(index, tmp_path, capsys):
    import subprocess

    if subprocess.run(["chattr", "+i", str(index)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable folder, read-only even to root) is not available here")
    try:
        if os.access(index, os.W_OK) and not (index / "probe").exists():
            try:
                (index / "probe").write_text("x")
            except OSError:
                pass
            else:
                pytest.skip("chattr +i did not make the folder read-only")
        code, err = _cuw(capsys, "publish", str(_incoming(tmp_path / "in2", b"two")), str(index))
        assert code == 2
        _one_error(err, f"INDEX {index}: cannot write there", "pick a writable folder")  # before: its lock file, no fix
    finally:
        subprocess.run(["chattr", "-i", str(index)], capture_output=True)


def _site(tmp_path: Path, edit=None) -> str:
    """An index of release assets served over HTTP; ``edit(marker)`` spoils its marker."""
    site = tmp_path / "site"
    publish(_incoming(tmp_path / "site-in"), site, store=AssetStore(ASSETS, tmp_path / "site-up"))
    if edit is not None:
        marker = json.loads((site / MARKER).read_text())
        edit(marker)
        (site / MARKER).write_text(json.dumps(marker))
    return _site.servers.enter_context(serving(site))  # type: ignore[attr-defined]


_site.servers = contextlib.ExitStack()  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _stop_sites():
    yield
    _site.servers.close()  # type: ignore[attr-defined]


def test_continuing_an_online_index_needs_an_empty_folder(tmp_path):
    url = _site(tmp_path)
    assert continue_from(url, tmp_path / "new") == 1
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine\n")
    with pytest.raises(CuwError, match=r"--from-url: .*busy holds other files .*give a new or empty folder"):
        continue_from(url, busy)  # before: the marker and records were written among the user's files
    assert _files(busy) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert continue_from(url, empty) == 1


def test_a_mistyped_incoming_folder_leaves_the_index_to_continue_untouched(tmp_path, capsys):
    url = _site(tmp_path)
    index = tmp_path / "index"
    code, err = _cuw(capsys, "publish", str(tmp_path / "typo"), str(index), "--from-url", url)
    assert code == 2
    _one_error(err, "typo", "is not a folder")
    assert not index.exists(), "before: the index was continued, and the corrected run refused (already holds an index)"
    code, err = _cuw(capsys, "publish", str(_incoming(tmp_path / "in", b"two")), str(index), "--from-url", url)
    assert code == 0, err


def _add(name: str, sha: object = "0" * 64, remote: object = None):
    def edit(marker: dict) -> None:
        marker["files"][name] = sha
        marker["remote"][name] = remote if remote is not None else {"url": f"https://x/{name}", "size": 1}

    return edit


def _spoil_remote(marker: dict) -> None:
    marker["remote"][WHEEL] = {"url": "javascript:alert(1)", "size": "big"}


def _spoil_sha(marker: dict) -> None:
    marker["files"][WHEEL] = ["x"]


@pytest.mark.parametrize(
    "edit,why",
    [
        (_add("a/b.whl"), "not a wheel file name"),
        (_add(".."), "not a wheel file name"),
        (_add("..whl"), "not a wheel file name"),
        (_add("notes.txt"), "not a wheel file name"),
        (_spoil_sha, "is not an index record"),
        (_spoil_remote, "is not an index record"),
    ],
    ids=["slash", "dotdot", "dot-name", "not-a-wheel", "sha-a-list", "remote-url-javascript"],
)
def test_a_spoiled_online_marker_is_refused_before_anything_is_written(tmp_path, edit, why):
    url = _site(tmp_path, edit)
    target = tmp_path / "new"
    with pytest.raises(CuwError, match=rf"--from-url: .*{why}"):
        continue_from(url, target)  # before: files/ made, or the junk marker written for publish to trip on
    assert not target.exists()


# -- --image and the local registry ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value,words",
    [
        ("mac=r/i@sha256:" + DIGEST, ("--image", "mac", "linux")),  # before: "unknown lane 'mac'", no option named
        ("LINUX=r/i@sha256:" + DIGEST, ("--image", "LINUX")),
        ("linux=R/I@sha256:" + DIGEST, ("--image", "lowercase")),  # before: "pin the image by digest", which it is
        ("linux=r//i@sha256:" + DIGEST, ("--image", "r//i")),
        ("linux=r/i:@sha256:" + DIGEST, ("--image", "r/i:@")),
        ("linux=r/i@sha256:" + DIGEST[1:], ("--image", "64")),
        ("linux=r/i@sha256:" + DIGEST + "a", ("--image", "64")),
        ("linux=--rm@sha256:" + DIGEST, ("--image", "--rm")),
        ("linux=r/i@sha256:" + DIGEST + ",linux=r/j@sha256:" + DIGEST, ("--image", "twice")),
    ],
)
def test_an_image_override_names_the_option_and_what_is_wrong(value, words):
    with pytest.raises(CuwError) as exc:
        image_overrides([value], load_policy(REPO / "recipes"))
    for word in words:
        assert word in str(exc.value), (word, str(exc.value))


def test_an_image_override_takes_spaces_around_its_parts_and_a_registry_port():
    policy = load_policy(REPO / "recipes")
    ref = "127.0.0.1:5000/cuw-standin:tag@sha256:" + DIGEST
    assert image_overrides([f" linux = {ref} "], policy)["linux"] == ref


def test_the_local_registry_never_takes_a_server_already_on_its_port_for_itself(tmp_path, monkeypatch):
    need("registry")
    from cuw.toolchain import registry

    class Foreign(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args) -> None:
            pass

    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    taken = squatter.server_address[1]
    ports = iter([taken])
    real = registry.free_port
    monkeypatch.setattr(registry, "free_port", lambda: next(ports, None) or real())  # the first port picked is lost to a race
    try:
        with registry.local_registry(tmp_path / "reg", lambda _: None, wait_s=20) as found:
            assert found.host != f"127.0.0.1:{taken}", "before: the squatter was taken for the registry"
            with urllib_open(f"http://{found.host}/v2/") as response:
                assert response.headers.get("Docker-Distribution-Api-Version") == "registry/2.0"
    finally:
        squatter.shutdown()


def urllib_open(url: str):
    import urllib.request

    return urllib.request.urlopen(url, timeout=10)


def test_a_docker_mode_workflow_checks_the_engine_and_the_index_before_making_anything(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    shutil.copy2(REPO / ".github" / "workflows" / "build.yml", repo / ".github" / "workflows" / "build.yml")
    monkeypatch.chdir(repo)
    # docker out of reach: nothing of docker mode can start, whatever the checks let through.
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "docker", "podman"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    base = ["workflow", "example", "--recipes", str(REPO / "recipes"), "--chunk", "example-linux-cu13.0", "--engine", "docker"]
    for extra, words in (
        (["--index", str(afile)], ("--index", "is a file")),
        (["--index", str(tmp_path / "deep" / "idx")], ("docker",)),
    ):
        code, err = _cuw(capsys, *base, *extra)
        assert code == 2
        _one_error(err, *words)
        # Before: the run folder, the tool cache and the index's parents were made first.
        assert not (repo / ".cuw").exists() and not (tmp_path / "deep").exists(), _files(repo)
    assert os.environ["PATH"] != ""  # (monkeypatch restores it)


def test_a_docker_mode_workflow_without_a_registry_stops_before_building_an_image(tmp_path, monkeypatch, capsys):
    need("docker", "nodejs")
    from cuw.toolchain import image_build

    def no_build(*args, **kwargs):
        raise AssertionError("an image was about to be built")

    monkeypatch.setattr(image_build, "build_image", no_build)
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    shutil.copy2(REPO / ".github" / "workflows" / "build.yml", repo / ".github" / "workflows" / "build.yml")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "docker-registry", "registry"))
    code, err = _cuw(
        capsys,
        "workflow",
        "example",
        "--recipes",
        str(REPO / "recipes"),
        "--chunk",
        "example-linux-cu13.0",
        "--engine",
        "docker",
        "--index",
        str(tmp_path / "idx"),
    )
    assert code == 2
    _one_error(err, "--engine docker", "apt-get install docker-registry")  # before: after the two images were built
    assert not (repo / ".cuw").exists() and not (tmp_path / "idx").exists()


# -- the run's environment ------------------------------------------------------------------------


@pytest.mark.parametrize("verb", [("shard", "example", "1/2"), ("link", "example")])
@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan"])
def test_a_junk_sample_interval_is_refused_before_the_job_folder_is_made(verb, value, tmp_path, monkeypatch, capsys):
    """CUW_SAMPLE_S is checked before the job takes its lock: a refused run leaves no cell folder or lock behind."""
    monkeypatch.setenv("CUW_SAMPLE_S", value)
    work = tmp_path / "work"
    folders = ("--work", str(work), "--artifacts", str(tmp_path / "artifacts"), "--dist", str(tmp_path / "dist"))
    code, err = _cuw(capsys, *verb, "--recipes", str(REPO / "recipes"), *folders[: 4 if verb[0] == "shard" else 6])
    assert code == 2, err
    _one_error(err, "CUW_SAMPLE_S", repr(value))
    assert _files(work) == []


@pytest.mark.parametrize("verb", [("shard", "example", "1/2"), ("link", "example")])
@pytest.mark.parametrize("where", ["folder", "missing"])
def test_a_named_cache_tool_that_is_not_there_is_refused_before_the_job_folder_is_made(
    verb, where, tmp_path, monkeypatch, capsys
):
    """CUW_CCACHE naming a folder or nothing: one line, and no seat, probe file or lock left in --work
    (the tool was checked only when the job prepared its cache, after it had made its folder)."""
    named = tmp_path / "tools" if where == "folder" else tmp_path / "no-ccache"
    if where == "folder":
        named.mkdir()
    monkeypatch.setenv("CUW_CCACHE", str(named))
    work = tmp_path / "work"
    folders = ("--work", str(work), "--artifacts", str(tmp_path / "artifacts"), "--dist", str(tmp_path / "dist"))
    code, err = _cuw(capsys, *verb, "--recipes", str(REPO / "recipes"), *folders[: 4 if verb[0] == "shard" else 6])
    assert code == 2, err
    _one_error(err, f"CUW_CCACHE={named}", "no executable file there")
    assert _files(work) == []


@pytest.mark.parametrize("spoil", ["folder", "no-parent"])
def test_the_reference_generator_names_a_page_it_cannot_write_in_one_line(spoil, tmp_path, monkeypatch, capsys):
    """``python -m cuw.cli.reference`` where docs/cli.md is a folder, or docs/ is gone: one error line, exit 2, nothing torn."""
    from cuw.cli import reference

    page = tmp_path / "docs" / "cli.md"
    if spoil == "folder":
        page.mkdir(parents=True)
    monkeypatch.setattr(reference, "CLI_MD", page)
    assert reference.main() == 2
    _one_error(capsys.readouterr().err, str(page))
    assert _files(tmp_path) == (["docs", "docs/cli.md"] if spoil == "folder" else [])
