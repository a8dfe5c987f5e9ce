"""Shard archives: round trip, and every way a bad one is refused."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from cuw.toolchain.builder import current_builder
from cuw.jobs import archive
from cuw.toolchain import cache
from cuw.config.cell import Cell
from cuw.base.errors import CuwError, InputError
from cuw.base.files import sha256_of
from conftest import run_settings

CELL = Cell("example", "linux", "3.11", "13.0", None)


def manifest(**changes) -> archive.Manifest:
    base = archive.Manifest(
        format=archive.FORMAT,
        forge_version="0.1.0",
        cell=CELL.to_dict(),
        shard_index=1,
        shard_count=2,
        filter="seat",
        cache_tool="ccache",
        cache_version=cache.Ccache.pinned,
        cache_remote=None,
        owned=["a.cu"],
        compiled=["a.cu"],
        counters={"misses": 1},
        fingerprint={"source": "0123456789abcdef"},
        builder=current_builder(run_settings()).to_dict(),
    )
    return replace(base, **changes)


def make_cache(root: Path, names: dict[str, bytes]) -> cache.Cache:
    for name, data in names.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp" / "scratch").write_bytes(b"not an entry")
    return cache.Ccache(root, root.parent)


def test_name_carries_package_lane_python_cuda_torch_and_shard():
    torch_cell = Cell("natten", "linux_aarch64", "3.12", "12.8", "2.8")
    assert archive.archive_name(torch_cell, 3, 23) == "cuw-shard-natten-linux_aarch64-py3.12-cu12.8-torch2.8-3of23.tar"
    assert archive.archive_name(CELL, 1, 2) == "cuw-shard-example-linux-py3.11-cu13.0-notorch-1of2.tar"


def test_round_trip_and_union(tmp_path):
    one = archive.pack(
        make_cache(tmp_path / "c1", {"a/1R": b"one", "stats": b"s"}), manifest(), tmp_path / f"one{archive.SUFFIX}"
    )
    two = archive.pack(make_cache(tmp_path / "c2", {"b/2R": b"two"}), manifest(shard_index=2), tmp_path / f"two{archive.SUFFIX}")
    assert archive.read_manifest(one) == manifest()
    staging = tmp_path / "staging"
    staging.mkdir()
    restored = [archive.unpack(one, staging), archive.unpack(two, staging)]
    added = archive.merge_into(restored, tmp_path / "merged")
    assert added == 3
    assert (tmp_path / "merged" / "a" / "1R").read_bytes() == b"one"
    assert (tmp_path / "merged" / "b" / "2R").read_bytes() == b"two"
    assert not (tmp_path / "merged" / "tmp").exists()  # ccache's scratch space is never handed over


def test_union_of_shards_sharing_folders(tmp_path):
    """A folder the merged cache lacks moves whole; one both hold merges file by file, first copy kept."""
    one = make_cache(tmp_path / "c1", {"a/b/1R": b"one", "a/b/3R": b"three", "a/c/4R": b"four"})
    two = make_cache(tmp_path / "c2", {"a/b/1R": b"one", "a/b/2R": b"two", "d/e/5R": b"five"})
    staging = tmp_path / "staging"
    staging.mkdir()
    restored = [
        archive.unpack(archive.pack(c, manifest(), tmp_path / f"{i}{archive.SUFFIX}"), staging) for i, c in enumerate((one, two))
    ]
    merged = tmp_path / "merged"
    (merged / "a" / "c").mkdir(parents=True)  # the link's cache may already hold folders
    assert archive.merge_into(restored, merged) == 5
    found = {p.relative_to(merged).as_posix(): p.read_bytes() for p in merged.rglob("*") if p.is_file()}
    assert found == {"a/b/1R": b"one", "a/b/2R": b"two", "a/b/3R": b"three", "a/c/4R": b"four", "d/e/5R": b"five"}


def test_archive_is_uncompressed_and_starts_with_its_manifest(tmp_path):
    payload = bytes(200_000)  # compresses to almost nothing: a compressed archive would be far smaller
    made = archive.pack(make_cache(tmp_path / "c", {"a/1R": payload}), manifest(), tmp_path / f"x{archive.SUFFIX}")
    assert made.stat().st_size >= len(payload)
    with tarfile.open(made, "r:") as tar:
        assert tar.getnames() == [archive.MANIFEST, "cache/a/1R"]
        assert all(not m.pax_headers for m in tar.getmembers())  # one header block per entry


def test_an_archive_cut_at_a_member_boundary_is_refused(tmp_path):
    """Without gzip's trailer a tar cut between members reads as a shorter valid one: refused too."""
    good = archive.pack(
        make_cache(tmp_path / "c", {"a/1R": b"x" * 700, "b/2R": b"y" * 1500}), manifest(), tmp_path / f"good{archive.SUFFIX}"
    )
    with tarfile.open(good, "r:") as tar:
        ends = [m.offset_data + -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE for m in tar.getmembers()]
    data = good.read_bytes()
    staging = tmp_path / "staging"
    staging.mkdir()
    for i, end in enumerate(ends[:-1] + [ends[-1], ends[-1] + tarfile.BLOCKSIZE]):
        cut = tmp_path / f"cut{i}{archive.SUFFIX}"
        cut.write_bytes(data[:end])
        with pytest.raises(CuwError, match=r"corrupted or truncated"):
            archive.unpack(cut, staging)
    assert list(staging.iterdir()) == []
    assert archive.unpack(good, staging).manifest == manifest()


