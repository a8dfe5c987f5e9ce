"""Source acquisition: PyPI sdists (pinned by sha256), git tags, safe unpacking."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from cuw.base.errors import CuwError
from cuw.config.recipe import load_recipe
from cuw.jobs.sources import checkout_git, fetch_sdist, unpack

SIX = ("six==1.16.0", "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUW_SOURCE_CACHE", str(tmp_path / "source-cache"))


def test_sdist_is_fetched_verified_cached_and_unpacked(tmp_path):
    archive = fetch_sdist(*SIX)
    assert archive.name == f"{SIX[1]}-six-1.16.0.tar.gz" and archive.parent == tmp_path / "source-cache"
    assert fetch_sdist(*SIX) == archive  # content-addressed: the second call downloads nothing
    project = unpack(archive, tmp_path / "src")
    assert (project / "six.py").is_file() and (project / "setup.py").is_file()


def test_sdist_with_the_wrong_hash_is_refused(tmp_path):
    with pytest.raises(CuwError, match=r"has sha256 1e61c374.*the recipe pins 0000"):
        fetch_sdist(SIX[0], "0" * 64)
    assert not list(tmp_path.glob("source-cache/*six*")), "a file that failed its pin is not cached"


def _tar(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "members, message",
    [
        ([_file("pkg/../../evil")], "would land outside the source folder"),
        ([_file("/etc/evil")], "would land outside the source folder"),
        ([_file("pkg/a"), _link("pkg/out", "../../../etc/passwd")], "points out of the tree"),
        ([_file("pkg/a"), _link("pkg/abs", "/etc/passwd")], "points out of the tree"),
    ],
)
def test_unsafe_sdists_are_refused(tmp_path, members, message):
    bad = _tar(tmp_path / "bad.tar.gz", members)
    with pytest.raises(CuwError, match=message):
        unpack(bad, tmp_path / "src")
    assert not (tmp_path / "src").exists() and not (tmp_path.parent / "evil").exists()


def test_links_inside_the_tree_are_kept(tmp_path):
    good = _tar(tmp_path / "good.tar.gz", [_file("pkg/a.h"), _link("pkg/b.h", "a.h")])
    project = unpack(good, tmp_path / "src")
    assert (project / "b.h").is_symlink()


def test_truncated_sdist(tmp_path):
    good = _tar(tmp_path / "good.tar.gz", [_file(f"pkg/f{i}") for i in range(200)])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:300])
    with pytest.raises(CuwError, match="corrupted or truncated"):
        unpack(cut, tmp_path / "src")


@pytest.fixture
def bare_repo(tmp_path) -> str:
    work = tmp_path / "upstream"
    work.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(work), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    (work / "setup.py").write_text("print('v1')\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "v1")
    git("tag", "v1.0")
    (work / "setup.py").write_text("print('v2')\n")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "v2")
    bare = tmp_path / "upstream.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare.as_uri()


def test_git_tag_checkout(bare_repo, tmp_path):
    src = checkout_git(bare_repo, "v1.0", False, tmp_path / "src")
    assert (src / "setup.py").read_text() == "print('v1')\n" and not (src / ".git").exists()


def test_git_branch_is_refused(bare_repo, tmp_path):
    with pytest.raises(CuwError, match=r"source.tag 'main' is a branch, not a tag"):
        checkout_git(bare_repo, "main", False, tmp_path / "src")
    with pytest.raises(CuwError, match=r"'v9' is not a tag of that repository"):
        checkout_git(bare_repo, "v9", False, tmp_path / "src")


@pytest.mark.parametrize(
    "source, message",
    [
        ("{pypi: 'six==1.16.0'}", "needs source.sha256"),
        ("{pypi: six, sha256: " + "a" * 64 + "}", "must pin a version"),
        ("{git: 'file:///x.git'}", "needs source.tag"),
        ("{path: package, pypi: 'six==1.16.0'}", "exactly one of path, pypi, git (got path, pypi)"),
        ("{path: package, tag: v1}", "go with source.git"),
        ("{}", "exactly one of path, pypi, git (got none)"),
    ],
)
def test_source_pins_are_validated(recipes_dir, source, message):
    path = recipes_dir / "example" / "recipe.yml"
    text = path.read_text().replace("source:\n  path: package", f"source: {source}")
    path.write_text(text)
    with pytest.raises(CuwError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_recipe("example", recipes_dir)


def test_a_recipe_with_a_pypi_source_materializes(recipes_dir, tmp_path):
    from cuw.jobs.sources import materialize

    folder = recipes_dir / "six"
    folder.mkdir()
    (folder / "recipe.yml").write_text(
        f"name: six\nlinks_torch: false\nbackend: scikit-build-core\nsource: {{pypi: '{SIX[0]}', sha256: {SIX[1]}}}\n"
    )
    src = materialize(load_recipe("six", recipes_dir), tmp_path / "job" / "src")
    assert (src / "six.py").is_file()
