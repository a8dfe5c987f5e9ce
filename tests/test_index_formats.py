"""The index's other formats, all derived from its marker: PEP 691 JSON beside every page, packages.json,
the chooser page (in headless Chromium), and a real HTTP round trip (python -m http.server, pip)."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin

import jsonschema
import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelFile

from conftest import need, serving
from cuw.cli.main import main
from cuw.wheel import publish as publish_module
from cuw.wheel.index import CHOOSER, MARKER, PACKAGES, RECORD_SUFFIX, build_index, published_files, write_pages
from cuw.wheel.publish import publish, sha256_file

# PEP 691 (JSON simple API) with PEP 700 (api-version 1.1: versions, size; upload-time optional).
_META = {
    "type": "object",
    "required": ["api-version"],
    "properties": {"api-version": {"type": "string", "pattern": r"^1\.[1-9][0-9]*$"}},
}
PROJECT_SCHEMA = {
    "type": "object",
    "required": ["meta", "name", "files", "versions"],
    "additionalProperties": False,
    "properties": {
        "meta": _META,
        "name": {"type": "string", "pattern": r"^[a-z0-9]+(-[a-z0-9]+)*$"},  # the normalized name
        "versions": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["filename", "url", "hashes", "size"],
                "additionalProperties": False,
                "properties": {
                    "filename": {"type": "string", "pattern": r"^[^/]+\.whl$"},
                    "url": {"type": "string", "minLength": 1},
                    "hashes": {
                        "type": "object",
                        "minProperties": 1,
                        "required": ["sha256"],
                        "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]+$"},
                    },
                    "size": {"type": "integer", "minimum": 0},
                    "upload-time": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"},
                    "requires-python": {"type": "string"},
                    "core-metadata": {"anyOf": [{"type": "boolean"}, {"type": "object"}]},
                    "gpg-sig": {"type": "boolean"},
                    "yanked": {"anyOf": [{"type": "boolean"}, {"type": "string"}]},
                },
            },
        },
    },
}
ROOT_SCHEMA = {
    "type": "object",
    "required": ["meta", "projects"],
    "additionalProperties": False,
    "properties": {
        "meta": _META,
        "projects": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}},
            },
        },
    },
}

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _wheel(
    folder: Path, name: str, version: str, tag: str = "py3-none-any", cell: dict | None = None, requires_python: str = ""
) -> Path:
    """A small real wheel (installable when its tag is): a module, its dist-info, RECORD by `wheel`;
    ``cell``: a build record beside it, as the link job writes it; ``requires_python``: METADATA's."""
    tree = folder / f"tree-{name}-{version}-{tag}"
    (tree / name).mkdir(parents=True)
    (tree / name / "__init__.py").write_text(f"VERSION = {version!r}\n")
    info = tree / f"{name}-{version}.dist-info"
    info.mkdir()
    python = f"Requires-Python: {requires_python}\n" if requires_python else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{python}")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n")
    out = folder / f"{name}-{version}-{tag}.whl"
    with WheelFile(out, "w") as wf:
        wf.write_files(str(tree))
    shutil.rmtree(tree)
    if cell is not None:
        record = {
            "format": 2,
            "wheel": out.name,
            "sha256": sha256_file(out),
            "cell": {"recipe": name, **cell},
            "verify": {"ok": True},
            "link": {"misses": 0},
        }  # what a passed link writes
        out.with_name(out.name + RECORD_SUFFIX).write_text(json.dumps(record, indent=2))
    return out


def _cell(lane: str, python: str, cuda: str, torch: str | None) -> dict:
    return {"lane": lane, "python": python, "cuda": cuda, "torch": torch}