def _old_forge_archive(path: Path) -> Path:
    """What forges before the uncompressed format wrote: the same members, gzip-compressed."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        data = json.dumps(asdict(manifest())).encode()
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_an_old_gzip_archive_is_refused_by_name(tmp_path):
    folder = tmp_path / "artifacts"
    folder.mkdir()
    old = _old_forge_archive(folder / f"cuw-shard-{CELL.id}-1of2{archive.LEGACY_SUFFIX}")
    for read in (archive.read_manifest, lambda p: archive.unpack(p, folder), archive.shard_archives):
        with pytest.raises(InputError, match=r"a gzip shard archive from an older forge .*re-run that shard") as err:
            read(old if read is not archive.shard_archives else folder)
        assert str(old) in str(err.value) and "\n" not in str(err.value)
    renamed = old.rename(folder / f"cuw-shard-{CELL.id}-1of2{archive.SUFFIX}")  # the name does not matter
    with pytest.raises(CuwError, match=r"older forge"):
        archive.read_manifest(renamed)
    assert archive.shard_archives(folder) == [renamed]
    assert sorted(folder.iterdir()) == [renamed]  # no staging left behind


def test_truncated_and_corrupted_archives_are_refused(tmp_path):
    good = archive.pack(
        make_cache(tmp_path / "c", {"a/1R": bytes(range(256)) * 400}), manifest(), tmp_path / f"good{archive.SUFFIX}"
    )
    data = good.read_bytes()
    truncated = tmp_path / f"truncated{archive.SUFFIX}"
    truncated.write_bytes(data[: len(data) // 2])
    corrupted = tmp_path / f"corrupted{archive.SUFFIX}"
    corrupted.write_bytes(data[:40] + bytes(b ^ 0xFF for b in data[40:200]) + data[200:])
    staging = tmp_path / "staging"
    staging.mkdir()
    for bad in (truncated, corrupted):
        with pytest.raises(CuwError, match=r"corrupted or truncated"):
            archive.unpack(bad, staging)
    assert list(staging.iterdir()) == []  # nothing half-written


def _raw_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        data = json.dumps(asdict(manifest())).encode()
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for info, payload in members:
            tar.addfile(info, io.BytesIO(payload))
    return path


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "cache/../../evil",
        "/tmp/evil",
        "C:/evil",
        "elsewhere/x",
        "cache/C:/Windows/x",
        "cache\\..\\..\\evil",
        "//host/share/x",
    ],
)
def test_members_outside_the_cache_are_refused(tmp_path, name):
    info = tarfile.TarInfo(name)
    info.size = 4
    bad = _raw_archive(tmp_path / f"bad{archive.SUFFIX}", [(info, b"evil")])
    staging = tmp_path / "s" / "staging"
    staging.mkdir(parents=True)
    with pytest.raises(CuwError, match=r"refusing the archive|unexpected member"):
        archive.unpack(bad, staging)
    assert not (tmp_path / "s" / "evil").exists() and not (tmp_path / "evil").exists()
    assert list(staging.iterdir()) == []


def test_links_in_an_archive_are_refused(tmp_path):
    info = tarfile.TarInfo("cache/a/link")
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    bad = _raw_archive(tmp_path / f"bad{archive.SUFFIX}", [(info, b"")])
    (tmp_path / "staging").mkdir()
    with pytest.raises(InputError, match=r"is a link"):
        archive.unpack(bad, tmp_path / "staging")


@pytest.mark.parametrize("second", ["cache/a/entry", "cache/a/entry/inner"])
def test_a_name_twice_or_a_file_used_as_a_folder_is_refused_and_leaves_nothing(tmp_path, second):
    first = tarfile.TarInfo("cache/a/entry")
    first.size = 3
    again = tarfile.TarInfo(second)
    again.size = 4
    bad = _raw_archive(tmp_path / f"bad{archive.SUFFIX}", [(first, b"one"), (again, b"evil")])
    (tmp_path / "staging").mkdir()
    with pytest.raises(CuwError, match=r"appears twice|corrupted"):
        archive.unpack(bad, tmp_path / "staging")
    assert list((tmp_path / "staging").iterdir()) == []


def test_a_file_that_is_not_an_archive(tmp_path):
    junk = tmp_path / f"cuw-shard-x{archive.SUFFIX}"
    junk.write_text("hello")
    with pytest.raises(CuwError, match=r"corrupted or truncated"):
        archive.read_manifest(junk)
    plain = tmp_path / f"plain{archive.SUFFIX}"
    with tarfile.open(plain, "w") as tar:
        tar.addfile(tarfile.TarInfo("readme"), io.BytesIO(b""))
    with pytest.raises(InputError, match=r"no manifest.json inside"):
        archive.read_manifest(plain)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(cell={**CELL.to_dict(), "recipe": "example_torch"}), r"for recipe 'example_torch', not 'example'"),
        (dict(cell={**CELL.to_dict(), "python": "3.10"}), r"for cell example-linux-py3.10-cu13.0-notorch"),
        (dict(cell={**CELL.to_dict(), "lane": "linux_aarch64"}), r"for cell example-linux_aarch64"),
        (dict(cache_version="4.7.5"), r"made with ccache 4.7.5; this link uses ccache 4.14.2"),
        (dict(cache_tool="sccache", cache_version="0.16.0"), r"made with sccache 0.16.0; this link uses ccache"),
        (dict(cache_remote="redis://127.0.0.1:1"), r"shard used remote cache redis://127.0.0.1:1, this link uses none"),
        (dict(shard_count=3), r"shard 1/3, others are of 2"),
    ],
)
def test_archives_from_elsewhere_are_refused_by_name(tmp_path, changes, message):
    with pytest.raises(CuwError, match=message):
        archive.expect(
            manifest(**changes),
            tmp_path / f"x{archive.SUFFIX}",
            CELL,
            cache.Ccache(tmp_path, tmp_path),
            2,
            current_builder(run_settings()),
        )


@pytest.mark.parametrize("tool", [cache.Ccache, cache.Sccache])
def test_pinned_versions_match_the_project_pins(tool):
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert f'"{tool.package}=={tool.pinned}"' in pyproject
    assert tool(Path("."), Path(".")).version() == tool.pinned


def _archive_with_manifest(path: Path, body) -> Path:
    with tarfile.open(path, "w") as tar:
        data = json.dumps(body).encode()
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.update(shard_index=7), r"says shard 7 of 2; a shard index runs from 1 to the count"),
        (lambda m: m.update(shard_index=0), r"says shard 0 of 2"),
        (lambda m: m.update(shard_index="1x"), r"field 'shard_index' is \"1x\", not an integer"),
        (lambda m: m.update(shard_count=True), r"field 'shard_count' is true, not an integer"),
        (lambda m: m.update(owned="a.cu"), r"field 'owned' is \"a.cu\", not a list of strings"),
        (lambda m: m.update(counters={"misses": "1"}), r"field 'counters' .* not an object of integers"),
        (lambda m: m.update(cache_tool="ccache; rm"), r"not ccache or sccache"),
        (lambda m: m.update(cell="example"), r"field 'cell' is \"example\", not an object"),
        (lambda m: m.update(cell={**CELL.to_dict(), "lane": "../x"}), r"is not a cell"),
        (lambda m: m.update(cell={**CELL.to_dict(), "extra": "x"}), r"is not a cell"),
        (lambda m: m.update(surprise=1), r"unknown field\(s\) surprise"),
        (lambda m: m.update(format=2), r"archive format 2, this forge reads 3 .*run the shards again"),
        (lambda m: m.update(fingerprint={"source": 7}), r"field 'fingerprint' .* not an object of strings"),
        (lambda m: m.pop("owned"), r"missing owned"),
        (lambda m: m.update(part=0), r"says part 0, partial false with 0 TUs left; a part counts from 1"),
        (lambda m: m.update(partial=True), r"says part 1, partial true with 0 TUs left; .*partial exactly when TUs are left"),
        (lambda m: m.update(left=["b.cu"]), r"partial false with 1 TUs left"),
        (lambda m: m.update(partial="yes"), r"field 'partial' is \"yes\", not true or false"),
        (lambda m: m.update(left="b.cu"), r"field 'left' is \"b.cu\", not a list of strings"),
        (lambda m: m.clear(), r"missing"),
    ],
)
def test_a_malformed_manifest_is_a_refusal_naming_the_field(tmp_path, edit, message):
    body = asdict(manifest())
    edit(body)
    bad = _archive_with_manifest(tmp_path / f"bad{archive.SUFFIX}", body)
    with pytest.raises(CuwError, match=message):
        archive.read_manifest(bad)
    with pytest.raises(InputError, match="not a JSON object"):
        archive.read_manifest(_archive_with_manifest(tmp_path / f"list{archive.SUFFIX}", [1, 2]))


def test_a_manifest_or_report_nested_deeper_than_the_parser_goes_is_a_refusal(tmp_path):
    """A tampered archive whose manifest, or whose shard report, is JSON nested 100,000 deep: one
    line naming the file, not an internal error."""
    deep = b"[" * 100_000 + b"]" * 100_000
    bad = tmp_path / f"deep{archive.SUFFIX}"
    with tarfile.open(bad, "w") as tar:
        info = tarfile.TarInfo(archive.MANIFEST)
        info.size = len(deep)
        tar.addfile(info, io.BytesIO(deep))
    with pytest.raises(CuwError, match=f"{bad}: corrupted or truncated archive"):
        archive.read_manifest(bad)
    archive.report_path(bad).write_bytes(deep)
    with pytest.raises(InputError, match="unreadable shard report"):
        archive.check_digest(bad)


def test_the_manifest_schema_covers_every_field():
    assert set(archive._FIELDS) == set(archive.Manifest.__dataclass_fields__)


def _recorded(path: Path, shard: str = "1/2") -> str:
    """The report a shard writes beside its archive, with the archive's digest; returns the digest."""
    digest = sha256_of(path)
    archive.report_path(path).write_text(json.dumps({"shard": shard, "archive_sha256": digest}))
    return digest


