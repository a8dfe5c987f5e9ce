"""The index as pip and uv resolve from it, every request the server answers counted.

Three versions of one package are published: the newest requires a distribution the index lacks
(an installer must read its metadata, then fall back), the middle one is yanked, the oldest
installs. With metadata files (PEP 658/714) an installer reads the newest's ``.metadata``, never
downloads its wheel, skips the yanked one and downloads exactly one wheel; without them pip
downloads the newest wheel too (the control below). A yanked wheel still installs by an exact pin.
The counts are in docs/benchmarks.md."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote

import pytest

from conftest import need
from wheel_maker import make_wheel
from cuw.cli.main import main
from cuw.wheel.index import published_files, read_details

TAG = "py3-none-any"
NEWEST, YANKED, OLDEST = (f"resolvy-{v}+cu130-{TAG}.whl" for v in ("3.0", "2.0", "1.0"))


class _Logged(SimpleHTTPRequestHandler):
    """A static server (``python -m http.server``'s handler) that writes down every request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        self.server.requests.append((self.command, unquote(self.path), self.headers.get("Range")))  # type: ignore[attr-defined]
        return super().send_head()


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("installers")
    incoming = root / "incoming"
    make_wheel(incoming, NEWEST, b"3", metadata="Requires-Dist: absent-dist>=1\n")
    make_wheel(incoming, YANKED, b"2")
    make_wheel(incoming, OLDEST, b"1")
    index = root / "index"
    assert main(["publish", str(incoming), str(index)]) == 0
    assert main(["yank", YANKED, "--index", str(index), "--reason", "broken kernels"]) == 0
    return index


@pytest.fixture(scope="module")
def without_metadata(published: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same index as the forge wrote it before metadata files: no ``.metadata``, no attribute."""
    copy = tmp_path_factory.mktemp("no-metadata") / "index"
    shutil.copytree(published, copy)
    for metadata in (copy / "files").glob("*.metadata"):
        metadata.unlink()
    for page in copy.rglob("index.html"):
        page.write_text(re.sub(r' data-(core|dist-info)-metadata="[^"]*"', "", page.read_text()))
    return copy


@pytest.fixture(scope="module")
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(folder: Path) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Logged, directory=str(folder)))
        server.requests = []  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    return where / "bin" / "python"


def _env() -> dict[str, str]:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        env.pop(name, None)
    return env | {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}


def _installer(name: str, python: Path, index_url: str, requirement: str, tmp: Path) -> list[str]:
    if name == "pip":
        return [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-cache-dir",
            "--index-url",
            index_url,
            requirement,
        ]
    uv = str(need("uv"))
    return [uv, "pip", "install", "--no-cache", "--python", str(python), "--index-url", index_url, requirement]  # fmt: skip


def _install(name: str, server: ThreadingHTTPServer, requirement: str, tmp: Path) -> tuple[list[tuple[str, str, Any]], str]:
    """``requirement`` installed by ``name`` into a new venv from the index's cu130/ channel: the
    requests the server answered, and the version installed."""
    python = _venv(tmp / f"venv-{name}")
    server.requests.clear()  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{server.server_address[1]}/cu130/"
    proc = subprocess.run(
        _installer(name, python, url, requirement, tmp), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = subprocess.run([str(python), "-c", "import resolvy; print(resolvy.VERSION)"], capture_output=True, text=True)
    return list(server.requests), shown.stdout.strip()  # type: ignore[attr-defined]


def _fetched(requests: list[tuple[str, str, Any]], suffix: str) -> list[str]:
    return [path.rsplit("/", 1)[1] for method, path, _ in requests if method == "GET" and path.endswith(suffix)]


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_an_installer_reads_the_newest_metadata_skips_the_yanked_and_downloads_one_wheel(installer, published, serve, tmp_path):
    if installer == "uv":
        need("uv")
    requests, installed = _install(installer, serve(published), "resolvy", tmp_path)
    assert installed == "1.0+cu130", requests
    assert _fetched(requests, ".whl") == [OLDEST], requests  # one wheel: not the newest, not the yanked
    metadata = _fetched(requests, ".metadata")
    assert NEWEST + ".metadata" in metadata and YANKED + ".metadata" not in metadata, requests
    assert not [r for r in requests if r[2] is not None], "no range requests: the metadata file was read"
    assert ("GET", "/cu130/absent-dist/", None) in requests  # the newest's requirement, looked for and not found
    details = read_details(published)
    assert set(details) == set(published_files(published)) and details[YANKED]["yanked"] == "broken kernels"
    print(f"{installer}: {len(requests)} requests, {len(metadata)} .metadata, 1 wheel: {requests}")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_yanked_wheel_still_installs_by_an_exact_pin(installer, published, serve, tmp_path):
    if installer == "uv":
        need("uv")
    requests, installed = _install(installer, serve(published), "resolvy==2.0+cu130", tmp_path)
    assert installed == "2.0+cu130" and _fetched(requests, ".whl") == [YANKED], requests


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_without_metadata_files_the_newest_wheel_is_downloaded_too(installer, without_metadata, serve, tmp_path):
    """The control: the assertions above fail against the index as it was before metadata files
    (uv asks for a byte range of the newest wheel first; a static server answers with all of it)."""
    if installer == "uv":
        need("uv")
    requests, installed = _install(installer, serve(without_metadata), "resolvy", tmp_path)
    assert installed == "1.0+cu130" and not _fetched(requests, ".metadata")
    assert _fetched(requests, ".whl")[0] == NEWEST and _fetched(requests, ".whl")[-1] == OLDEST, requests
    print(f"{installer} without metadata files: {len(requests)} requests: {requests}")