LINUX_311 = "cp311-cp311-manylinux_2_34_x86_64"
ARM_311 = "cp311-cp311-manylinux_2_34_aarch64"


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """An index made by a publish (wheels with build records) and then `cuw index` (wheels without)."""
    root = tmp_path_factory.mktemp("formats")
    run = root / "incoming"
    run.mkdir()
    _wheel(run, "torchy", "1.0+cu130torch2.14", LINUX_311, _cell("linux", "3.11", "13.0", "2.14"))
    _wheel(run, "torchy", "1.1+cu130torch2.14", LINUX_311, _cell("linux", "3.11", "13.0", "2.14"))
    _wheel(run, "torchy", "1.1+cu130torch2.14", ARM_311, _cell("linux_aarch64", "3.11", "13.0", "2.14"))
    _wheel(run, "torchy", "1.0+cu128torch2.13", "cp312-cp312-manylinux_2_34_x86_64", _cell("linux", "3.12", "12.8", "2.13"))
    plain_cell = _cell("linux", "3.12", "13.0", None)
    _wheel(run, "plainy", "0.5+cu130", "py3-none-any", plain_cell, requires_python=">=3.10,<4")  # torch-free, pure
    out = root / "index"
    outcome = publish(run, out)
    assert outcome.ok and len(outcome.published) == 5, outcome
    more = root / "more"
    more.mkdir()
    _wheel(more, "Pure_Y", "2.0+cu130torch2.14")  # no build record: its cell is read from the file name
    _wheel(more, "abiy", "0.3+cu130", "cp310-abi3-win_amd64")
    build_index(more, out)
    return out


def _links(page: Path) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'<a href="([^"]+)"[^>]*>', page.read_text())]


def test_every_page_has_pep_691_json_with_the_same_files_and_digests(index):
    marker = published_files(index)
    pages = sorted(index.rglob("index.html"))
    checked_projects = checked_roots = 0
    for page in pages:
        doc = json.loads((page.parent / "index.json").read_text())
        hrefs = _links(page)
        if all(h.endswith("/") for h in hrefs) and "projects" in doc:  # a channel's root: its project list
            jsonschema.validate(doc, ROOT_SCHEMA)
            assert [p["name"] for p in doc["projects"]] == [h.rstrip("/") for h in hrefs]
            checked_roots += 1
            continue
        jsonschema.validate(doc, PROJECT_SCHEMA)
        assert doc["meta"]["api-version"] == "1.1" and doc["name"] == page.parent.name
        files = {f["filename"]: f for f in doc["files"]}
        assert len(files) == len(hrefs) == len(doc["files"])
        for href in hrefs:
            url, _, fragment = href.partition("#")
            name = unquote(url.rsplit("/", 1)[1])
            entry = files[name]
            assert entry["url"] == url, "the JSON's URL is the HTML's href without its fragment"
            assert fragment == f"sha256={entry['hashes']['sha256']}" and entry["hashes"]["sha256"] == marker[name]
            assert entry["size"] == (index / "files" / name).stat().st_size and entry["yanked"] is False
            # Resolved against the JSON file's own URL, the link reaches the published wheel.
            json_url = (page.parent / "index.json").as_uri()
            assert Path(unquote(urljoin(json_url, entry["url"])[len("file://") :])) == index / "files" / name
        versions = {str(parse_wheel_filename(n)[1]) for n in files}
        assert set(doc["versions"]) == versions
        assert doc["versions"] == sorted(doc["versions"], key=Version)
        checked_projects += 1
    # Roots: simple/, cu128/, cu128/torch2.13/, cu130/, cu130/torch2.14/. Projects: 4 in simple/, torchy in
    # cu128/torch2.13/, the torch-free abiy and plainy in cu130/, all 4 in cu130/torch2.14/.
    assert (checked_roots, checked_projects) == (5, 11)


