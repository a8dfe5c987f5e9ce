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
    id(records.STRING): TEXT,
    id(records.BOOL): st.booleans(),
    id(records.OBJECT): st.dictionaries(TEXT, JSON, max_size=3),
    id(records.STRINGS): st.lists(TEXT, max_size=3),
    id(records.INTS): st.lists(st.integers(-(2**40), 2**40), max_size=3),
    id(records.NUMBERS): st.dictionaries(TEXT, NUMBER, max_size=3),
    id(records.TEXTS): st.dictionaries(TEXT, TEXT, max_size=3),
}
SPECIAL = {"state": st.sampled_from(["running", "finished"]), "schema": st.just(1)}


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
