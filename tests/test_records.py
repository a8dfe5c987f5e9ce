"""The records jobs hand each other (cuw/base/records.py) through their one writer and one reader:
whatever a record holds, written then read it is the same record (its nulls and the fields of a
later forge included); what its reader would refuse, its writer refuses before a byte is written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuw.base import records
from cuw.base.errors import CuwError

_SCALE = int(os.environ.get("CUW_PROPERTY_EXAMPLES", "0")) or None
CHECK = settings(max_examples=_SCALE or 60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

TEXT = st.text(max_size=12)
NUMBER = st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False)
JSON = st.recursive(
    st.none() | st.booleans() | NUMBER | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
# A value for each check a record's field is held to.
VALUES: dict[int, st.SearchStrategy[Any]] = {
    id(records.INT): st.integers(-(2**40), 2**40),
    id(records.NUMBER): NUMBER,
    id(records.SECONDS): st.floats(0, 1e9) | st.integers(0, 2**40),
    id(records.STRING): TEXT,
    id(records.BOOL): st.booleans(),
    id(records.OBJECT): st.dictionaries(TEXT, JSON, max_size=3),
    id(records.OBJECTS): st.lists(st.dictionaries(TEXT, JSON, max_size=3), max_size=3),
    id(records.STRINGS): st.lists(TEXT, max_size=3),
    id(records.INTS): st.lists(st.integers(-(2**40), 2**40), max_size=3),
    id(records.NUMBERS): st.dictionaries(TEXT, NUMBER, max_size=3),
    id(records.TEXTS): st.dictionaries(TEXT, TEXT, max_size=3),
}
SPECIAL = {
    "state": st.sampled_from(["running", "finished"]),
    "schema": st.just(1),
    "shard": st.integers(1, 255).flatmap(lambda n: st.integers(1, n).map(lambda i: f"{i}/{n}")),
}


def _value(name: str, check: records.Check) -> st.SearchStrategy[Any]:
    return SPECIAL[name] if name in SPECIAL else VALUES[id(check)]


@st.composite
def job_reports(draw: st.DrawFn, kind: type[records.JobReport]) -> records.JobReport:
    """A report of ``kind``: any of its fields set or not, facts its reader knows and others, a later
    forge's fields, and nulls among the unset ones."""
    optional = {f.name for f in fields(kind) if f.default is None}
    chosen = draw(st.sets(st.sampled_from(sorted(kind.FIELDS)), max_size=len(kind.FIELDS)))
    values = {k: draw(_value(k, kind.FIELDS[k])) for k in chosen if k not in ("gate", "ok")}
    facts = draw(st.dictionaries(TEXT.filter(lambda k: k not in kind.FACTS), JSON, max_size=3))
    facts |= {k: draw(_value(k, kind.FACTS[k])) for k in draw(st.sets(st.sampled_from(sorted(kind.FACTS))))}
    known = {f.name for f in fields(kind)}
    extra = draw(st.dictionaries(TEXT.filter(lambda k: k not in known), JSON, max_size=2))
    report = kind(gate=kind.__name__[:-6].lower(), ok=draw(st.booleans()), extra=extra, **{**values, "facts": facts})
    unset = sorted(k for k in optional if getattr(report, k) is None)
    nulls = draw(st.sets(st.sampled_from(unset))) if unset else set()
    return replace(report, nulls=frozenset(nulls))


REPORTS = st.one_of(job_reports(records.ShardReport), job_reports(records.LinkReport))


@CHECK
@given(REPORTS)
def test_a_job_report_written_reads_back_as_itself(report: records.JobReport) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out" / "r.report.json"
        assert records.write_report(path, report) == path
        assert records.read_report(path, report.gate) == report
        assert json.loads(path.read_text()) == json.loads(json.dumps(report.to_json()))
        assert oct(path.stat().st_mode & 0o777) == oct(0o644), "readable by the jobs after it (not the temp file's 0600)"


@CHECK
@given(REPORTS)
def test_a_job_report_read_writes_back_the_same_json(report: records.JobReport) -> None:
    """What a later forge wrote (fields this one does not know, nulls) survives this forge's read and write."""
    data = json.loads(json.dumps(report.to_json()))
    assert records.job_report(data, "r").to_json() == data


def test_the_writer_refuses_what_its_reader_would_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cuw-shard-x-1of2.report.json"
    bad = records.ShardReport(gate="shard", ok=True, part="2")  # type: ignore[arg-type]
    with pytest.raises(CuwError) as refused:
        records.write_report(path, bad)
    assert str(refused.value) == f"{path}: field 'part' is \"2\", not an integer"
    assert not path.exists() and list(tmp_path.iterdir()) == []
    wrong_fact = records.LinkReport(gate="link", ok=True, facts={"hits": 1.5})
    with pytest.raises(CuwError, match=r"fact 'hits' is 1\.5, not an integer"):
        records.write_report(tmp_path / "link.report.json", wrong_fact)


def test_a_shard_report_keeps_its_null_archive_and_leaves_other_unset_fields_out(tmp_path: Path) -> None:
    """What a shard's report said before the records were typed: ``archive: null`` until it has one."""
    record = records.ShardReport(gate="shard", ok=False, shard="1/2", nulls=frozenset({"archive"}))
    written = json.loads(records.write_report(tmp_path / "r.json", record).read_text())
    assert written == {
        "gate": "shard",
        "ok": False,
        "reasons": [],
        "facts": {},
        "state": "finished",
        "shard": "1/2",
        "archive": None,
        "schema": 1,
    }


