"""The index on GitHub's terms, here: wheels kept as release assets, uploaded by the forge's own
verb (``cuw upload``, what ``pages.yml`` runs) to a stand-in of GitHub's releases API on 127.0.0.1
(tests/github_standin.py: it paginates, answers 422 for a present name, rate-limits, and fails
after k uploads), the pages on a plain HTTP server (GitHub Pages), each publish continuing from
what is online. What only GitHub can show is its own service; every request the forge makes of it
is made here.
"""

from __future__ import annotations

import collections
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO
from cuw.base.errors import CuwError
from cuw.base.files import sha256_of
from cuw.ci import github_release
from cuw.cli.main import main
from cuw.wheel.index import MARKER
from cuw.wheel.publish import AssetStore, continue_from, publish
from github_standin import Releases
from wheel_maker import make_wheel

REPO_NAME = "acme/wheels"
W010 = "cuw_example-0.1.0+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
W011 = "cuw_example-0.1.1+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
OTHER = "cuw_other-1.0.0+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"


def _serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    folder.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def pages(tmp_path):
    """(folder, URL): GitHub Pages, a plain static server of the deployed site."""
    server, url = _serve(tmp_path / "pages")
    yield tmp_path / "pages", url
    server.shutdown()


@pytest.fixture
def github(monkeypatch):
    """A function making a fresh stand-in of the releases API, the environment pointed at it as
    Actions points it at GitHub; retries do not wait."""
    made: list[Releases] = []
    monkeypatch.setattr(github_release, "BACKOFF_S", 0.0)

    def start(**options) -> Releases:
        standin = Releases(REPO_NAME, **options)
        threading.Thread(target=standin.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        made.append(standin)
        for name in ("GITHUB_API_URL", "GITHUB_SERVER_URL"):
            monkeypatch.setenv(name, standin.url)
        monkeypatch.setenv("GITHUB_REPOSITORY", REPO_NAME)
        monkeypatch.setenv("GH_TOKEN", standin.token)
        monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        return standin

    yield start
    for standin in made:
        standin.shutdown()


def _template(url: str) -> str:
    return url + f"/{REPO_NAME}/releases/download/wheels-{{recipe}}/{{wheel}}"


def _cuw(capsys, *args: str) -> tuple[int, str]:
    """The command line in this process (the environment the test set is the run's); exit code and stderr."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def _published(tmp_path: Path, capsys, url: str) -> tuple[Path, Path]:
    """(upload folder, site): two wheels of two recipes published by `cuw publish` for release
    assets at ``url``; beside each wheel in the upload folder, its record and a ``.metadata`` file
    (any file named after its wheel travels with it)."""
    incoming, site, upload = tmp_path / "incoming", tmp_path / "site", tmp_path / "upload"
    make_wheel(incoming, W010, b"first", recipe="example")
    make_wheel(incoming, OTHER, b"other", recipe="other")
    code, err = _cuw(capsys, "publish", incoming, site, "--asset-url", _template(url), "--upload", upload)
    assert code == 0, err
    for wheel in (W010, OTHER):
        (upload / f"{wheel}.metadata").write_text(f"Metadata-Version: 2.1\nName: {wheel.split('-')[0]}\n")
    return upload, site


def _expected(upload: Path) -> dict[str, dict[str, bytes]]:
    """tag -> name -> bytes: what the releases hold once every file is uploaded."""
    out: dict[str, dict[str, bytes]] = collections.defaultdict(dict)
    for path in upload.iterdir():
        out["wheels-other" if path.name.startswith("cuw_other") else "wheels-example"][path.name] = path.read_bytes()
    return dict(out)


@pytest.mark.parametrize("digests", [True, False], ids=["digest", "no-digest"])
@pytest.mark.parametrize("how", ["500", "drop", "lost"])
def test_a_run_that_fails_after_any_k_uploads_is_finished_by_the_next_with_nothing_duplicated_or_replaced(
    github, tmp_path, capsys, how, digests
):
    """For every k of n: the first run's uploads fail from the (k+1)th on (answered 500; cut off
    half-way, the asset left as GitHub leaves it, state new; or stored whole but the answer lost),
    and the next run completes: every file once, its bytes, nothing uploaded twice, no uploaded
    asset deleted. An asset list takes pages of 2, so the rerun finds the first run's on every page."""
    upload, site = _published(tmp_path, capsys, github().url)
    want = _expected(upload)
    n = sum(map(len, want.values()))
    assert n == 6
    for k in range(n + 1):
        standin = github(digests=digests)
        site_copy = tmp_path / f"site-{k}"  # the marker names the stand-in's address: this one's
        shutil.copytree(site, site_copy)
        marker = site_copy / MARKER
        first_url = json.loads(marker.read_text())["remote"][W010]["url"].split(f"/{REPO_NAME}/")[0]
        marker.write_text(marker.read_text().replace(first_url, standin.url))
        standin.fail_after, standin.fail_how = k, how
        code, err = _cuw(capsys, "upload", upload, site_copy)
        if how == "lost" or k == n:  # an answer lost after the asset was stored: the run finds it and goes on
            assert code == 0, (k, err)
        else:
            assert code == 2 and err.strip().splitlines()[-1].startswith("cuw: error: upload: "), (k, err)
            assert "failed 4 times" in err and "run it again" in err, err
        assert len(standin.completed) == (n if how == "lost" else k), (k, standin.completed)
        standin.fail_after = None
        code, err = _cuw(capsys, "upload", upload, site_copy)
        assert code == 0, (k, err)
        assert {tag: standin.held(tag) for tag in want} == want, k
        assert collections.Counter(standin.completed) == collections.Counter(
            f"{t}/{name}" for t, names in want.items() for name in names
        ), f"k={k}: an asset uploaded twice"
        assert all(state == "new" for _, state in standin.deleted), f"k={k}: an uploaded asset was deleted: {standin.deleted}"
        skipped = n if how == "lost" else k  # what the first run left: found with the same bytes, not sent again
        assert err.count("the same bytes are there") == skipped, (k, err)
        assert f"{n - skipped} uploaded, {skipped} already there; 6 asset(s) verified as the index lists them" in err, err
        assert any("page=2" in path for _, path in standin.requests), "the asset lists were not paged"
        downloaded = [p for m, p in standin.requests if m == "GET" and "/releases/download/" in p]
        assert bool(downloaded) == (not digests and skipped > 0), "without a digest a same-size asset is downloaded and hashed"


