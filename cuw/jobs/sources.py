"""Getting a recipe's source: a local folder, a PyPI sdist, or a pinned git tag.

A git source can come from a local mirror instead of its URL (``--git-mirror`` or
``$CUW_GIT_MIRROR``, for air-gapped machines): a git repository, a folder of mirrors,
or a ``git archive`` tarball of the tag checked against the recipe's
``source.archive_sha256`` (see :func:`resolve_mirror`).

Downloads land in a content-addressed cache (``$CUW_SOURCE_CACHE``, default
``~/.cache/cuw/sources``) named by their sha256, are verified against the
recipe's pin, and are unpacked with every member checked: nothing may land
outside the source folder, and no link may point out of it.
"""

from __future__ import annotations

import gzip
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
from typing import NamedTuple, Optional

from cuw.base.errors import CuwError, InputError
from cuw.base.files import copy_into, sha256_of
from cuw.base.progress import Meter
from cuw.base.settings import MIRROR_VAR, Settings
from cuw.config.recipe import Recipe
from cuw.gates import report


def fetch_sdist(requirement: str, sha256: str, *, settings: Settings) -> Path:
    """The sdist ``name==version`` from the package index pip is configured for, verified and kept
    under its hash in the run's source cache (``settings``: the run's)."""
    cache_root = settings.folders.source_cache
    for cached in sorted(cache_root.glob(f"{sha256}-*")):
        # Checked on every use, not only when downloaded: the cache is trusted by content, never by name.
        if cached.is_file() and sha256_of(cached) == sha256:
            return cached
        report.say(
            f"source cache: {cached} does not match its sha256 {sha256[:12]}… (truncated or altered); "
            "removing it and downloading again"
        )
        if cached.is_dir():
            shutil.rmtree(cached, ignore_errors=True)
        else:
            cached.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="cuw-sdist-") as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--no-build-isolation",
                "-d",
                tmp,
                requirement,
            ],
            capture_output=True,
            text=True,
        )
        files = [p for p in Path(tmp).iterdir() if p.is_file()]
        if proc.returncode != 0 and "metadata-generation-failed" in proc.stderr:
            # pip runs upstream's setup.py to read metadata (flash-attn's imports psutil);
            # the file itself is on the index: take it by its pinned hash instead.
            files = [_download_by_hash(requirement, sha256, Path(tmp), settings.pip_index_url)]
        elif proc.returncode != 0 or len(files) != 1:
            last = (proc.stderr.strip().splitlines() or ["no file"])[-1]
            raise CuwError(f"could not download the sdist {requirement}: {last}")
        got = sha256_of(files[0])
        if got != sha256:
            raise CuwError(f"sdist {files[0].name} has sha256 {got}, the recipe pins {sha256}")  # the index or the pin
        cache_root.mkdir(parents=True, exist_ok=True)
        dest = cache_root / f"{sha256}-{files[0].name}"
        # Through a hidden temp file and a rename: a shard beside this one on the runner, fetching
        # the same sdist, finds the whole file or none (never one being copied over).
        return copy_into(files[0], dest, "the source cache")


def _index_url(url: Optional[str]) -> str:
    """The index pip is configured for (PEP 503 simple API): ``url`` ($PIP_INDEX_URL), else pip's config."""
    if not url:
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True)
        url = proc.stdout.strip() if proc.returncode == 0 else ""
    return (url or "https://pypi.org/simple").rstrip("/")