def test_packages_json_lists_every_published_wheel_with_its_cell_and_record(index):
    assert RECORD_SUFFIX == publish_module.RECORD_SUFFIX
    marker = published_files(index)
    manifest = json.loads((index / PACKAGES).read_text())
    wheels = manifest["wheels"]
    assert {w["filename"] for w in wheels} == set(marker) and len(wheels) == len(marker)
    key = [(w["name"], Version(w["version"]), w["filename"]) for w in wheels]
    assert key == sorted(key), "sorted by name, version, file name"
    for w in wheels:
        path = index / unquote(w["url"])
        assert path == index / "files" / w["filename"] and path.is_file()
        assert w["sha256"] == marker[w["filename"]] == sha256_file(path) and w["size"] == path.stat().st_size
        assert w["name"] == canonicalize_name(parse_wheel_filename(w["filename"])[0])
        record = path.with_name(path.name + RECORD_SUFFIX)
        if record.is_file():
            assert w["build_record"] == {
                "url": w["url"] + RECORD_SUFFIX,
                "sha256": hashlib.sha256(record.read_bytes()).hexdigest(),
            }
            assert w["cell_from"] == "build record"
            assert w["cell"] == {k: json.loads(record.read_text())["cell"][k] for k in ("lane", "python", "cuda", "torch")}
        else:
            assert w["build_record"] is None and w["cell_from"] == "file name"
    by_file = {w["filename"]: w for w in wheels}
    arm = by_file[f"torchy-1.1+cu130torch2.14-{ARM_311}.whl"]
    assert arm["cell"] == _cell("linux_aarch64", "3.11", "13.0", "2.14") and arm["channel"] == "cu130/torch2.14/"
    assert arm["serves"] == {
        "lanes": ["linux_aarch64"],
        "python_min": "3.11",
        "python_max": "3.11",
        "cuda": "13.0",
        "torch": "2.14",
    }
    pure = by_file["Pure_Y-2.0+cu130torch2.14-py3-none-any.whl"]  # no record: read from the file name
    assert pure["name"] == "pure-y" and pure["cell"] == _cell(None, None, "13.0", "2.14")
    abiy = by_file["abiy-0.3+cu130-cp310-abi3-win_amd64.whl"]
    assert abiy["cell"] == _cell("windows", None, "13.0", None) and abiy["channel"] == "cu130/"
    assert abiy["serves"]["python_min"] == "3.10" and abiy["serves"]["python_max"] is None  # abi3: 3.10 and later
    assert manifest["lanes"] == ["linux", "linux_aarch64", "windows"]

    # Derived from the marker alone: written again, byte for byte the same.
    before = {p: p.read_bytes() for p in [index / PACKAGES, *index.rglob("index.json")]}
    write_pages(index, published_files(index))
    assert {p: p.read_bytes() for p in before} == before


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found.append(dict(attrs))


def _anchors(page: Path) -> list[dict[str, str | None]]:
    """Every link of a page with its attributes, as an HTML parser (and pip's) reads them."""
    parser = _Anchors()
    parser.feed(page.read_text())
    return parser.found


def _member_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [m for m in zf.namelist() if m.count("/") == 1 and m.endswith(".dist-info/METADATA")]
        return zf.read(member)


def test_links_carry_the_metadata_file_requires_python_and_upload_time(index):
    """PEP 658/714: the metadata file beside every wheel, byte for byte its METADATA, its sha256 on
    the link under both names and in the JSON; Requires-Python (HTML-escaped) and PEP 700's
    upload-time, which is the marker's (written once, when the wheel was added)."""
    details = json.loads((index / MARKER).read_text())["details"]
    assert set(details) == set(published_files(index))
    checked = 0
    for page in sorted(index.rglob("index.html")):
        doc = json.loads((page.parent / "index.json").read_text())
        if "files" not in doc:
            continue
        files = {f["filename"]: f for f in doc["files"]}
        for anchor in _anchors(page):
            name = unquote(str(anchor["href"]).partition("#")[0].rsplit("/", 1)[1])
            metadata = index / "files" / f"{name}.metadata"
            assert metadata.read_bytes() == _member_metadata(index / "files" / name)
            digest = hashlib.sha256(metadata.read_bytes()).hexdigest()
            assert anchor["data-core-metadata"] == anchor["data-dist-info-metadata"] == f"sha256={digest}"
            entry = files[name]
            assert entry["core-metadata"] == {"sha256": digest} and details[name]["metadata"] == digest
            assert entry["upload-time"] == details[name]["added"]
            assert "data-yanked" not in anchor and entry["yanked"] is False
            if name.startswith("plainy-"):
                assert anchor["data-requires-python"] == entry["requires-python"] == ">=3.10,<4"
            else:
                assert "data-requires-python" not in anchor and "requires-python" not in entry
            checked += 1
    assert checked == 16  # 7 wheels in simple/, 1 in cu128/torch2.13/, 2 in cu130/, 6 in cu130/torch2.14/
    assert 'data-requires-python="&gt;=3.10,&lt;4"' in (index / "cu130" / "plainy" / "index.html").read_text()
    by_file = {w["filename"]: w for w in json.loads((index / PACKAGES).read_text())["wheels"]}
    plainy = by_file["plainy-0.5+cu130-py3-none-any.whl"]
    assert plainy["requires_python"] == ">=3.10,<4" and plainy["yanked"] is None
    assert plainy["metadata"] == {"url": plainy["url"] + ".metadata", "sha256": details[plainy["filename"]]["metadata"]}
    assert plainy["upload_time"] == details[plainy["filename"]]["added"]