# -- verify reports and build records ------------------------------------------------------------

CHECKS = st.lists(st.builds(records.VerifyCheck, TEXT, st.booleans(), st.lists(TEXT, max_size=3)), max_size=4)
VERIFY_REPORTS = st.builds(
    records.VerifyReport,
    TEXT,
    CHECKS,
    st.dictionaries(TEXT.filter(lambda k: k not in ("wheel", "ok", "checks", "schema")), JSON, max_size=2),
)


@st.composite
def build_records(draw: st.DrawFn) -> records.BuildRecord:
    """A build record: any of its fields set or not (its wheel it always names), a later forge's
    fields, and nulls among the unset ones."""
    kind = records.BuildRecord
    chosen = draw(st.sets(st.sampled_from(sorted(kind.FIELDS)), max_size=len(kind.FIELDS)))
    values = {k: draw(_value(k, kind.FIELDS[k])) for k in chosen if k != "wheel"}
    known = {f.name for f in fields(kind)}
    extra = draw(st.dictionaries(TEXT.filter(lambda k: k not in known), JSON, max_size=2))
    record = kind(wheel=draw(TEXT), extra=extra, **values)
    unset = sorted(k for k in kind.FIELDS if getattr(record, k) is None)
    return replace(record, nulls=frozenset(draw(st.sets(st.sampled_from(unset))) if unset else ()))


@CHECK
@given(VERIFY_REPORTS, build_records())
def test_a_verify_report_and_a_build_record_written_read_back_as_themselves(
    report: records.VerifyReport, record: records.BuildRecord
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.whl.verify.json"
        records.write_verify_report(path, report)
        assert records.read_verify_report(path) == report
        assert json.loads(path.read_text())["ok"] is report.ok
        path = Path(tmp) / "files" / "x.whl.build.json"
        records.write_build_record(path, record)
        assert records.read_build_record(path) == record
        assert json.loads(path.read_text()) == json.loads(json.dumps(record.to_json()))


def _refusal(reader, path: Path, body: Any) -> str:  # type: ignore[no-untyped-def]
    path.write_text(json.dumps(body))
    with pytest.raises(CuwError) as refused:
        reader(path)
    return str(refused.value)


def test_a_verify_report_or_build_record_it_cannot_read_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "x.whl.verify.json"
    check = {"name": "arch", "ok": True, "details": []}
    read = records.read_verify_report
    assert _refusal(read, path, {"wheel": "x.whl", "ok": True, "checks": [check], "schema": 2}) == (
        f"{path}: a verify report of schema 2; this forge reads verify reports up to schema 1: "
        "read it with the forge that wrote it, or run the job again with this one"
    )
    assert (
        _refusal(read, path, {"wheel": "x.whl", "checks": "arch"}) == f"{path}: field 'checks' is \"arch\", not a list of objects"
    )
    assert _refusal(read, path, {"wheel": "x.whl", "checks": [{**check, "details": "none"}]}) == (
        f"{path}: check 'arch': field 'details' is \"none\", not a list of strings"
    )
    assert _refusal(read, path, {"wheel": "x.whl", "checks": [{"ok": True}]}) == (
        f'{path}: check 1 is {{"ok": true}}, not an object with its name and ok'
    )
    assert _refusal(read, path, {"wheel": "x.whl", "ok": True, "checks": [{**check, "ok": False}]}) == (
        f"{path}: field 'ok' is true, but its checks say false"
    )
    path.write_text(json.dumps({"wheel": "x.whl", "ok": True, "checks": [check]}))
    assert read(path) == records.VerifyReport("x.whl", [records.VerifyCheck("arch", True)]), "written before the schema field: 1"

    path = tmp_path / "x.whl.build.json"
    read_record = records.read_build_record
    assert _refusal(read_record, path, {"format": 3, "wheel": "x.whl"}).startswith(
        f"{path}: a build record of format 3; this forge reads build records up to format 2"
    )
    assert _refusal(read_record, path, {"format": 2}) == f"{path}: field 'wheel' is null, not a string: not a build record"
    assert _refusal(read_record, path, {"wheel": "x.whl", "link": [0]}) == f"{path}: field 'link' is [0], not an object"
    assert (
        _refusal(read_record, path, {"wheel": "x.whl", "shards": [1]}) == f"{path}: field 'shards' is [1], not a list of objects"
    )
    assert _refusal(read_record, path, ["x.whl"]) == f"{path}: not a build record (a JSON object expected)"
    path.write_text("{")
    with pytest.raises(CuwError, match=r"unreadable build record \("):
        read_record(path)
    path.write_text(json.dumps({"format": 1, "wheel": "x.whl", "cell": {"lane": "linux"}, "policy_digest": None}))
    before_inputs = read_record(path)
    assert (before_inputs.format, before_inputs.inputs, before_inputs.nulls) == (1, None, {"policy_digest"})
    assert before_inputs.to_json() == json.loads(path.read_text()), "read and written back, a record is what it was"
