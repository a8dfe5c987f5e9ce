"""Every reader of a file the forge did not just write, fed random bytes and random JSON: each
either reads it or refuses it with a CuwError (one line, exit 2); never another exception.

The readers: a cost table, a shard archive's manifest (inside a real tar), an index's marker,
the published build records (the plan's and the audit's reader), a seat log, a shard's and a
link's report (:mod:`cuw.base.records`, also held here to refusing a newer schema and a
mistyped field in one line that names the file and the field). The YAML reader has
its own property test (tests/test_properties.py).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuw.base.errors import CuwError

_SCALE = int(os.environ.get("CUW_PROPERTY_EXAMPLES", "0")) or None
CHECK = settings(max_examples=_SCALE or 80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
# Shapes close to the real ones, so the reader goes past its first check.
MARKERS = st.fixed_dictionaries(
    {"format": JSON, "files": st.dictionaries(st.text(max_size=30), JSON, max_size=4)}, optional={"remote": JSON}
)
COSTS = st.fixed_dictionaries(
    {"header": JSON, "costs": st.dictionaries(st.text(max_size=20), JSON, max_size=5)}, optional={"link": JSON, "shard": JSON}
)
MANIFESTS = st.dictionaries(
    st.sampled_from(
        ["format", "cell", "tool", "tool_version", "shard", "shard_index", "shard_count", "fingerprint", "builder", "entries"]
    )
    | st.text(max_size=8),
    JSON,
    max_size=10,
)
REPORTS = st.fixed_dictionaries(
    {"gate": st.sampled_from(["shard", "link"]) | JSON, "ok": JSON},
    optional={
        "schema": st.integers(min_value=-2, max_value=3) | JSON,
        "reasons": JSON,
        "facts": st.dictionaries(st.sampled_from(["compiled", "uncompiled", "missing_shards", "hits"]), JSON) | JSON,
        "state": st.sampled_from(["running", "finished"]) | JSON,
        "build_s": JSON,
        "shard": JSON,
        "phases": JSON,
        "previous": JSON,
    },
)
CONTENT = st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v, allow_nan=True).encode())


def _only_cuw_errors(read, *args) -> None:
    try:
        read(*args)
    except CuwError:
        pass  # a refusal: cli/main prints it as one line and exits 2
    # Any other exception escapes and fails the property.


_FILES: list[Path] = []  # the module's folder for the examples' files (hypothesis runs many examples per test)


@pytest.fixture(scope="module", autouse=True)
def _files_folder(tmp_path_factory: pytest.TempPathFactory):
    _FILES.append(tmp_path_factory.mktemp("reader-properties"))
    yield
    _FILES.pop()


def _file(data: bytes, name: str = "f.json") -> Path:
    folder = Path(tempfile.mkdtemp(prefix="example-", dir=_FILES[-1]))
    path = folder / name
    path.write_bytes(data)
    return path


@CHECK
@given(st.one_of(CONTENT, COSTS.map(lambda v: json.dumps(v, allow_nan=True).encode())))
def test_a_cost_table_is_read_or_refused(data):
    from cuw.partition.costs import load

    _only_cuw_errors(load, _file(data, "costs.json"))


@CHECK
@given(st.one_of(CONTENT, MANIFESTS.map(lambda v: json.dumps(v, allow_nan=True).encode())))
def test_a_shard_archives_manifest_is_read_or_refused(data):
    from cuw.jobs.archive import check_archive, read_manifest

    path = _file(b"", "cuw-shard-example-linux-py3.11-cu13.0-notorch-1of2.tar")
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    _only_cuw_errors(read_manifest, path)
    _only_cuw_errors(check_archive, path)


@CHECK
@given(st.one_of(CONTENT, MARKERS.map(lambda v: json.dumps(v, allow_nan=True).encode())), CONTENT)
def test_an_index_and_its_build_records_are_read_or_refused(marker, record):
    from cuw.ci.published import read_records
    from cuw.wheel.index import published_files

    index = _file(marker, "cuw-index.json").parent
    (index / "files").mkdir()
    try:
        names = list(json.loads(marker).get("files", {}))
    except (ValueError, AttributeError, UnicodeDecodeError, TypeError):
        names = []
    for name in names[:3]:
        if name and "/" not in name and "\\" not in name and name not in (".", ".."):
            try:
                (index / "files" / name).write_bytes(b"PK")
                (index / "files" / f"{name}.build.json").write_bytes(record)
            except (OSError, ValueError):
                pass  # a name the file system refuses (a NUL, a slash): the reader then finds it missing
    _only_cuw_errors(published_files, index)
    _only_cuw_errors(read_records, str(index))


@CHECK
@given(st.lists(st.one_of(st.binary(max_size=80), JSON.map(lambda v: json.dumps(v, allow_nan=True).encode())), max_size=6))
def test_a_seat_log_is_read_or_refused_line_by_line(lines):
    from cuw.seat.seat_log import LogReader, read_log

    path = _file(b"\n".join(lines), "seat.jsonl")
    _only_cuw_errors(read_log, path)
    _only_cuw_errors(lambda p: LogReader(p, count_host=True).compiled_count(), path)


@CHECK
@given(st.one_of(CONTENT, REPORTS.map(lambda v: json.dumps(v, allow_nan=True).encode())))
def test_a_job_report_is_read_or_refused(data):
    from cuw.base.records import read_link_report, read_report, read_shard_report
    from cuw.partition.costs import link_report, shard_report
    from cuw.wheel.publish import _failed_cells

    path = _file(data, "link.report.json")
    for read in (read_report, read_shard_report, read_link_report, link_report, shard_report, _failed_cells):
        _only_cuw_errors(read, path if read is not _failed_cells else path.parent)


@CHECK
@given(st.lists(st.one_of(st.binary(max_size=80), JSON.map(lambda v: json.dumps(v, allow_nan=True).encode())), max_size=6))
def test_a_seat_log_is_read_typed_or_refused(lines):
    from cuw.seat.seat_log import read_entries

    _only_cuw_errors(read_entries, _file(b"\n".join(lines), "seat.jsonl"))


def _refusal(read, path: Path) -> str:
    try:
        read(path)
    except CuwError as exc:
        return str(exc)
    raise AssertionError(f"{path} was read")


def test_a_report_of_a_newer_schema_or_with_a_mistyped_field_is_refused_in_one_line(tmp_path):
    from cuw.base.records import SHARD_REPORT_SCHEMA, read_link_report, read_shard_report
    from cuw.partition.costs import link_report

    path = tmp_path / "cuw-shard-x-1of2.report.json"
    path.write_text(json.dumps({"gate": "shard", "ok": True, "schema": SHARD_REPORT_SCHEMA + 1, "reasons": []}))
    why = _refusal(read_shard_report, path)
    assert (
        why.startswith(f"{path}: a shard report of schema 2; this forge reads shard reports up to schema 1") and "\n" not in why
    )
    path.write_text(json.dumps({"gate": "shard", "ok": True, "build_s": "12 s"}))
    assert _refusal(read_shard_report, path) == f"{path}: field 'build_s' is \"12 s\", not a number of seconds >= 0"
    for bad in ("0/10", "11/10", "-1/10", "a/b", "1/2/3", "٣/10"):
        path.write_text(json.dumps({"gate": "shard", "ok": True, "shard": bad}))
        assert _refusal(read_shard_report, path).endswith(", not a shard 'i/N' with 1 <= i <= N"), bad
    path.write_text(json.dumps({"gate": "shard", "ok": True, "build_s": -5}))
    assert _refusal(read_shard_report, path).endswith("'build_s' is -5, not a number of seconds >= 0")
    path.write_text(json.dumps({"gate": "shard", "ok": True, "facts": {"uncompiled": "a.cu"}}))
    assert _refusal(read_shard_report, path) == f"{path}: fact 'uncompiled' is \"a.cu\", not a list of strings"
    link = tmp_path / "x.whl.link.json"
    link.write_text(json.dumps({"gate": "link", "ok": True, "phases": {"build_s": "long"}}))
    assert _refusal(link_report, link) == f'{link}: field \'phases\' is {{"build_s": "long"}}, not an object of numbers'
    assert _refusal(read_link_report, path) == f"{path}: a shard report, not the link report expected here"
    link.write_text(json.dumps({"gate": "link", "ok": True, "schema": "1"}))
    assert _refusal(read_link_report, link) == f"{link}: field 'schema' is \"1\", not a schema version (an integer from 1)"


def test_a_report_without_a_schema_reads_as_version_1_and_the_writer_round_trips(tmp_path):
    """Reports written before the field existed are read as they are; what report.write writes,
    its reader reads back, unknown fields included."""
    from cuw.base.records import ShardReport, read_shard_report
    from cuw.gates import report
    from cuw.gates.conditions import Verdict

    path = tmp_path / "cuw-shard-x-1of2.report.json"
    path.write_text(json.dumps({"gate": "shard", "ok": True, "reasons": ["r"], "facts": {"compiled": 3}, "build_s": 1.5}))
    old = read_shard_report(path)
    assert (old.schema, old.ok, old.facts["compiled"], old.build_s, old.state) == (1, True, 3, 1.5, "finished")
    record = ShardReport(
        gate="shard", ok=True, shard="1/2", build_s=2.0, extra={"part_of_a_later_forge": [1]}, nulls=frozenset({"archive"})
    )
    report.write(Verdict("shard", False, ["no"], {"compiled": 0}), path, record)
    written = json.loads(path.read_text())
    assert written["schema"] == 1 and written["archive"] is None and written["part_of_a_later_forge"] == [1]
    back = read_shard_report(path)
    assert isinstance(back, ShardReport) and (back.ok, back.reasons, back.shard, back.build_s) == (False, ["no"], "1/2", 2.0)
    assert back.extra == {"part_of_a_later_forge": [1]} and back.nulls == {"archive"}
    assert back.to_json() == written, "read back, the report writes the same JSON: its nulls and unknown fields kept"
    report.begin(path, ShardReport(gate="shard", ok=False, shard="1/2", nulls=frozenset({"archive"})))
    running = read_shard_report(path)
    assert running.state == "running" and running.previous == {
        "ok": False,
        "state": "finished",
        "reasons": ["no"],
        "archive": None,
    }


def test_a_seat_log_line_of_a_newer_schema_or_mistyped_is_refused_by_its_line(tmp_path):
    from cuw.seat.seat_log import read_entries

    log = tmp_path / "seat.jsonl"
    good = {"action": "compiled", "key": "a.cu", "seconds": 1.0, "at": 5.0, "rc": 0, "outcome": "miss"}
    log.write_text(json.dumps(good) + "\n" + '{"action": "compiled", "key": "b.cu", "sec')  # the last line cut short
    (entry,) = read_entries(log)
    assert (entry.key, entry.seconds, entry.is_compile, entry.timed, entry.measured) == ("a.cu", 1.0, True, True, False)
    log.write_text(json.dumps(good) + "\n" + json.dumps({**good, "rc": "0"}) + "\n")
    assert _refusal(read_entries, log) == f"{log}:2: field 'rc' is \"0\", not an integer"
    log.write_text(json.dumps({**good, "schema": 2}) + "\n")
    assert _refusal(read_entries, log).startswith(f"{log}:1: a seat log line of schema 2; this forge reads")