@pytest.fixture
def ready(github, tmp_path, capsys) -> tuple[Releases, Path, Path]:
    standin = github()
    upload, site = _published(tmp_path, capsys, standin.url)
    return standin, upload, site


def test_an_asset_uploaded_meanwhile_answers_422_and_is_taken_when_its_bytes_are_the_same(ready, capsys):
    standin, upload, site = ready
    standin.add_asset("wheels-example", W010, (upload / W010).read_bytes())
    standin.hide_once = {W010}  # the first listing misses it: another run uploaded it after the list
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 0, err
    assert f"wheels-example/{W010}: HTTP 422" in err and f"wheels-example/{W010}: the same bytes are there" in err
    assert f"wheels-example/{W010}" not in standin.completed and len(standin.completed) == 5


@pytest.mark.parametrize("digests", [True, False], ids=["digest", "no-digest"])
def test_an_asset_of_other_bytes_stops_the_run_named_and_is_never_replaced(github, tmp_path, capsys, digests):
    standin = github(digests=digests)
    upload, site = _published(tmp_path, capsys, standin.url)
    other = bytearray((upload / W010).read_bytes())
    other[-1] ^= 1  # the same size: without a digest it must be downloaded to be told apart
    standin.add_asset("wheels-example", W010, bytes(other))
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"cuw: error: upload: wheels-example/{W010}: the release already holds other bytes"), line
    assert ("digest: sha256" if digests else "downloaded: sha256") in line and "never replaced" in line
    assert standin.held("wheels-example")[W010] == bytes(other) and standin.deleted == []
    assert standin.completed == [], "nothing after the first asset of other bytes is uploaded"


def test_rate_limits_are_waited_out_within_the_bound_and_a_longer_one_is_one_line(ready, capsys, monkeypatch):
    standin, upload, site = ready
    standin.faults = [
        (429, {"Retry-After": "1"}, {"message": "slow down"}),
        (
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 1)},
            {"message": "API rate limit exceeded"},
        ),
        (403, {}, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."}),
    ]
    monkeypatch.setattr(github_release, "RATE_WAIT_MAX_S", 70.0)
    sleeps: list[float] = []
    monkeypatch.setattr(github_release, "_sleep", sleeps.append)
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 0, err
    assert err.count("rate limited") == 3 and sleeps[0] == 1.0 and 0 < sleeps[1] <= 2.0 and sleeps[2] == 60.0, sleeps
    assert len(standin.completed) == 6
    # A limit that lifts past the bound: one line, no wait, nothing half done.
    standin.faults = [(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 3600)}, {"message": "x"})]
    sleeps.clear()
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 2 and sleeps == [], err
    assert re.search(r"cuw: error: upload: GitHub's rate limit: GET .* answers HTTP 403 .* lifts in 36\d\d s", err), err
    # A 403 that is no rate limit (a missing permission) is not waited for.
    standin.faults = [(403, {}, {"message": "Resource not accessible by integration"})]
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 2 and sleeps == [] and "the token needs contents: write" in err, err


