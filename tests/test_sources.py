"""Source acquisition: PyPI sdists (pinned by sha256), git tags, safe unpacking."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import shared_sources, run_settings
from cuw.base.errors import CuwError, InputError
from cuw.config.recipe import load_recipe
from cuw.jobs.sources import checkout_git, fetch_sdist, unpack

SIX = ("six==1.16.0", "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUW_SOURCE_CACHE", str(tmp_path / "source-cache"))


def test_sdist_is_fetched_verified_cached_and_unpacked(tmp_path):
    archive = fetch_sdist(*SIX, settings=run_settings())
    assert archive.name == f"{SIX[1]}-six-1.16.0.tar.gz" and archive.parent == tmp_path / "source-cache"
    assert fetch_sdist(*SIX, settings=run_settings()) == archive  # content-addressed: the second call downloads nothing
    # Written beside its name and renamed: nothing else (no half-copied temp file) is left in the cache.
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]
    project = unpack(archive, tmp_path / "src")
    assert (project / "six.py").is_file() and (project / "setup.py").is_file()


def test_a_cached_sdist_is_checked_on_every_use(tmp_path, capfd):
    """The cache is trusted by content: an altered or truncated file under the pinned name is
    removed and fetched again, never built as it is."""
    archive = fetch_sdist(*SIX, settings=run_settings())
    good = archive.read_bytes()
    for bad in (good[: len(good) // 2], good + b"injected.cu"):
        archive.write_bytes(bad)
        assert fetch_sdist(*SIX, settings=run_settings()) == archive and archive.read_bytes() == good
        assert "does not match its sha256" in capfd.readouterr().err
    empty = tmp_path / "cwd"
    empty.mkdir()
    from cuw.base.settings import Settings

    # Set but empty: the default cache, not the current folder.
    assert Settings.from_env({"CUW_SOURCE_CACHE": ""}).folders.source_cache == Path.home() / ".cache" / "cuw" / "sources"


def test_git_reaches_the_url_after_the_end_of_options(tmp_path):
    """Even a URL that starts with "-" (the recipe check refuses it first) reaches git as a repository."""
    marker = tmp_path / "pwned"
    with pytest.raises(CuwError, match="cannot read"):
        checkout_git(f"--upload-pack=touch {marker}", "v1", "0" * 40, False, tmp_path / "src")
    assert not marker.exists()


def test_sdist_with_the_wrong_hash_is_refused(tmp_path):
    with pytest.raises(CuwError, match=r"has sha256 1e61c374.*the recipe pins 0000"):
        fetch_sdist(SIX[0], "0" * 64, settings=run_settings())
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


def _tag_commit(url: str, tag: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", url.removeprefix("file://"), "rev-parse", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_git_tag_checkout(bare_repo, tmp_path):
    src = checkout_git(bare_repo, "v1.0", _tag_commit(bare_repo, "v1.0"), False, tmp_path / "src")
    assert (src / "setup.py").read_text() == "print('v1')\n" and not (src / ".git").exists()


def test_git_branch_is_refused(bare_repo, tmp_path):
    with pytest.raises(InputError, match=r"source.tag 'main' is a branch, not a tag"):
        checkout_git(bare_repo, "main", "0" * 40, False, tmp_path / "src")
    with pytest.raises(CuwError, match=r"'v9' is not a tag of that repository"):
        checkout_git(bare_repo, "v9", "0" * 40, False, tmp_path / "src")


def test_a_tag_that_moved_since_the_pin_is_refused_before_cloning(bare_repo, tmp_path):
    """Shards cloning at different times must build one tree: the tag must still name the pinned commit."""
    pinned = _tag_commit(bare_repo, "v1.0")
    bare = bare_repo.removeprefix("file://")
    subprocess.run(["git", "--git-dir", bare, "tag", "-f", "v1.0", "main"], check=True, capture_output=True)  # moved
    moved = _tag_commit(bare_repo, "v1.0")
    with pytest.raises(CuwError, match=rf"names commit {moved}, but the recipe pins source.commit {pinned}: the tag moved"):
        checkout_git(bare_repo, "v1.0", pinned, False, tmp_path / "src")
    assert not (tmp_path / "src").exists()
    # An annotated tag is compared by the commit it names (its peeled ref), not the tag object.
    subprocess.run(
        ["git", "--git-dir", bare, "-c", "user.email=t@t", "-c", "user.name=t", "tag", "-f", "-a", "-m", "x", "v1.0", pinned],
        check=True,
        capture_output=True,
    )
    src = checkout_git(bare_repo, "v1.0", pinned, False, tmp_path / "src")
    assert (src / "setup.py").read_text() == "print('v1')\n"


@pytest.mark.parametrize(
    "source, message",
    [
        ("{pypi: 'six==1.16.0'}", "needs source.sha256"),
        ("{pypi: six, sha256: " + "a" * 64 + "}", "must pin a version"),
        ("{git: 'file:///x.git'}", "needs source.tag"),
        ("{git: '--upload-pack=touch /tmp/pwned', tag: v1}", "is not a repository URL"),
        ("{git: 'ext::sh -c touch% /tmp/pwned', tag: v1}", "is not a repository URL"),
        ("{git: 'file:///x.git', tag: '--help'}", "needs source.tag"),
        ("{path: package, pypi: 'six==1.16.0'}", "exactly one of path, pypi, git (got path, pypi)"),
        ("{path: package, tag: v1}", "go with source.git"),
        ("{path: package, commit: " + "a" * 40 + "}", "go with source.git"),
        ("{git: 'file:///x.git', tag: v1}", "source.commit None must be the commit source.tag names"),
        ("{git: 'file:///x.git', tag: v1, commit: v1}", "source.commit 'v1' must be the commit"),
        ("{git: 'file:///x.git', tag: v1, commit: " + "A" * 40 + "}", "must be the commit source.tag names"),
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
    src = materialize(load_recipe("six", recipes_dir), tmp_path / "job" / "src", settings=run_settings())
    assert (src / "six.py").is_file()


# -- git sources from a local mirror (--git-mirror, $CUW_GIT_MIRROR) ------------------------

PKG_URL = "https://git.example.invalid/someone/pkg.git"
V1_COMMIT = "2631aee0fcf0e0beefa5bd4eb50ede39fe5d715e"  # the upstream fixture's v1.0 (fixed names and dates)


_DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _git(repo: Path, *args: str) -> str:
    """git in ``repo`` with fixed names and dates: the upstream's commits have the same ids every run."""
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **_DATES},
    ).stdout.strip()


