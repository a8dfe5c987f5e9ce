"""The index on GitHub's terms, here: wheels kept as release assets (served by one real HTTP
server), the pages on another (GitHub Pages), each publish continuing from what is online.

No GitHub here: the upload (`gh release upload`) is a copy into the asset server's folder, the
Pages deploy a copy of the site folder; everything the forge does around them is what runs.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO
from cuw.base.errors import CuwError
from cuw.wheel.index import MARKER
from cuw.wheel.publish import AssetStore, continue_from, publish
from wheel_maker import make_wheel

W010 = "cuw_example-0.1.0+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
W011 = "cuw_example-0.1.1+cu130-cp311-cp311-manylinux_2_34_x86_64.whl"


def _serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    folder.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def github(tmp_path):
    """(assets folder, its URL, pages folder, its URL): the two servers of a GitHub-hosted index."""
    assets, pages = tmp_path / "release-assets", tmp_path / "pages"
    a_server, a_url = _serve(assets)
    p_server, p_url = _serve(pages)
    yield assets, a_url, pages, p_url
    a_server.shutdown()
    p_server.shutdown()


def _deploy(site: Path, upload: Path, assets: Path, pages: Path) -> None:
    """What the workflow's upload and Pages steps do: the new assets (never replacing one), the site."""
    for wheel in upload.glob("*.whl"):
        target = assets / "example" / wheel.name
        assert not target.exists(), "an asset name exists once per release"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, target)
    shutil.rmtree(pages)
    shutil.copytree(site, pages)


def test_each_publish_continues_from_the_online_index_and_pip_installs_through_the_asset_urls(github, tmp_path):
    assets, a_url, pages, p_url = github
    store = lambda run: AssetStore(a_url + "/{recipe}/{wheel}", tmp_path / run / "upload")  # noqa: E731
    make_wheel(tmp_path / "run1" / "in", W010, b"first", recipe="example")
    first = publish(tmp_path / "run1" / "in", tmp_path / "run1" / "site", store=store("run1"))
    assert first.published == [W010]
    site1 = tmp_path / "run1" / "site"
    assert not (site1 / "files" / W010).exists(), "the wheel is an asset, not part of the site"
    assert (tmp_path / "run1" / "upload" / W010).is_file() and (site1 / "files" / f"{W010}.build.json").is_file()
    page = (site1 / "cu130" / "cuw-example" / "index.html").read_text()
    assert f'href="{a_url}/example/{quote(W010)}#sha256=' in page
    _deploy(site1, tmp_path / "run1" / "upload", assets, pages)

    # The next run starts empty, as a hosted runner does: it continues from the online index.
    site2 = tmp_path / "run2" / "site"
    online = continue_from(p_url, site2)
    assert online == 1 and set(json.loads((site2 / MARKER).read_text())["files"]) == {W010}
    make_wheel(tmp_path / "run2" / "in", W011, b"second", recipe="example")
    second = publish(tmp_path / "run2" / "in", site2, store=store("run2"), online=online)
    assert second.published == [W011]
    assert sorted(p.name for p in (tmp_path / "run2" / "upload").glob("*.whl")) == [W011], "only the new wheel uploads"
    _deploy(site2, tmp_path / "run2" / "upload", assets, pages)
    listed = json.loads((pages / MARKER).read_text())
    assert set(listed["files"]) == {W010, W011} and set(listed["remote"]) == {W010, W011}
    manifest = json.loads((pages / "packages.json").read_text())
    assert {w["url"] for w in manifest["wheels"]} == {f"{a_url}/example/{quote(W010)}", f"{a_url}/example/{quote(W011)}"}

    # pip reads the pages from one server and follows their links to the other.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    for spec, version in (("cuw-example", "0.1.1+cu130"), ("cuw-example==0.1.0", "0.1.0+cu130")):
        pip = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-cache-dir",
                "--no-deps",
                "--force-reinstall",
                "--index-url",
                f"{p_url}/cu130/",
                spec,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert pip.returncode == 0, pip.stderr
        got = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import cuw_example; print(cuw_example.VERSION)"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=True,
        ).stdout.strip()
        assert got == version


def test_an_unreadable_online_index_and_a_shrinking_one_are_refused(github, tmp_path):
    assets, a_url, pages, p_url = github
    with pytest.raises(CuwError, match=r"--from-url: cannot read .*an index that cannot be read is an error"):
        continue_from(f"{p_url}/nowhere", tmp_path / "a")
    store = AssetStore(a_url + "/{recipe}/{wheel}", tmp_path / "upload")
    make_wheel(tmp_path / "in", W010, b"first", recipe="example")
    publish(tmp_path / "in", tmp_path / "site", store=store)
    with pytest.raises(CuwError, match="already holds an index"):
        continue_from(p_url, tmp_path / "site")
    make_wheel(tmp_path / "in2", W011, b"second", recipe="example")
    with pytest.raises(CuwError, match="lists 2 wheels, the published one 5; refusing to publish fewer"):
        publish(tmp_path / "in2", tmp_path / "site", store=AssetStore(store.url, tmp_path / "upload2"), online=5)
    # A site that serves its wheels itself is not continued as one whose wheels are assets.
    make_wheel(tmp_path / "in3", W010, b"local", recipe="example")
    publish(tmp_path / "in3", pages)
    with pytest.raises(CuwError, match=f"serves {re.escape(W010)} itself"):
        continue_from(p_url, tmp_path / "b")


def test_the_cli_takes_the_asset_store_whole_or_not_at_all(github, tmp_path):
    assets, a_url, pages, p_url = github
    make_wheel(tmp_path / "in", W010, b"first", recipe="example")
    run = lambda *args: subprocess.run(
        [sys.executable, "-m", "cuw", "publish", str(tmp_path / "in"), *args],  # noqa: E731
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    half = run(str(tmp_path / "site"), "--asset-url", a_url + "/{recipe}/{wheel}")
    assert half.returncode == 2 and "--asset-url and --upload go together" in half.stderr
    bad = run(str(tmp_path / "site"), "--asset-url", "ftp://x/{wheel}", "--upload", str(tmp_path / "up"))
    assert bad.returncode == 2 and "an http(s) URL with {wheel}" in bad.stderr
    ok = run(str(tmp_path / "site"), "--asset-url", a_url + "/{recipe}/{wheel}", "--upload", str(tmp_path / "up"))
    assert ok.returncode == 0, ok.stderr
    assert f"published {W010} (to upload: {tmp_path / 'up' / W010})" in ok.stderr
    shutil.rmtree(pages)
    shutil.copytree(tmp_path / "site", pages)
    again = run(
        str(tmp_path / "site2"),
        "--from-url",
        p_url,
        "--asset-url",
        a_url + "/{recipe}/{wheel}",
        "--upload",
        str(tmp_path / "up2"),
    )
    assert again.returncode == 0, again.stderr
    assert f"continuing {p_url} (1 wheels published)" in again.stderr and f"already published {W010}" in again.stderr