def test_transient_5xx_answers_are_tried_again_a_bounded_number_of_times(ready, capsys):
    standin, upload, site = ready
    standin.faults = [(502, {}, {"message": "Bad Gateway"}), (503, {}, {"message": "Unavailable"})]
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 0 and err.count("trying again") == 2, err
    standin.forever = (500, {}, {"message": "Server Error"})
    before = len(standin.requests)
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 2 and len(standin.requests) - before == github_release.TRIES, err
    assert err.strip().splitlines()[-1].startswith("cuw: error: upload: GET ") and "HTTP 500" in err


def test_the_verification_pass_fails_when_a_listed_asset_is_not_there(ready, capsys, tmp_path):
    """The pages are deployed only after every asset the index lists is there as listed: one lost
    from an earlier publish fails the run, naming it."""
    standin, upload, site = ready
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 0, err
    gone = next(i for i, a in standin.assets.items() if a["name"] == OTHER)
    del standin.assets[gone]
    later = tmp_path / "later"
    later.mkdir()
    shutil.copy2(upload / f"{W010}.metadata", later)
    code, err = _cuw(capsys, "upload", later, site)
    assert code == 1, err
    assert f"upload: not as listed: wheels-other/{OTHER}: no such asset" in err
    assert "the pages are not deployed" in err.strip().splitlines()[-1]


def test_bad_input_is_one_line_naming_the_fix(ready, capsys, monkeypatch, tmp_path):
    standin, upload, site = ready
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("x")
    code, err = _cuw(capsys, "upload", stray, site)
    assert code == 2 and "notes.txt in" in err and "belongs to no wheel" in err, err
    code, err = _cuw(capsys, "upload", upload, site, "--repo", "acme/elsewhere")
    assert code == 2 and "not a release asset of acme/elsewhere" in err, err
    monkeypatch.delenv("GH_TOKEN")
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 2 and "set GH_TOKEN (or GITHUB_TOKEN)" in err, err
    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    code, err = _cuw(capsys, "upload", upload, site)
    assert code == 2 and "HTTP 401 Bad credentials" in err and "contents: write" in err, err
    assert standin.completed == []


def test_each_publish_continues_from_the_online_index_and_pip_installs_through_the_asset_urls(github, pages, tmp_path, capsys):
    """pages.yml's steps, here: publish (the first with --first), `cuw upload`, the Pages deploy (a
    copy of the site); the next run continues from the site; pip reads the pages and installs both
    versions from the release downloads; --first left set is refused once the site serves an index."""
    standin = github()
    pages_dir, p_url = pages
    shutil.rmtree(pages_dir)
    pages_dir.mkdir()  # a site not deployed yet: every path 404

    def run(n: int, wheel: str, payload: bytes, *first: str) -> tuple[int, str, Path]:
        make_wheel(tmp_path / f"run{n}" / "in", wheel, payload, recipe="example")
        site, upload = tmp_path / f"run{n}" / "site", tmp_path / f"run{n}" / "upload"
        code, err = _cuw(
            capsys, "publish", site.parent / "in", site, "--from-url", p_url, *first,
            "--asset-url", _template(standin.url), "--upload", upload,
        )  # fmt: skip
        if code:
            return code, err, site
        code, err = _cuw(capsys, "upload", upload, site)
        assert code == 0, err
        shutil.rmtree(pages_dir)
        shutil.copytree(site, pages_dir)  # actions/deploy-pages
        return code, err, site

    code, err, site1 = run(1, W010, b"first", "--first")
    assert code == 0, err
    assert not (site1 / "files" / W010).exists(), "the wheel is an asset, not part of the site"
    page = (pages_dir / "cu130" / "cuw-example" / "index.html").read_text()
    assert f'href="{standin.url}/{REPO_NAME}/releases/download/wheels-example/{quote(W010)}#sha256=' in page
    code, err, _ = run(2, W011, b"second")
    assert code == 0, err
    assert sorted(standin.held("wheels-example")) == sorted(  # each wheel's metadata file (PEP 658) an asset beside it
        w + suffix for w in (W010, W011) for suffix in ("", ".build.json", ".metadata")
    )
    listed = json.loads((pages_dir / MARKER).read_text())
    assert set(listed["files"]) == {W010, W011} and set(listed["remote"]) == {W010, W011}

    # CUW_PAGES_FIRST left set: the site answers with an index, so starting from empty is refused.
    code, err, site3 = run(3, OTHER, b"third", "--first")
    assert code == 2 and f"--first: {p_url} already serves an index of 2 wheel(s)" in err and "unset CUW_PAGES_FIRST" in err
    assert not site3.exists(), "a refused first publish writes nothing"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    for spec, version in (("cuw-example", "0.1.1+cu130"), ("cuw-example==0.1.0", "0.1.0+cu130")):
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir", "--no-deps",
             "--force-reinstall", "--index-url", f"{p_url}/cu130/", spec],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert pip.returncode == 0, pip.stderr
        got = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import cuw_example; print(cuw_example.VERSION)"],
            capture_output=True, text=True, cwd=tmp_path, check=True,
        ).stdout.strip()  # fmt: skip
        assert got == version


