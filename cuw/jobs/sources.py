"""Getting a recipe's source: a local folder, a PyPI sdist, or a pinned git tag.

Downloads land in a content-addressed cache (``$CUW_SOURCE_CACHE``, default
``~/.cache/cuw/sources``) named by their sha256, are verified against the
recipe's pin, and are unpacked with every member checked: nothing may land
outside the source folder, and no link may point out of it.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from cuw.base.errors import CuwError
from cuw.base.files import sha256_of
from cuw.base.progress import Meter
from cuw.config.recipe import Recipe


def cache_root() -> Path:
    return Path(os.environ.get("CUW_SOURCE_CACHE", Path.home() / ".cache" / "cuw" / "sources"))


def fetch_sdist(requirement: str, sha256: str) -> Path:
    """The sdist ``name==version`` from the package index pip is configured for,
    verified and kept under its hash."""
    cached = sorted(cache_root().glob(f"{sha256}-*"))
    if cached:
        return cached[0]
    with tempfile.TemporaryDirectory(prefix="cuw-sdist-") as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             "--no-build-isolation", "-d", tmp, requirement],
            capture_output=True, text=True,
        )  # fmt: skip
        files = [p for p in Path(tmp).iterdir() if p.is_file()]
        if proc.returncode != 0 and "metadata-generation-failed" in proc.stderr:
            # pip runs upstream's setup.py to read metadata (flash-attn's imports psutil);
            # the file itself is on the index: take it by its pinned hash instead.
            files = [_download_by_hash(requirement, sha256, Path(tmp))]
        elif proc.returncode != 0 or len(files) != 1:
            last = (proc.stderr.strip().splitlines() or ["no file"])[-1]
            raise CuwError(f"could not download the sdist {requirement}: {last}")
        got = sha256_of(files[0])
        if got != sha256:
            raise CuwError(f"sdist {files[0].name} has sha256 {got}, the recipe pins {sha256}")
        cache_root().mkdir(parents=True, exist_ok=True)
        dest = cache_root() / f"{sha256}-{files[0].name}"
        shutil.move(str(files[0]), dest)
        return dest


def _index_url() -> str:
    """The index pip is configured for (PEP 503 simple API)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                              capture_output=True, text=True)  # fmt: skip
        url = proc.stdout.strip() if proc.returncode == 0 else ""
    return (url or "https://pypi.org/simple").rstrip("/")


def _download_by_hash(requirement: str, sha256: str, into: Path) -> Path:
    """The file of ``requirement`` whose index link carries ``#sha256=<pin>``, fetched without
    running any of its code."""
    name = re.sub(r"[-_.]+", "-", requirement.split("==")[0]).lower()
    page_url = f"{_index_url()}/{name}/"
    try:
        with urllib.request.urlopen(page_url, timeout=120) as resp:
            page = resp.read().decode()
        links = [urllib.parse.urljoin(page_url, html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]
        url = next((link for link in links if link.endswith(f"#sha256={sha256}")), None)
        if url is None:
            raise CuwError(f"could not download the sdist {requirement}: {page_url} lists no file with sha256 {sha256}")
        dest = into / urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        with urllib.request.urlopen(url.split("#")[0], timeout=600) as resp, open(dest, "wb") as fh:
            size = int(resp.headers.get("Content-Length") or 0)
            meter = Meter(f"fetch {dest.name}:", (size >> 20) or None, "MB", every_s=10.0)
            got = 0
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
                got += len(chunk)
                meter.update(got >> 20)
            meter.close()
    except OSError as exc:
        raise CuwError(f"could not download the sdist {requirement} from {page_url}: {exc}") from None
    return dest


def _check_name(name: str, where: Path) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise CuwError(f"{where}: member {name!r} would land outside the source folder")
    return path


def unpack(archive: Path, dest: Path) -> Path:
    """Unpacks an sdist into ``dest`` (which must not exist) and returns the
    project folder (the single top-level folder, as sdists have)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="cuw-unpack-", dir=dest.parent))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    _check_name(info.filename, archive)
                zf.extractall(staging)
        else:
            try:
                with tarfile.open(archive) as tar:
                    for member in tar.getmembers():
                        _check_name(member.name, archive)
                        if member.issym() or member.islnk():
                            target = PurePosixPath(member.name).parent / member.linkname
                            if member.linkname.startswith("/") or ".." in PurePosixPath(os.path.normpath(target)).parts:
                                raise CuwError(f"{archive}: link {member.name!r} -> {member.linkname!r} points out of the tree")
                        elif not (member.isfile() or member.isdir()):
                            raise CuwError(f"{archive}: member {member.name!r} is not a file or folder")
                    tar.extractall(staging, filter="data")
            except (tarfile.TarError, EOFError, OSError) as exc:
                raise CuwError(f"{archive}: corrupted or truncated archive ({exc})") from None
        entries = list(staging.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
        shutil.move(str(top), dest)
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def checkout_git(url: str, tag: str, recursive: bool, dest: Path) -> Path:
    """A shallow clone of ``tag``; a branch name is refused (a build must be a function of the pin)."""
    refs = subprocess.run(["git", "ls-remote", url, f"refs/tags/{tag}", f"refs/heads/{tag}"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if refs.returncode != 0:
        raise CuwError(f"cannot read {url}: {refs.stderr.strip()}")
    kinds = {line.split("\t")[1] for line in refs.stdout.splitlines() if "\t" in line}
    if f"refs/tags/{tag}" not in kinds:
        what = "a branch, not a tag" if f"refs/heads/{tag}" in kinds else "not a tag of that repository"
        raise CuwError(f"source.tag {tag!r} is {what}: pin a release tag")
    cmd = ["git", "clone", "--quiet", "--depth", "1", "--branch", tag, "-c", "advice.detachedHead=false"]
    if recursive:
        cmd += ["--recurse-submodules", "--shallow-submodules"]
    proc = subprocess.run([*cmd, url, str(dest)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise CuwError(f"git clone of {url} at {tag} failed: {proc.stderr.strip()}")
    shutil.rmtree(dest / ".git", ignore_errors=True)
    return dest


def materialize(recipe: Recipe, dest: Path) -> Path:
    """Puts the recipe's source at ``dest`` (a fresh folder)."""
    source = recipe.source
    if source.path is not None:
        shutil.copytree(recipe.source_dir, dest, symlinks=True)
        return dest
    if source.pypi is not None:
        assert source.sha256 is not None  # the loader requires it
        return unpack(fetch_sdist(source.pypi, source.sha256), dest)
    assert source.git is not None and source.tag is not None
    return checkout_git(source.git, source.tag, source.recursive, dest)