def test_cuw_index_refuses_a_wheel_whose_file_name_and_metadata_disagree(tmp_path, capsys):
    """The wheel the farms' trackers complain of most (pip: "inconsistent version", uv: "Wheel version
    does not match filename"): a sound archive and RECORD whose METADATA says another version."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = _wheel(wheels, "renamy", "1.1+cu130")
    good = made.read_bytes()
    with zipfile.ZipFile(made) as zf:
        members = {m: zf.read(m) for m in zf.namelist() if not m.endswith("/RECORD")}
    made.unlink()
    with WheelFile(made, "w") as wf:  # RECORD by `wheel` again: only METADATA disagrees
        for member, data in members.items():
            wf.writestr(member, data.replace(b"Version: 1.1+cu130", b"Version: 1.0+cu130"))
    site = tmp_path / "site"
    assert main(["index", str(wheels), str(site)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cuw: error: ") and len(err.splitlines()) == 1, err
    assert str(made) in err and "METADATA Version '1.0+cu130' != filename 1.1+cu130" in err
    assert not site.exists(), "a refused run makes nothing"
    made.write_bytes(good)
    assert main(["index", str(wheels), str(site)]) == 0
    assert (site / "files" / f"{made.name}.metadata").read_bytes() == _member_metadata(made)


def test_an_index_made_before_metadata_files_gets_them_on_its_next_run(index, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    marker = json.loads((copy / MARKER).read_text())
    del marker["details"]  # as an index written before the details were
    (copy / MARKER).write_text(json.dumps(marker))
    for metadata in (copy / "files").glob("*.metadata"):
        metadata.unlink()
    write_pages(copy, published_files(copy))
    page = copy / "cu130" / "plainy" / "index.html"
    assert "data-core-metadata" not in page.read_text() and "upload-time" not in (page.parent / "index.json").read_text()
    more = tmp_path / "more"
    more.mkdir()
    newy = _wheel(more, "newy", "1.0+cu130").name
    build_index(more, copy)
    details = json.loads((copy / MARKER).read_text())["details"]
    assert set(details) == set(published_files(copy))
    assert [name for name, about in details.items() if "added" in about] == [newy]  # no upload time made up
    for name in details:
        assert hashlib.sha256((copy / "files" / f"{name}.metadata").read_bytes()).hexdigest() == details[name]["metadata"]
    assert "data-core-metadata" in page.read_text()


def test_files_a_killed_run_left_behind_are_rewritten_from_the_marker(index, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    gone = [
        copy / PACKAGES,
        copy / CHOOSER,
        copy / "cu130" / "torch2.14" / "torchy" / "index.json",
        copy / "simple" / "index.json",
    ]
    expected = {p: p.read_bytes() for p in gone}
    for p in gone:
        p.unlink()
    again = tmp_path / "again"
    again.mkdir()
    plainy = "plainy-0.5+cu130-py3-none-any.whl"
    shutil.copy2(copy / "files" / plainy, again)
    shutil.copy2(copy / "files" / f"{plainy}{RECORD_SUFFIX}", again)
    outcome = publish(again, copy)  # nothing new: "already published", and the pages are brought up to the marker
    assert outcome.already and not outcome.published
    assert {p: p.read_bytes() for p in gone} == expected


@pytest.fixture(scope="module")
def served(index):
    """The index folder served over HTTP on 127.0.0.1 (conftest.serving): its URL."""
    with serving(index) as url:
        yield url + "/"


def _chromium() -> str:
    return need("chromium")  # missing: a skip, or a failure where $CUW_REQUIRE lists it (.ci/run installs it)


def _dom(browser: str, url: str, profile: Path) -> str:
    # The page reads packages.json asynchronously: the virtual time budget lets it finish before the dump.
    return subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout


def _shown(dom: str, element: str) -> str:
    match = re.search(rf'<[a-z]+ id="{element}"[^>]*>(.*?)</', dom, re.S)
    assert match, f"no #{element} in the page: {dom[-2000:]}"
    return html.unescape(match.group(1))


@pytest.mark.needs("chromium")  # checked before the index is written and served
def test_the_chooser_gives_the_command_or_says_why_not_in_chromium(index, served, tmp_path):
    browser = _chromium()
    page = (index / CHOOSER).read_text()
    assert "http://" not in page and "https://" not in page and "src=" not in page  # no external resources
    profile = tmp_path / "profile"
    ask = lambda q: _dom(browser, f"{served}{CHOOSER}?{q}", profile)  # noqa: E731

    newest = ask("package=torchy&lane=linux&python=3.11&cuda=13.0&torch=2.14")
    assert 'class="built"' in newest
    assert _shown(newest, "command") == f"pip install --index-url {served}cu130/torch2.14/ torchy==1.1+cu130torch2.14"

    # A torch-free pure wheel serves every lane and Python; with torch chosen, its line's torch channel.
    pure = ask("package=plainy&lane=windows&python=3.13&cuda=13.0&torch=2.14")
    assert _shown(pure, "command") == f"pip install --index-url {served}cu130/torch2.14/ plainy==0.5+cu130"

    missing = ask("package=torchy&lane=windows&python=3.11&cuda=13.0&torch=2.14")
    assert 'class="not-built"' in missing and '<pre id="command" hidden' in missing
    assert _shown(missing, "result") == (
        "not built: no wheel for windows with Python 3.11, CUDA 13.0 and torch 2.14: built for linux, linux_aarch64"
    )

    # Opened as a file the browser will not let it read packages.json: it says how to open it instead.
    as_file = _dom(browser, (index / CHOOSER).as_uri(), profile)
    assert "python -m http.server" in _shown(as_file, "result")


def test_pip_installs_from_the_index_over_http_and_the_json_parses(index, served, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("PIP_INDEX_URL", None), env.pop("PIP_EXTRA_INDEX_URL", None), env.pop("PIP_FIND_LINKS", None)
    channel = f"{served}cu130/torch2.14/"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--index-url",
            channel,
            "plainy",
            "pure-y",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = subprocess.run(
        [str(python), "-c", "import plainy, Pure_Y; print(plainy.VERSION, Pure_Y.VERSION)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.split() == ["0.5+cu130", "2.0+cu130torch2.14"], shown.stderr

    url = f"{channel}plainy/index.json"
    with urllib.request.urlopen(url, timeout=30) as response:
        doc = json.loads(response.read())
    jsonschema.validate(doc, PROJECT_SCHEMA)
    (entry,) = doc["files"]
    with urllib.request.urlopen(urljoin(url, entry["url"]), timeout=30) as response:  # relative to the JSON's URL
        body = response.read()
    assert hashlib.sha256(body).hexdigest() == entry["hashes"]["sha256"] and len(body) == entry["size"]
    with urllib.request.urlopen(f"{channel}index.json", timeout=30) as response:
        root = json.loads(response.read())
    jsonschema.validate(root, ROOT_SCHEMA)
    assert [p["name"] for p in root["projects"]] == ["abiy", "plainy", "pure-y", "torchy"]  # torch-free ones too
    with urllib.request.urlopen(f"{served}{MARKER}", timeout=30) as response:
        assert set(json.loads(response.read())["files"]) == set(published_files(index))