@pytest.fixture
def upstream(tmp_path) -> Path:
    """A normal repository: tag v1.0 (setup.py prints v1), then a later commit on main."""
    work = tmp_path / "upstream" / "pkg"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    (work / "setup.py").write_text("print('v1')\n")
    (work / "version.txt").write_text("1.0\n")
    (work / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.18)\nproject(pkg)\n")
    _git(work, "add", ".")
    _git(work, "commit", "-qm", "v1")
    _git(work, "tag", "v1.0")
    (work / "setup.py").write_text("print('v2')\n")
    _git(work, "commit", "-qam", "v2")
    return work


def _archive(repo: Path, dest: Path, tag: str = "v1.0", prefix: str = "pkg-1.0/") -> Path:
    """A real ``git archive`` tarball of ``tag`` (what GitHub's release tarballs are)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(repo, "archive", "--format=tar.gz", f"--prefix={prefix}", "-o", str(dest), tag)
    return dest


def _git_recipe(recipes_dir: Path, pin: str | None, extra: str = "", url: str = PKG_URL, commit: str = "") -> str:
    folder = recipes_dir / "pkg"
    folder.mkdir(exist_ok=True)
    pinned = f", archive_sha256: '{pin}'" if pin else ""
    source = f"{{git: '{url}', tag: v1.0, commit: {commit or V1_COMMIT}{pinned}{extra}}}"
    (folder / "recipe.yml").write_text(f"name: pkg\nlinks_torch: false\nbackend: setuptools\nsource: {source}\n")
    return "pkg"


def _materialize(recipes_dir: Path, mirror: Path, dest: Path, monkeypatch) -> Path:
    from cuw.jobs.sources import materialize

    monkeypatch.setenv("CUW_GIT_MIRROR", str(mirror))
    return materialize(load_recipe("pkg", recipes_dir), dest, settings=run_settings())


def _sha(path: Path) -> str:
    from cuw.base.files import sha256_of

    return sha256_of(path)


def test_mirror_is_a_bare_or_normal_repository(upstream, recipes_dir, tmp_path, monkeypatch):
    _git_recipe(recipes_dir, None)
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(upstream), str(bare)], check=True)
    for n, mirror in enumerate((bare, upstream)):
        src = _materialize(recipes_dir, mirror, tmp_path / f"src{n}", monkeypatch)
        assert (src / "setup.py").read_text() == "print('v1')\n", "the tag, not the branch head"
        assert not (src / ".git").exists()


@pytest.mark.parametrize("layout", ["pkg.git", "pkg", "someone/pkg.git", "someone/pkg"])
def test_folder_of_mirrors_finds_the_repository_by_name(layout, upstream, recipes_dir, tmp_path, monkeypatch):
    _git_recipe(recipes_dir, None)
    mirrors = tmp_path / "mirrors"
    (mirrors / layout).parent.mkdir(parents=True, exist_ok=True)
    bare = layout.endswith(".git")
    subprocess.run(["git", "clone", "-q", *(["--bare"] if bare else []), str(upstream), str(mirrors / layout)], check=True)
    src = _materialize(recipes_dir, mirrors, tmp_path / "src", monkeypatch)
    assert (src / "setup.py").read_text() == "print('v1')\n"


@pytest.mark.parametrize("name", ["pkg-1.0.tar.gz", "pkg-v1.0.tar.gz", "pkg-1.0.tgz"])
def test_folder_of_mirrors_finds_a_pinned_tarball(name, upstream, recipes_dir, tmp_path, monkeypatch, capfd):
    tarball = _archive(upstream, tmp_path / "mirrors" / name)
    _git_recipe(recipes_dir, _sha(tarball))
    src = _materialize(recipes_dir, tmp_path / "mirrors", tmp_path / "src", monkeypatch)
    assert (src / "setup.py").read_text() == "print('v1')\n" and (src / "version.txt").is_file()
    assert f"from the tarball {tarball}" in capfd.readouterr().err


def test_mirror_is_one_tarball(upstream, recipes_dir, tmp_path, monkeypatch):
    tarball = _archive(upstream, tmp_path / "anything.tar.gz")
    _git_recipe(recipes_dir, _sha(tarball))
    assert (_materialize(recipes_dir, tarball, tmp_path / "src", monkeypatch) / "setup.py").is_file()


def test_repository_is_preferred_to_a_tarball(upstream, recipes_dir, tmp_path, monkeypatch):
    mirrors = tmp_path / "mirrors"
    _archive(upstream, mirrors / "pkg-1.0.tar.gz")
    subprocess.run(["git", "clone", "-q", "--bare", str(upstream), str(mirrors / "pkg.git")], check=True)
    _git_recipe(recipes_dir, "0" * 64)  # a wrong pin: never read, the repository wins
    assert (_materialize(recipes_dir, mirrors, tmp_path / "src", monkeypatch) / "setup.py").is_file()


def test_tarball_with_the_wrong_hash_is_refused(upstream, recipes_dir, tmp_path, monkeypatch):
    tarball = _archive(upstream, tmp_path / "mirrors" / "pkg-1.0.tar.gz")
    _git_recipe(recipes_dir, "a" * 64)
    with pytest.raises(CuwError) as info:
        _materialize(recipes_dir, tmp_path / "mirrors", tmp_path / "src", monkeypatch)
    message = str(info.value)
    assert "\n" not in message
    assert f"{tarball} has sha256 {_sha(tarball)}" in message
    assert f"{recipes_dir / 'pkg' / 'recipe.yml'} pins source.archive_sha256 {'a' * 64}" in message
    assert "correct the pin" in message and "git archive" in message
    assert not (tmp_path / "src").exists()


def test_unpinned_tarball_is_refused_with_the_pin_to_write(upstream, recipes_dir, tmp_path, monkeypatch):
    tarball = _archive(upstream, tmp_path / "pkg-1.0.tar.gz")
    _git_recipe(recipes_dir, None)
    with pytest.raises(CuwError, match=rf"recipe.yml: source.archive_sha256 is not set.*archive_sha256: {_sha(tarball)}"):
        _materialize(recipes_dir, tarball, tmp_path / "src", monkeypatch)


def test_junk_tarball_matching_its_pin_is_refused_as_corrupt(recipes_dir, tmp_path, monkeypatch):
    junk = tmp_path / "pkg-1.0.tar.gz"
    junk.write_bytes(Path("/bin/ls").read_bytes()[:4096])
    _git_recipe(recipes_dir, _sha(junk))
    with pytest.raises(CuwError, match="corrupted or truncated"):
        _materialize(recipes_dir, tmp_path, tmp_path / "src", monkeypatch)


def test_tarball_members_escaping_the_tree_are_refused(recipes_dir, tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    evil = _tar(tmp_path / "m" / "pkg-1.0.tar.gz", [_file("pkg-1.0/setup.py"), _file("pkg-1.0/../../evil")])
    _git_recipe(recipes_dir, _sha(evil))
    with pytest.raises(InputError, match="would land outside the source folder"):
        _materialize(recipes_dir, tmp_path / "m", tmp_path / "src", monkeypatch)
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda m: (m / "pkg-1.0.tar.gz").mkdir(parents=True), "pkg-1.0.tar.gz is a folder, not a tarball"),
        (lambda m: (m / "pkg").mkdir(parents=True), "pkg is a folder but not a git repository"),
        (lambda m: (m.mkdir(), (m / "pkg.git").write_text("x"))[0], "pkg.git is not a git repository"),
        (lambda m: m.mkdir(), "holds no mirror of https://git.example.invalid/someone/pkg.git at v1.0: looked for pkg.git"),
        (lambda m: None, "no such file or folder"),
    ],
    ids=["folder-for-tarball", "plain-folder-for-repo", "file-for-repo", "empty-folder", "missing"],
)
def test_hostile_mirror_layouts_are_refused(make, message, recipes_dir, tmp_path, monkeypatch):
    mirrors = tmp_path / "mirrors"
    make(mirrors)
    _git_recipe(recipes_dir, "a" * 64)
    with pytest.raises(CuwError, match=message.replace(".", r"\.")) as info:
        _materialize(recipes_dir, mirrors, tmp_path / "src", monkeypatch)
    assert "\n" not in str(info.value)


def test_mirror_without_the_tag_is_refused(upstream, recipes_dir, tmp_path, monkeypatch):
    _git_recipe(recipes_dir, None)
    _git(upstream, "tag", "-d", "v1.0")
    with pytest.raises(InputError, match=rf"git mirror {upstream} \(for {PKG_URL}\): source.tag 'v1.0' is not a tag"):
        _materialize(recipes_dir, upstream, tmp_path / "src", monkeypatch)


def test_a_mirror_whose_tag_moved_and_a_tarball_of_another_commit_are_refused(upstream, recipes_dir, tmp_path, monkeypatch):
    assert _git(upstream, "rev-parse", "v1.0^{commit}") == V1_COMMIT
    _git_recipe(recipes_dir, None)
    _git(upstream, "tag", "-f", "v1.0", "main")  # the tag now names the later commit
    with pytest.raises(CuwError, match=rf"names commit [0-9a-f]{{40}}, but the recipe pins source.commit {V1_COMMIT}"):
        _materialize(recipes_dir, upstream, tmp_path / "src", monkeypatch)
    tarball = _archive(upstream, tmp_path / "mirrors" / "pkg-1.0.tar.gz")  # `git archive` of the moved tag
    _git_recipe(recipes_dir, _sha(tarball))  # its sha256 pinned, but the commit it names is not the pinned one
    with pytest.raises(CuwError, match=rf"is a `git archive` of commit [0-9a-f]{{40}}, but .* pins source.commit {V1_COMMIT}"):
        _materialize(recipes_dir, tmp_path / "mirrors", tmp_path / "src", monkeypatch)
    assert not (tmp_path / "src").exists()


def test_dotdot_repository_name_is_refused(recipes_dir, tmp_path, monkeypatch):
    (tmp_path / "mirrors").mkdir()
    _git_recipe(recipes_dir, None, url="https://git.example.invalid/someone/..")
    with pytest.raises(CuwError, match=r"cannot name a mirror after it \(its last part '\.\.' is not a plain name\)"):
        _materialize(recipes_dir, tmp_path / "mirrors", tmp_path / "src", monkeypatch)


def test_tarball_cannot_carry_submodules(upstream, recipes_dir, tmp_path, monkeypatch):
    tarball = _archive(upstream, tmp_path / "pkg-1.0.tar.gz")
    _git_recipe(recipes_dir, _sha(tarball), extra=", recursive: true")
    with pytest.raises(InputError, match="source.recursive needs submodules, which a `git archive` tarball"):
        _materialize(recipes_dir, tarball, tmp_path / "src", monkeypatch)


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "{git: 'file:///x.git', tag: v1, commit: " + "a" * 40 + ", archive_sha256: abc}",
            "archive_sha256 'abc' is not a sha256",
        ),
        (
            "{git: 'file:///x.git', tag: v1, commit: " + "a" * 40 + ", archive_sha256: " + "A" * 64 + "}",
            "is not a sha256 (64 lowercase",
        ),
        ("{pypi: 'six==1.16.0', sha256: " + "a" * 64 + ", archive_sha256: " + "a" * 64 + "}", "go with source.git"),
    ],
)
def test_archive_pin_is_validated(recipes_dir, source, message):
    path = recipes_dir / "example" / "recipe.yml"
    path.write_text(path.read_text().replace("source:\n  path: package", f"source: {source}"))
    with pytest.raises(CuwError, match=message.replace("(", r"\(")):
        load_recipe("example", recipes_dir)


def test_mirror_is_ignored_for_other_sources(recipes_dir, tmp_path, monkeypatch):
    from cuw.jobs.sources import materialize

    monkeypatch.setenv("CUW_GIT_MIRROR", str(tmp_path / "nowhere"))
    assert (
        materialize(load_recipe("example", recipes_dir), tmp_path / "src", settings=run_settings()) / "pyproject.toml"
    ).exists()


def _cli(args: list[str], env_mirror: str | None = None) -> subprocess.CompletedProcess:
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("CUW_")}
    if env_mirror is not None:
        env["CUW_GIT_MIRROR"] = env_mirror
    return subprocess.run(
        [sys.executable, "-m", "cuw", *args], capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent
    )


def test_cli_option_and_variable_reach_the_fetch(upstream, recipes_dir, tmp_path):
    tarball = _archive(upstream, tmp_path / "mirrors" / "pkg-1.0.tar.gz")
    _git_recipe(recipes_dir, _sha(tarball))
    base = ["lint-guards", "pkg", "--recipes", str(recipes_dir)]
    by_option = _cli([*base, "--git-mirror", str(tmp_path / "mirrors")], env_mirror=str(tmp_path / "nowhere"))
    assert by_option.returncode == 0, by_option.stderr  # the option wins over the variable
    assert f"from the tarball {tarball}" in by_option.stderr
    by_env = _cli(base, env_mirror=str(tmp_path / "mirrors"))
    assert by_env.returncode == 0 and f"from the tarball {tarball}" in by_env.stderr, by_env.stderr
    bad = _cli(["plan", "pkg", "--recipes", str(recipes_dir), "--git-mirror", str(tmp_path / "nowhere")])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith(f"cuw: error: --git-mirror {tmp_path / 'nowhere'}: no such file or folder")
    wrong = _cli(
        ["shard", "pkg", "1/2", "--recipes", str(recipes_dir), "--work", str(tmp_path / "w"), "--artifacts", str(tmp_path / "a")],
        env_mirror=str(tmp_path / "nowhere"),
    )
    assert wrong.returncode == 2 and "$CUW_GIT_MIRROR" in wrong.stderr and "Traceback" not in wrong.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "a").exists(), "checked before any folder is made"


SHARED = shared_sources()


@pytest.mark.needs("shared-sources")
@pytest.mark.parametrize("key, version", [("cumm", "0.7.11"), ("spconv", "2.3.8")])
def test_real_git_archive_snapshots_match_the_recipe_pins(key, version, recipes_dir, tmp_path, monkeypatch):
    """The recipes' pins are the published SHA256SUMS, and the snapshots unpack to the tagged tree."""
    from cuw.jobs.sources import materialize

    sums = dict(reversed(line.split()) for line in (SHARED / "SHA256SUMS").read_text().splitlines() if line.strip())
    recipe = load_recipe(key, recipes_dir)
    assert recipe.source.archive_sha256 == sums[f"{key}-{version}.tar.gz"]
    monkeypatch.setenv("CUW_GIT_MIRROR", str(SHARED))
    src = materialize(recipe, tmp_path / "src", settings=run_settings())
    assert (src / "version.txt").read_text().strip() == version and (src / "setup.py").is_file()