def test_a_first_publish_needs_a_clear_404(pages, tmp_path, capsys):
    _, p_url = pages
    make_wheel(tmp_path / "in", W010, b"first", recipe="example")
    args = ("--asset-url", _template("https://github.com"), "--upload", tmp_path / "up")
    code, err = _cuw(capsys, "publish", tmp_path / "in", tmp_path / "a", "--first", *args)
    assert code == 2 and "--first names no site: give --from-url URL too" in err, err
    dead = f"http://127.0.0.1:{_free_port()}"
    code, err = _cuw(capsys, "publish", tmp_path / "in", tmp_path / "a", "--from-url", dead, "--first", *args)
    assert code == 2 and "cannot tell whether an index is published there" in err and not (tmp_path / "a").exists(), err
    code, err = _cuw(capsys, "publish", tmp_path / "in", tmp_path / "a", "--from-url", p_url, "--first", *args)
    assert code == 0 and f"{p_url} serves no index yet" in err, err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreadable_online_index_and_a_shrinking_one_are_refused(pages, tmp_path):
    pages_dir, p_url = pages
    a_url = "https://github.com/acme/wheels/releases/download/wheels-{recipe}/{wheel}"
    with pytest.raises(CuwError, match=r"--from-url: cannot read .*an index that cannot be read is an error"):
        continue_from(f"{p_url}/nowhere", tmp_path / "a")
    store = AssetStore(a_url, tmp_path / "upload")
    make_wheel(tmp_path / "in", W010, b"first", recipe="example")
    publish(tmp_path / "in", tmp_path / "site", store=store)
    with pytest.raises(CuwError, match="already holds an index"):
        continue_from(p_url, tmp_path / "site")
    make_wheel(tmp_path / "in2", W011, b"second", recipe="example")
    with pytest.raises(CuwError, match="lists 2 wheels, the published one 5; refusing to publish fewer"):
        publish(tmp_path / "in2", tmp_path / "site", store=AssetStore(store.url, tmp_path / "upload2"), online=5)
    # A site that serves its wheels itself is not continued as one whose wheels are assets.
    make_wheel(tmp_path / "in3", W010, b"local", recipe="example")
    publish(tmp_path / "in3", pages_dir)
    with pytest.raises(CuwError, match=f"serves {re.escape(W010)} itself"):
        continue_from(p_url, tmp_path / "b")


def test_the_cli_takes_the_asset_store_whole_or_not_at_all(pages, tmp_path):
    pages_dir, p_url = pages
    a_url = "https://github.com/acme/wheels/releases/download/wheels-{recipe}/{wheel}"
    make_wheel(tmp_path / "in", W010, b"first", recipe="example")
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "cuw", "publish", str(tmp_path / "in"), *args], capture_output=True, text=True, cwd=REPO
    )
    half = run(str(tmp_path / "site"), "--asset-url", a_url)
    assert half.returncode == 2 and "--asset-url and --upload go together" in half.stderr
    bad = run(str(tmp_path / "site"), "--asset-url", "ftp://x/{wheel}", "--upload", str(tmp_path / "up"))
    assert bad.returncode == 2 and "an http(s) URL with {wheel}" in bad.stderr
    ok = run(str(tmp_path / "site"), "--asset-url", a_url, "--upload", str(tmp_path / "up"))
    assert ok.returncode == 0, ok.stderr
    assert f"published {W010} (to upload: {tmp_path / 'up' / W010})" in ok.stderr
    assert sha256_of(tmp_path / "up" / W010) == sha256_of(tmp_path / "in" / W010)
    shutil.rmtree(pages_dir)
    shutil.copytree(tmp_path / "site", pages_dir)
    again = run(
        str(tmp_path / "site2"), "--from-url", p_url, "--asset-url", a_url, "--upload", str(tmp_path / "up2")
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"continuing {p_url} (1 wheels published)" in again.stderr and f"already published {W010}" in again.stderr
