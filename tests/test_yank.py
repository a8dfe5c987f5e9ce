"""``cuw yank`` (PEP 592): a published wheel withdrawn without removing it. The marker says so, every
page and JSON file, packages.json and the chooser (in headless Chromium) show it, a later publish
keeps it, ``--undo`` gives back the pages as they were, a GitHub-hosted index is yanked in a folder
continued from its site, and the audit reports the wheel as yanked, not as a finding."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import pytest

from conftest import need, run_cuw
from test_audit import _audit, published  # noqa: F401 (a fixture: the example's real published index)
from test_index_formats import _anchors, _dom, _shown
from wheel_maker import make_wheel
from cuw.cli.main import main
from cuw.wheel.index import CHOOSER, MARKER, PACKAGES, RECORD_SUFFIX, published_files
from cuw.wheel.publish import AssetStore, publish

TAG = "py3-none-any"
REASON = 'wrong kernels for sm_90 (see "issue 7")'


def _version_wheels(folder: Path, versions: tuple[str, ...] = ("1.0", "2.0", "3.0")) -> list[str]:
    return [make_wheel(folder, f"yanky-{v}+cu130-{TAG}.whl", v.encode()).name for v in versions]


@pytest.fixture
def index(tmp_path: Path) -> tuple[Path, list[str]]:
    incoming = tmp_path / "incoming"
    names = _version_wheels(incoming)
    out = tmp_path / "index"
    assert publish(incoming, out).published == names
    return out, names


def _pages(index: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(index.rglob("*")) if p.is_file() and p.suffix in (".html", ".json")}


def _yank(*args: str) -> tuple[int, str, str]:
    proc = run_cuw("yank", *args)
    return proc.returncode, proc.stdout, proc.stderr.strip()


def test_a_yank_shows_on_every_page_and_undo_gives_the_pages_back(index, tmp_path):
    out, names = index
    before = _pages(out)
    middle = names[1]
    assert main(["yank", middle, "--index", str(out), "--reason", REASON]) == 0
    assert json.loads((out / MARKER).read_text())["details"][middle]["yanked"] == REASON
    assert published_files(out) == {n: json.loads((out / MARKER).read_text())["files"][n] for n in names}
    for name in names:  # append-only: the file, its metadata file and its record all stay
        for suffix in ("", ".metadata", RECORD_SUFFIX):
            assert (out / "files" / f"{name}{suffix}").is_file()
    pages = [p for p in out.rglob("index.html") if p.parent.name == "yanky"]
    assert {p.parent.parent.name for p in pages} == {"simple", "cu130"}
    for page in pages:
        anchors = {a["href"].rsplit("/", 1)[1].split("#")[0].replace("%2B", "+"): a for a in _anchors(page)}
        assert anchors[middle]["data-yanked"] == REASON
        assert all("data-yanked" not in anchors[n] for n in names if n != middle)
        assert 'data-yanked="wrong kernels for sm_90 (see &quot;issue 7&quot;)"' in page.read_text()  # escaped
        files = {f["filename"]: f for f in json.loads((page.parent / "index.json").read_text())["files"]}
        assert files[middle]["yanked"] == REASON and files[names[0]]["yanked"] is False
    wheels = {w["filename"]: w for w in json.loads((out / PACKAGES).read_text())["wheels"]}
    assert wheels[middle]["yanked"] == REASON and wheels[names[2]]["yanked"] is None

    # The same yank again changes nothing; a later publish keeps it.
    assert _yank(middle, "--index", str(out), "--reason", REASON)[2].endswith(f"{middle} is already yanked: {REASON} ({out})")
    more = tmp_path / "more"
    (newest,) = _version_wheels(more, ("4.0",))
    assert publish(more, out).published == [newest]
    assert json.loads((out / MARKER).read_text())["details"][middle]["yanked"] == REASON

    # --undo: the pages as they were (but for the wheel published since).
    code, _, err = _yank(middle, "--index", str(out), "--undo")
    assert code == 0 and err.endswith(f"{middle}: yank taken back (was: {REASON}) ({out})"), err
    assert "yanked" not in json.loads((out / MARKER).read_text())["details"][middle]
    after = _pages(out)
    for page in [p for p in before if p.name == "index.json" and p.parent.name == "yanky"]:
        assert json.loads(after[page])["files"][:3] == json.loads(before[page])["files"], page
    assert _yank(middle, "--index", str(out), "--undo")[2].endswith(f"{middle} is not yanked: nothing to undo ({out})")


@pytest.mark.parametrize(
    "args, said",
    [
        (["--reason", "x"], "does not publish 'yanky-9.0+cu130-py3-none-any.whl'"),
        ([], "--reason TEXT is required"),
        (["--reason", " "], "--reason TEXT is required"),
        (["--reason", "two\nlines"], "--reason: one printable line"),
        (["--undo", "--reason", "x"], "--undo takes no --reason"),
    ],
)
def test_a_yank_that_cannot_be_made_is_one_line_and_changes_nothing(index, args, said):
    out, names = index
    before = _pages(out) | {out / MARKER: (out / MARKER).read_bytes()}
    wheel = "yanky-9.0+cu130-py3-none-any.whl" if "x" in args and "--undo" not in args else names[0]
    code, _, err = _yank(wheel, "--index", str(out), *args)
    assert code == 2 and err.startswith("cuw: error: yank: ") and len(err.splitlines()) == 1 and said in err, err
    assert _pages(out) | {out / MARKER: (out / MARKER).read_bytes()} == before


def test_a_folder_that_is_no_index_is_refused(tmp_path):
    code, _, err = _yank("a-1.0+cu130-py3-none-any.whl", "--index", str(tmp_path), "--reason", "x")
    assert (
        code == 2
        and err == f"cuw: error: yank: {tmp_path} is not an index (no {MARKER}); give the folder `cuw index` or publish made"
    )


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def test_a_github_hosted_index_is_yanked_in_a_folder_continued_from_its_site_and_publishes_keep_it(tmp_path, serve):
    """Wheels as release assets, pages on Pages: the yank continues the site into a new folder (the
    folder the pages job would deploy); the next publish, continuing from the deployed site, keeps it."""
    incoming = tmp_path / "incoming"
    names = _version_wheels(incoming)
    site = tmp_path / "site"
    store = AssetStore("https://github.com/o/r/releases/download/wheels-{recipe}/{wheel}", tmp_path / "upload")
    assert publish(incoming, site, store=store).published == names
    assert sorted(p.name for p in store.upload.iterdir()) == sorted(
        n + suffix for n in names for suffix in ("", ".metadata", RECORD_SUFFIX)
    ), "each wheel's metadata file waits for upload beside it"
    url = serve(site)
    deployed = tmp_path / "deployed"
    code, _, err = _yank(names[1], "--index", str(deployed), "--reason", REASON, "--from-url", url)
    assert code == 0, err
    (anchor,) = [a for a in _anchors(deployed / "simple" / "yanky" / "index.html") if "data-yanked" in a]
    assert anchor["data-yanked"] == REASON and "data-core-metadata" in anchor
    assert str(anchor["href"]).startswith(f"https://github.com/o/r/releases/download/wheels-yanky/{quote(names[1])}#sha256=")
    before = json.loads((site / MARKER).read_text())["details"]
    continued = json.loads((deployed / MARKER).read_text())["details"]
    assert continued == {n: before[n] | ({"yanked": REASON} if n == names[1] else {}) for n in names}
    # The pages job's next run continues from the deployed site: the yank, the upload times and metadata stay.
    again = tmp_path / "again"
    assert run_cuw("publish", str(incoming), str(again), "--from-url", serve(deployed), "--asset-url", store.url,
                   "--upload", str(tmp_path / "upload2")).returncode == 0  # fmt: skip
    assert json.loads((again / MARKER).read_text())["details"] == continued


def test_the_chooser_shows_a_yanked_wheel_as_such_in_chromium(index, serve, tmp_path):
    browser = need("chromium")
    out, names = index
    assert main(["yank", names[2], "--index", str(out), "--reason", "segfaults on import"]) == 0
    url = serve(out)
    profile = tmp_path / "profile"
    query = "package=yanky&lane=linux&python=3.12&cuda=13.0&torch=none"
    offered = _dom(str(browser), f"{url}/{CHOOSER}?{query}", profile)
    assert _shown(offered, "result") == "built: yanky 2.0+cu130", "the newest wheel not yanked is offered"
    assert _shown(offered, "yanked") == "yanked, not offered: 3.0+cu130: segfaults on import"
    for name in names[:2]:
        assert main(["yank", name, "--index", str(out), "--reason", "old"]) == 0
    # A fresh profile: the test server's Last-Modified counts whole seconds, so a yank in the same second as
    # the first view would be answered "304 Not Modified" to the page's revalidating fetch.
    only = _dom(str(browser), f"{url}/{CHOOSER}?{query}", tmp_path / "profile-after")
    assert '<p id="result" class="yanked">' in only
    assert _shown(only, "result") == "yanked: yanky 3.0+cu130 (segfaults on import); installed only by this exact pin"
    assert _shown(only, "command") == f"pip install --index-url {url}/cu130/ yanky==3.0+cu130"


def test_the_audit_reports_a_yanked_wheel_as_yanked_not_as_a_finding(published, serve):  # noqa: F811
    recipes, index = published
    (wheel,) = published_files(index)
    assert main(["yank", wheel, "--index", str(index), "--reason", REASON]) == 0
    yanked = [("yanked", wheel, f"yanked: {REASON} (its file stays; installable by an == pin)")]
    assert [(f.kind, f.subject, f.detail) for f in _audit(recipes, str(index))] == yanked
    url = serve(index)
    proc = run_cuw("audit", "--index", url, "--package", "example", "--on-host", "--recipes", str(recipes))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"### audit of {url}: 0 gap(s), 0 stale, 0 wheel finding(s), 1 yanked")
    assert f"| yanked | {wheel} | yanked: {REASON}" in proc.stdout