def test_one_pass_restores_members_across_read_blocks_and_returns_the_digest_of_every_byte(tmp_path):
    """Entries just under, at and over the reader's block size, an empty one, one whose name needs a
    pax header: each restored byte for byte, and the digest taken while unpacking is the file's."""
    block = archive.COPY_BUFSIZE
    entries = {
        "a/b/small": b"s" * 700,
        "a/b/empty": b"",
        "a/c/under": bytes(range(256)) * (block // 256 - 1) + b"u" * 255,
        "a/c/exact": b"e" * block,
        "d/e/over": b"o" * (2 * block + 513),
        "d/f/" + "n" * 150: b"long name",
    }
    made = archive.pack(make_cache(tmp_path / "c", entries), manifest(), tmp_path / f"one{archive.SUFFIX}")
    digest = _recorded(made)
    (tmp_path / "staging").mkdir()
    restored = archive.unpack(made, tmp_path / "staging", digest, "1/2")
    assert restored.sha256 == digest and restored.manifest == manifest()
    found = {p.relative_to(restored.staging).as_posix(): p.read_bytes() for p in restored.staging.rglob("*") if p.is_file()}
    assert found == entries


@pytest.mark.parametrize("where", ["data", "cut", "end"])
def test_an_archive_that_is_not_the_one_its_shard_made_is_refused_in_one_pass_with_nothing_left(tmp_path, where):
    """A byte flipped in an entry, an archive cut short, its end marker replaced: refused naming the
    archive and its shard by the digest (what is wrong with its bytes comes second), nothing of it left
    in staging, so nothing can be adopted."""
    made = archive.pack(
        make_cache(tmp_path / "c", {"a/1R": b"x" * 3000, "b/2R": b"y" * (archive.COPY_BUFSIZE + 99)}),
        manifest(),
        tmp_path / f"cuw-shard-x-1of2{archive.SUFFIX}",
    )
    digest = _recorded(made)
    data = bytearray(made.read_bytes())
    if where == "data":
        data[len(data) // 2] ^= 0xFF
    elif where == "cut":
        data = data[: len(data) // 3]
    else:  # the first block of the end-of-archive marker, right after the last entry
        with tarfile.open(made, "r:") as tar:
            last = tar.getmembers()[-1]
        data[last.offset_data + -(-last.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE] = 1
    made.write_bytes(bytes(data))
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(InputError) as err:
        archive.unpack(made, staging, digest, "1/2")
    line = str(err.value)
    assert line.startswith(f"{made}: SHA-256 ") and "shard 1/2 recorded when it made the archive" in line and "\n" not in line
    assert list(staging.iterdir()) == []
    if where == "data":  # without the digest a flipped entry byte reads as a good archive: the digest is the check
        assert archive.unpack(made, staging).sha256 != digest
    else:
        with pytest.raises(CuwError, match=r"corrupted or truncated"):
            archive.unpack(made, staging)
        assert list(staging.iterdir()) == []


def test_the_link_restores_every_archive_or_adopts_nothing(tmp_path):
    """Two shards' archives, the second altered after its shard recorded its digest: the link's restore
    refuses it in one line naming it, and its staging folder (and the first archive's) is gone."""
    from cuw.jobs.link import _unpack_all

    folder = tmp_path / "artifacts"
    folder.mkdir()
    good = archive.pack(make_cache(tmp_path / "c1", {"a/1R": b"one"}), manifest(), folder / f"cuw-shard-x-1of2{archive.SUFFIX}")
    bad = archive.pack(
        make_cache(tmp_path / "c2", {"b/2R": b"two" * 1000}),
        manifest(shard_index=2),
        folder / f"cuw-shard-x-2of2{archive.SUFFIX}",
    )
    _recorded(good, "1/2")
    _recorded(bad, "2/2")
    data = bytearray(bad.read_bytes())
    data[-3 * tarfile.BLOCKSIZE - 10] ^= 0xFF  # inside the last entry's bytes
    bad.write_bytes(bytes(data))
    staging = tmp_path / "work" / "link-staging"
    with pytest.raises(InputError, match=rf"^{bad}: SHA-256 .* shard 2/2 recorded when it made the archive"):
        _unpack_all([good, bad], staging)
    assert not staging.exists()
    restored = _unpack_all([good], staging)
    assert archive.merge_into(restored, tmp_path / "cache") == 1 and (tmp_path / "cache" / "a" / "1R").read_bytes() == b"one"