def _download_by_hash(requirement: str, sha256: str, into: Path, index_url: Optional[str]) -> Path:
    """The file of ``requirement`` whose index link carries ``#sha256=<pin>``, fetched without
    running any of its code."""
    name = re.sub(r"[-_.]+", "-", requirement.split("==")[0]).lower()
    page_url = f"{_index_url(index_url)}/{name}/"
    try:
        with urllib.request.urlopen(page_url, timeout=120) as resp:
            page = resp.read().decode()
        links = [urllib.parse.urljoin(page_url, html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]
        url = next((link for link in links if link.endswith(f"#sha256={sha256}")), None)
        if url is None:
            # The index or the pin: either may be what changed, so no kind names the fault.
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
        raise InputError(f"{where}: member {name!r} would land outside the source folder")
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
                                raise InputError(f"{archive}: link {member.name!r} -> {member.linkname!r} points out of the tree")
                        elif not (member.isfile() or member.isdir()):
                            raise InputError(f"{archive}: member {member.name!r} is not a file or folder")
                    # The checks above are the rule; tarfile's "data" filter (3.11.4+, 3.10.12+) checks again
                    # where the interpreter has it (a build image's Python may be an older patch release).
                    if hasattr(tarfile, "data_filter"):
                        tar.extractall(staging, filter="data")
                    else:
                        tar.extractall(staging)
            except (tarfile.TarError, EOFError, OSError) as exc:
                raise InputError(f"{archive}: corrupted or truncated archive ({exc})") from None
        entries = list(staging.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
        shutil.move(str(top), dest)
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def checkout_git(url: str, tag: str, commit: str, recursive: bool, dest: Path) -> Path:
    """A shallow clone of ``tag``, which must name ``commit``: a branch name is refused, and so is a
    tag that moved since the recipe pinned it (a build must be a function of the pin)."""
    refs = subprocess.run(
        ["git", "ls-remote", "--", url, f"refs/tags/{tag}", f"refs/tags/{tag}^{{}}", f"refs/heads/{tag}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if refs.returncode != 0:
        raise CuwError(f"cannot read {url}: {refs.stderr.strip()}")
    found = {ref: sha for sha, ref in (line.split("\t", 1) for line in refs.stdout.splitlines() if "\t" in line)}
    if f"refs/tags/{tag}" not in found:
        what = "a branch, not a tag" if f"refs/heads/{tag}" in found else "not a tag of that repository"
        raise InputError(f"source.tag {tag!r} is {what}: pin a release tag")
    named = found.get(f"refs/tags/{tag}^{{}}", found[f"refs/tags/{tag}"])  # an annotated tag's commit is its peeled ref
    if named != commit:
        raise InputError(
            f"source.tag {tag!r} of {url} names commit {named}, but the recipe pins source.commit {commit}: "
            "the tag moved; check the new commit and pin it, or keep the old one"
        )
    cmd = ["git", "clone", "--quiet", "--depth", "1", "--branch", tag, "-c", "advice.detachedHead=false"]
    if recursive:
        cmd += ["--recurse-submodules", "--shallow-submodules"]
    proc = subprocess.run([*cmd, "--", url, str(dest)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise CuwError(f"git clone of {url} at {tag} failed: {proc.stderr.strip()}")
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60)
    if head.stdout.strip() != commit:  # the tag moved between ls-remote and the clone
        shutil.rmtree(dest, ignore_errors=True)
        raise CuwError(
            f"git clone of {url} at {tag} checked out {head.stdout.strip() or 'nothing'}, not the pinned "
            f"source.commit {commit}: the tag moved while it was cloned"
        )
    shutil.rmtree(dest / ".git", ignore_errors=True)
    return dest


def tarball_commit(tarball: Path) -> Optional[str]:
    """The commit a ``git archive`` tarball was made from (its pax header; ``git get-tar-commit-id``),
    or None when it names none."""
    try:
        with open(tarball, "rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        with gzip.open(tarball, "rb") if gzipped else open(tarball, "rb") as raw:
            head = raw.read(1024)
        out = subprocess.run(["git", "get-tar-commit-id"], input=head, capture_output=True, timeout=60)
    except (OSError, EOFError, subprocess.SubprocessError):
        return None
    found = out.stdout.decode(errors="replace").strip()
    return found if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", found) else None


# -- git sources from a local mirror ------------------------------------------------

TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.xz", ".tar.bz2", ".zip")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FIX = f"give --git-mirror (or ${MIRROR_VAR}) a git repository, a folder of mirrors or a `git archive` tarball"


class Mirror(NamedTuple):
    kind: str  # "repo" or "tarball"
    path: Path


def check_mirror(path: Path, option: str = f"${MIRROR_VAR}") -> Path:
    """The mirror location, absolute; refused when it does not exist or is neither a file nor a folder."""
    path = path.expanduser().resolve()
    if not path.exists():
        raise InputError(f"{option} {path}: no such file or folder; {_FIX}")
    if not (path.is_dir() or path.is_file()):
        raise InputError(f"{option} {path}: not a file or folder; {_FIX}")
    return path


def repo_name(url: str) -> tuple[Optional[str], str]:
    """(owner, name) of a git URL: ``https://github.com/traveller59/spconv.git`` -> (traveller59, spconv)."""
    parts = [p for p in re.split(r"[/:]", url.strip().rstrip("/")) if p]
    name = parts[-1].removesuffix(".git") if parts else ""
    owner = parts[-2] if len(parts) >= 2 else None
    if not _NAME.fullmatch(name):
        raise InputError(f"source.git {url!r}: cannot name a mirror after it (its last part {name!r} is not a plain name)")
    return (owner if owner and _NAME.fullmatch(owner) else None), name


def tag_version(tag: str) -> str:
    """``v2.3.8`` -> ``2.3.8``: the version in a release tarball's name."""
    return tag[1:] if re.fullmatch(r"v\d.*", tag) else tag


def _is_repo(path: Path) -> bool:
    """A normal (``.git`` inside) or bare (``HEAD``, ``objects``, ``refs``) repository; never asks git,
    which would find an enclosing repository."""
    return (path / ".git").exists() or all((path / p).exists() for p in ("HEAD", "objects", "refs"))


def mirror_candidates(url: str, tag: str) -> tuple[list[str], list[str]]:
    """The names a folder of mirrors is searched for, repositories first, then tarballs."""
    owner, name = repo_name(url)
    repos = [f"{name}.git", name]
    if owner:
        repos += [f"{owner}/{name}.git", f"{owner}/{name}"]
    stems = dict.fromkeys([f"{name}-{tag_version(tag)}", f"{name}-{tag}"])
    return repos, [stem + suffix for stem in stems for suffix in TARBALL_SUFFIXES]


def resolve_mirror(url: str, tag: str, location: Path) -> Mirror:
    """Where a git source comes from under ``location``: the location itself when it is a tarball
    or a repository, else the first of :func:`mirror_candidates` found in it. A name that exists
    as the wrong kind (a folder named like a tarball, a plain folder named like a repository) is
    refused, never skipped."""
    if location.is_file():
        return Mirror("tarball", location)
    if _is_repo(location):
        return Mirror("repo", location)
    repos, tarballs = mirror_candidates(url, tag)
    for rel in repos:
        path = location / rel
        if path.is_dir() and _is_repo(path):
            return Mirror("repo", path)
        if path.exists():
            what = (
                "a folder but not a git repository (no .git, no HEAD/objects/refs)" if path.is_dir() else "not a git repository"
            )
            raise InputError(f"git mirror {path} is {what}: replace it by `git clone --mirror {url}`, or remove it")
    for rel in tarballs:
        path = location / rel
        if path.is_file():
            return Mirror("tarball", path)
        if path.exists():
            raise InputError(
                f"git mirror {path} is a folder, not a tarball: replace it by the `git archive` tarball "
                f"of {tag} of {url}, or remove it"
            )
    raise InputError(
        f"git mirror folder {location} holds no mirror of {url} at {tag}: looked for {', '.join(repos)} "
        f"(git repositories) and {', '.join(tarballs[:2])}, ... (tarballs); add one, or unset {MIRROR_VAR} "
        "to clone from the URL"
    )


def _from_tarball(recipe: Recipe, tarball: Path, dest: Path) -> Path:
    source = recipe.source
    recipe_file = Path(recipe.folder) / "recipe.yml"
    got = sha256_of(tarball)
    if source.recursive:
        raise InputError(
            f"{recipe_file}: source.recursive needs submodules, which a `git archive` tarball ({tarball}) "
            f"lacks: mirror the repository instead (git clone --mirror --recurse-submodules)"
        )
    if source.archive_sha256 is None:
        raise InputError(
            f"{recipe_file}: source.archive_sha256 is not set, so the tarball {tarball} cannot be checked: "
            f"pin it (archive_sha256: {got}, once that hash is checked against the tarball's publisher)"
        )
    if got != source.archive_sha256:
        raise InputError(
            f"{tarball} has sha256 {got}, but {recipe_file} pins source.archive_sha256 "
            f"{source.archive_sha256}: replace the file with the `git archive` tarball of {source.tag} "
            f"of {source.git}, or correct the pin"
        )
    named = tarball_commit(tarball)
    if named is not None and named != source.commit:
        raise InputError(
            f"{tarball} is a `git archive` of commit {named}, but {recipe_file} pins source.commit "
            f"{source.commit}: replace the tarball or correct the pins"
        )
    return unpack(tarball, dest)


def materialize(recipe: Recipe, dest: Path, *, settings: Settings) -> Path:
    """Puts the recipe's source at ``dest`` (a fresh folder), through the run's source cache or git
    mirror (``settings``: the run's)."""
    source = recipe.source
    if source.path is not None:
        shutil.copytree(recipe.source_dir, dest, symlinks=True)
        return dest
    if source.pypi is not None:
        assert source.sha256 is not None  # the loader requires it
        return unpack(fetch_sdist(source.pypi, source.sha256, settings=settings), dest)
    assert source.git is not None and source.tag is not None and source.commit is not None
    location = settings.git_mirror
    if location is None:
        return checkout_git(source.git, source.tag, source.commit, source.recursive, dest)
    mirror = resolve_mirror(source.git, source.tag, check_mirror(location))
    if mirror.kind == "tarball":
        _from_tarball(recipe, mirror.path, dest)
    else:
        try:
            checkout_git(mirror.path.as_uri(), source.tag, source.commit, source.recursive, dest)
        except CuwError as exc:
            raise type(exc)(f"git mirror {mirror.path} (for {source.git}): {exc}") from None
    print(
        f"cuw: source of {recipe.key}: {source.git} {source.tag} from the {mirror.kind} {mirror.path}",
        file=sys.stderr,
        flush=True,
    )
    return dest
