"""The records jobs hand each other through files: shard and link reports, verify reports, build
records, seat-log entries.

Each record has one writer and one reader here, and a schema version. A reader refuses, in one
line naming the file and the field, a record of a newer schema than it knows or a field of the
wrong type; it reads a record without a ``schema`` field (a build record: ``format``) as version 1
(what every forge wrote before the field existed: the same shape). A field a reader does not know is kept aside
(``extra``) and written back: fields are only ever added within a version; a change an older
reader could not ignore is a new version. The JSON keys are the files' own (tests, people and
other tools read them by key). docs/gates.md lists the records and their versions.

Below every layer that reads them: the cost tables (partition) read both reports and seat logs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Union

from cuw.base.shard_spec import spec_numbers
from cuw.base.errors import InputError, OutputError
from cuw.base.reading import read_bytes, read_text

SHARD_REPORT_SCHEMA = 1
LINK_REPORT_SCHEMA = 1
VERIFY_REPORT_SCHEMA = 1
BUILD_RECORD_FORMAT = 2
"""2: the cell's inputs and their digest (cuw/config/inputs.py); a record of 1 has neither."""
SEAT_LOG_SCHEMA = 1
"""Seat-log lines carry no ``schema`` field while they are version 1 (the Python seat and its C
twin write one line per compile: the constant stays out of them); a line that says more is refused."""

Check = tuple[Callable[[Any], bool], str]
"""A field's test and what it must be (the refusal's words)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite number a float holds: JSON's integers have no bound, and 10**400 overflows a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _is_shard(value: Any) -> bool:
    numbers = spec_numbers(value) if isinstance(value, str) else None
    return numbers is not None and 1 <= numbers[0] <= numbers[1]


INT: Check = (_is_int, "an integer")
NUMBER: Check = (is_number, "a finite number")
STRING: Check = (lambda v: isinstance(v, str), "a string")
SECONDS: Check = (lambda v: is_number(v) and v >= 0, "a number of seconds >= 0")
BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
OBJECT: Check = (lambda v: isinstance(v, dict), "an object")
STRINGS: Check = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings")
INTS: Check = (lambda v: isinstance(v, list) and all(_is_int(x) for x in v), "a list of integers")
OBJECTS: Check = (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects")
NUMBERS: Check = (
    lambda v: isinstance(v, dict) and all(isinstance(k, str) and is_number(x) for k, x in v.items()),
    "an object of numbers",
)
TEXTS: Check = (
    lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    "an object of strings",
)


def _shown(value: Any) -> str:
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def check_fields(data: dict[str, Any], where: str, spec: dict[str, Check], what: str = "field") -> None:
    """Every field of ``spec`` that ``data`` holds and that is not null passes its check; the first
    that does not is refused in one line naming ``where`` and the field."""
    for key, (test, must) in spec.items():
        value = data.get(key)
        if value is not None and not test(value):
            raise InputError(f"{where}: {what} {key!r} is {_shown(value)}, not {must}")


def check_schema(data: dict[str, Any], where: str, known: int, what: str, key: str = "schema") -> int:
    """The record's schema version, its field ``key`` (1 when it names none); one newer than ``known`` is refused."""
    schema = data.get(key, 1)
    if not _is_int(schema) or schema < 1:
        raise InputError(f"{where}: field {key!r} is {_shown(schema)}, not a schema version (an integer from 1)")
    if schema > known:
        raise InputError(
            f"{where}: a {what} of {key} {schema}; this forge reads {what}s up to {key} {known}: "
            "read it with the forge that wrote it, or run the job again with this one"
        )
    return schema


_KEPT_ASIDE = ("extra", "nulls")
"""A record's fields that are no JSON key of their own: a later forge's fields, and the unset ones
written as null."""


def _json_of(record: Any) -> dict[str, Any]:
    """A record's JSON object: its fields under their own keys (the unset ones left out, but for its
    ``nulls``), and its ``extra``: what :func:`_parts` reads back as the same record."""
    body = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in _KEPT_ASIDE}
    return {**record.extra, **{k: v for k, v in body.items() if v is not None or k in record.nulls}}


def _parts(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    """A checked JSON object as the arguments of record ``kind``: its fields, the unknown ones
    (``extra``) and the ones that are null (``nulls``)."""
    known = {f.name for f in fields(kind)} - set(_KEPT_ASIDE)
    values = {k: v for k, v in data.items() if k in known and v is not None}
    nulls = frozenset(k for k, v in data.items() if k in known and v is None)
    return {**values, "extra": {k: v for k, v in data.items() if k not in known}, "nulls": nulls}


def _write_json(path: Path, body: dict[str, Any], read_back: Callable[[Any, str], Any], what: str) -> Path:
    """A record's one way to disk: its JSON checked by its reader first (never a file the next job
    would refuse), written beside ``path`` and renamed into place (no reader sees half of it)."""
    from cuw.base.files import place_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot create {path.parent} ({exc.strerror or exc})") from None
    text = json.dumps(body, indent=2, sort_keys=True, default=str) + "\n"
    read_back(json.loads(text), str(path))
    written = place_text(path, text, what)
    try:
        written.chmod(0o644)  # the temp file it was renamed from was made private (0600)
    except OSError:
        pass
    return written


# -- job reports ----------------------------------------------------------------------------------

_REPORT_FIELDS: dict[str, Check] = {
    "gate": STRING,
    "ok": BOOL,
    "reasons": STRINGS,
    "facts": OBJECT,
    "state": (lambda v: v in ("running", "finished"), "running or finished"),
    "cell": OBJECT,
    "build_s": SECONDS,
    "build_log": STRING,
    "resources": OBJECT,
    "started_at": STRING,
    "pid": INT,
    "previous": OBJECT,
}


@dataclass(frozen=True)
class JobReport:
    """What both jobs' reports hold: the gate's verdict and where the job ran."""

    gate: str
    ok: bool
    reasons: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    state: str = "finished"
    """``running`` from the job's start until its verdict replaces it (:func:`cuw.gates.report.begin`)."""
    cell: Optional[dict[str, Any]] = None
    build_s: Optional[float] = None
    build_log: Optional[str] = None
    resources: Optional[dict[str, Any]] = None
    """The job's resource record (:mod:`cuw.jobs.resources`)."""
    started_at: Optional[str] = None
    pid: Optional[int] = None
    previous: Optional[dict[str, Any]] = None
    """A running marker's: the last finished verdict (ok, state, reasons, archive)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this forge does not know (a later forge's, of the same schema): kept, written back."""
    nulls: frozenset[str] = frozenset()
    """Unset fields written as null rather than left out (a shard's ``archive`` before it has one, a
    marker's ``previous`` with none): what the job wrote, and what a read report writes back."""
    schema: int = 1

    SCHEMA: ClassVar[int] = 0
    FIELDS: ClassVar[dict[str, Check]] = {}
    FACTS: ClassVar[dict[str, Check]] = {}
    """The facts a reader uses, checked; the others are the gate's to name."""

    def to_json(self) -> dict[str, Any]:
        """The report's JSON object, what :func:`job_report` reads back as this report."""
        return _json_of(self)


@dataclass(frozen=True)
class ShardReport(JobReport):
    """``cuw-shard-<cell>-<i>of<N>.report.json``, beside the shard's archive."""

    shard: Optional[str] = None
    """``i/N``."""
    archive: Optional[str] = None
    archive_sha256: Optional[str] = None
    """The archive's digest when the shard packed it: the link refuses an archive that is not this one."""
    previous_archive: Optional[str] = None
    counters: Optional[dict[str, Any]] = None
    compile_usage: Optional[dict[str, Any]] = None
    parallel_jobs: Optional[dict[str, Any]] = None
    """The compile jobs it ran (jobs, predicted_peak_mb, why: :func:`cuw.partition.parallel_jobs.choose_jobs`)."""
    part: Optional[int] = None
    """A shard given ``--deadline`` or ``--resume``: which part of its chain this job was (from 1)."""
    left: Optional[list[str]] = None
    """With ``part``: the TUs of its slice no part has compiled yet (its continuation's work)."""
    schema: int = SHARD_REPORT_SCHEMA

    SCHEMA: ClassVar[int] = SHARD_REPORT_SCHEMA
    FIELDS: ClassVar[dict[str, Check]] = {
        **_REPORT_FIELDS,
        "shard": (_is_shard, "a shard 'i/N' with 1 <= i <= N"),
        "archive": STRING,
        "archive_sha256": STRING,
        "previous_archive": STRING,
        "counters": OBJECT,
        "compile_usage": OBJECT,
        "parallel_jobs": OBJECT,
        "part": INT,
        "left": STRINGS,
    }
    FACTS: ClassVar[dict[str, Check]] = {
        "compiled": INT,
        "expected_owned": INT,
        "uncompiled": STRINGS,
        "left": STRINGS,
        "partial": BOOL,
    }


@dataclass(frozen=True)
class LinkReport(JobReport):
    """``link.report.json`` in the cell's artifacts, or ``dist/<wheel>.link.json`` beside a shipped wheel."""

    shard_count: Optional[int] = None
    fingerprint: Optional[dict[str, str]] = None
    wheel: Optional[str] = None
    cache: Optional[dict[str, Any]] = None
    phases: Optional[dict[str, float]] = None
    """Where the link's time went (prepare_s, restore_s, deps_s, build_s, replay_s, replays, finish_s)."""
    builder: Optional[dict[str, Any]] = None
    schema: int = LINK_REPORT_SCHEMA

    SCHEMA: ClassVar[int] = LINK_REPORT_SCHEMA
    FIELDS: ClassVar[dict[str, Check]] = {
        **_REPORT_FIELDS,
        "shard_count": INT,
        "fingerprint": TEXTS,
        "wheel": STRING,
        "cache": OBJECT,
        "phases": NUMBERS,
        "builder": OBJECT,
    }
    FACTS: ClassVar[dict[str, Check]] = {
        "total": INT,
        "hits": INT,
        "misses": INT,
        "uncacheable": INT,
        "cuda_tus": INT,
        "missing_shards": INTS,
    }

    @property
    def missing_shards(self) -> list[int]:
        return list(self.facts.get("missing_shards") or [])


REPORTS: dict[str, type[JobReport]] = {"shard": ShardReport, "link": LinkReport}
Report = Union[ShardReport, LinkReport]


def job_report(data: Any, where: str) -> JobReport:
    """A shard's or a link's report from its JSON object, every field it holds checked."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a job report (a JSON object expected)")
    gate = data.get("gate")
    kind = REPORTS.get(gate) if isinstance(gate, str) else None
    if kind is None:
        raise InputError(f"{where}: field 'gate' is {_shown(data.get('gate'))}, not shard or link: not a job report")
    schema = check_schema(data, where, kind.SCHEMA, f"{data['gate']} report")
    if "ok" not in data:
        raise InputError(f"{where}: a {data['gate']} report without its field 'ok'")
    if not isinstance(data["ok"], bool):
        raise InputError(f"{where}: field 'ok' is {_shown(data['ok'])}, not true or false")
    check_fields(data, where, kind.FIELDS)
    check_fields(data.get("facts") or {}, where, kind.FACTS, "fact")
    return kind(**{**_parts(kind, data), "schema": schema})


def write_report(path: Path, report: JobReport) -> Path:
    """The one writer of job reports (its reader, :func:`job_report`, checks it first)."""
    return _write_json(path, report.to_json(), job_report, "report")


def load_json(path: Path, what: str) -> Any:
    """A JSON file's value; one that cannot be read or parsed is refused in one line."""
    try:
        return json.loads(read_text(path, what, "report"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{path}: unreadable {what} ({getattr(exc, 'strerror', None) or exc})") from None


def read_report(path: Path, gate: Optional[str] = None) -> JobReport:
    """The report at ``path``; with ``gate``, one of that gate only."""
    data = load_json(path, f"{gate or 'job'} report")
    found = data.get("gate") if isinstance(data, dict) else None
    if gate is not None and isinstance(found, str) and found in REPORTS and found != gate:
        raise InputError(f"{path}: a {found} report, not the {gate} report expected here")
    return job_report(data, str(path))


def read_shard_report(path: Path) -> ShardReport:
    report = read_report(path, "shard")
    assert isinstance(report, ShardReport)
    return report


def read_link_report(path: Path) -> LinkReport:
    report = read_report(path, "link")
    assert isinstance(report, LinkReport)
    return report


def gate_of(path: Path) -> Optional[str]:
    """The gate a JSON file's ``gate`` field names, or None when it is no job report (a log, another
    JSON file): how a reader given either tells them apart before it reads one."""
    try:
        data = json.loads(read_text(path, "JSON report", "report"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    gate = data.get("gate") if isinstance(data, dict) else None
    return gate if isinstance(gate, str) and gate in REPORTS else None


# -- verify reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyCheck:
    """One check of the verify gate (:mod:`cuw.wheel.verify`) and what it found."""

    name: str
    ok: bool
    details: list[str] = field(default_factory=list)

    FIELDS: ClassVar[dict[str, Check]] = {"name": STRING, "ok": BOOL, "details": STRINGS}


@dataclass(frozen=True)
class VerifyReport:
    """``<wheel>.verify.json`` beside the wheel: the verify gate's checks of it (``ok``: all passed)."""

    wheel: str
    checks: list[VerifyCheck]
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this forge does not know (a later forge's, of the same schema): kept, written back."""
    schema: int = VERIFY_REPORT_SCHEMA

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        """The report's JSON object (``ok`` written out for the people and tools that read it)."""
        checks = [{"name": c.name, "ok": c.ok, "details": c.details} for c in self.checks]
        return {**self.extra, "wheel": self.wheel, "ok": self.ok, "checks": checks, "schema": self.schema}


def verify_report(data: Any, where: str) -> VerifyReport:
    """A verify report from its JSON object, every field checked; one whose ``ok`` its checks contradict is refused."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a verify report (a JSON object expected)")
    schema = check_schema(data, where, VERIFY_REPORT_SCHEMA, "verify report")
    for key, (test, must) in {"wheel": STRING, "checks": OBJECTS}.items():
        if not test(data.get(key)):
            raise InputError(f"{where}: field {key!r} is {_shown(data.get(key))}, not {must}")
    check_fields(data, where, {"ok": BOOL})
    checks = []
    for n, check in enumerate(data["checks"], 1):
        if not isinstance(check.get("name"), str) or not isinstance(check.get("ok"), bool):
            raise InputError(f"{where}: check {n} is {_shown(check)}, not an object with its name and ok")
        check_fields(check, f"{where}: check {check['name']!r}", VerifyCheck.FIELDS)
        checks.append(VerifyCheck(check["name"], check["ok"], list(check.get("details") or [])))
    extra = _parts(VerifyReport, {k: v for k, v in data.items() if k != "ok"})["extra"]
    report = VerifyReport(data["wheel"], checks, extra, schema)
    if data.get("ok") is not None and data["ok"] != report.ok:
        raise InputError(f"{where}: field 'ok' is {_shown(data['ok'])}, but its checks say {_shown(report.ok)}")
    return report


def write_verify_report(path: Path, report: VerifyReport) -> Path:
    """The one writer of verify reports (its reader, :func:`verify_report`, checks it first)."""
    return _write_json(path, report.to_json(), verify_report, "verify report")


def read_verify_report(path: Path) -> VerifyReport:
    return verify_report(load_json(path, "verify report"), str(path))


# -- build records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRecord:
    """``dist/<wheel>.build.json`` (``files/<wheel>.build.json`` in an index): what the wheel was
    built from and how every job of its cell went (:func:`cuw.wheel.publish.build_record`)."""

    wheel: str
    sha256: Optional[str] = None
    recipe: Optional[str] = None
    cell: Optional[dict[str, Any]] = None
    inputs: Optional[dict[str, Any]] = None
    """What the wheel is a function of (:func:`cuw.config.inputs.cell_inputs`): the plan compares ``inputs_digest``."""
    inputs_digest: Optional[str] = None
    source: Optional[dict[str, Any]] = None
    recipe_digest: Optional[str] = None
    policy_digest: Optional[str] = None
    toolkit: Optional[dict[str, Any]] = None
    cache: Optional[dict[str, Any]] = None
    builder: Optional[dict[str, Any]] = None
    """Where the wheel was linked (image, glibc, compiler) and the floor that follows from it."""
    forge: Optional[dict[str, Any]] = None
    shards: Optional[list[dict[str, Any]]] = None
    link: Optional[dict[str, Any]] = None
    """The link's counters (total, hits, misses, uncacheable, cuda_tus), seconds and shard count."""
    verify: Optional[dict[str, Any]] = None
    """The verify gate's ``ok`` and each check's name and ok."""
    run: Optional[dict[str, Any]] = None
    supersedes: Optional[dict[str, Any]] = None
    """A rebuild's, written by publish: the published build it follows (``wheel``) and which inputs changed."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this forge does not know (a later forge's, of the same format): kept, written back."""
    nulls: frozenset[str] = frozenset()
    """Unset fields written as null (no policy file, a link without a cache record): kept as they are."""
    format: int = BUILD_RECORD_FORMAT

    FIELDS: ClassVar[dict[str, Check]] = {
        "wheel": STRING,
        "sha256": STRING,
        "recipe": STRING,
        "cell": OBJECT,
        "inputs": OBJECT,
        "inputs_digest": STRING,
        "source": OBJECT,
        "recipe_digest": STRING,
        "policy_digest": STRING,
        "toolkit": OBJECT,
        "cache": OBJECT,
        "builder": OBJECT,
        "forge": OBJECT,
        "shards": OBJECTS,
        "link": OBJECT,
        "verify": OBJECT,
        "run": OBJECT,
        "supersedes": OBJECT,
    }

    def to_json(self) -> dict[str, Any]:
        """The record's JSON object, what :func:`build_record` reads back as this record."""
        return _json_of(self)


def build_record(data: Any, where: str) -> BuildRecord:
    """A build record from its JSON object, every field it holds checked (``wheel`` it must hold)."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: not a build record (a JSON object expected)")
    version = check_schema(data, where, BUILD_RECORD_FORMAT, "build record", key="format")
    if not isinstance(data.get("wheel"), str):
        raise InputError(f"{where}: field 'wheel' is {_shown(data.get('wheel'))}, not a string: not a build record")
    check_fields(data, where, BuildRecord.FIELDS)
    return BuildRecord(**{**_parts(BuildRecord, data), "format": version})


def published_record(data: Any, wheel: str, where: str, lenient: bool = False) -> dict[str, Any]:
    """A published wheel's build record, read from an index (a folder's ``files/`` or the URL it is
    served at): checked by :func:`build_record` like every record the forge reads, and refused when it
    is another wheel's. The plan, the audit and publish read an index's records through this one reader.
    ``lenient`` (the audit): a record of the right wheel whose fields do not check is returned as it
    is, for the audit to report as its wheel's finding instead of ending the whole report."""
    if isinstance(data, dict) and data.get("wheel") != wheel:
        raise InputError(f"{where} is not the build record of {wheel}; restore the index")
    try:
        return build_record(data, where).to_json()
    except InputError as exc:
        if lenient and isinstance(data, dict):
            return data
        raise InputError(f"{exc}; a published record is what `cuw record` wrote: restore the index") from None


def write_build_record(path: Path, record: BuildRecord) -> Path:
    """The one writer of build records (its reader, :func:`build_record`, checks it first)."""
    return _write_json(path, record.to_json(), build_record, "build record")


def read_build_record(path: Path) -> BuildRecord:
    return build_record(load_json(path, "build record"), str(path))


# -- seat-log entries -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SeatLogEntry:
    """One decision of the seat (:mod:`cuw.seat.runtime`, ``seat_stub.c``): a JSON line of ``logs/seat.jsonl``."""

    action: str
    """compiled, stubbed, deferred (past the job's deadline: stubbed, left to its continuation), passthrough, probe."""
    key: Optional[str] = None
    """The TU's partition key (compiled, stubbed)."""
    kind: Optional[str] = None
    """``host`` for a host compile; absent for CUDA."""
    owner: Optional[int] = None
    output: Optional[str] = None
    rc: Optional[int] = None
    outcome: Optional[str] = None
    """The cache's word for the compile: hit, miss, uncacheable:<why>, unknown."""
    seconds: Optional[float] = None
    at: Optional[float] = None
    """When the compile ended (epoch s): its bar is [at - seconds, at]."""
    cpu_s: Optional[float] = None
    peak_mb: Optional[float] = None
    pid: Optional[int] = None
    source: Optional[str] = None
    argv: Optional[list[str]] = None

    FIELDS: ClassVar[dict[str, Check]] = {
        "action": STRING,
        "key": STRING,
        "kind": STRING,
        "owner": INT,
        "output": STRING,
        "rc": INT,
        "outcome": STRING,
        "seconds": NUMBER,
        "at": NUMBER,
        "cpu_s": NUMBER,
        "peak_mb": NUMBER,
        "pid": INT,
        "source": STRING,
        "argv": STRINGS,
    }

    @property
    def is_compile(self) -> bool:
        return self.action == "compiled"

    @property
    def tu(self) -> str:
        """The key of a TU's entry (compiled, stubbed, deferred: its reader refuses one without it)."""
        return self.key or ""

    @property
    def is_host(self) -> bool:
        return self.kind == "host"

    @property
    def timed(self) -> bool:
        """A compile that carries its times (a bar on the timeline)."""
        return self.seconds is not None and self.at is not None

    @property
    def measured(self) -> bool:
        """A compile whose CPU seconds and peak memory the seat measured."""
        return self.cpu_s is not None and self.peak_mb is not None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


TU_ACTIONS = ("compiled", "stubbed", "deferred")
"""The entries of a TU of the build: each names it (``key``)."""


def seat_entry(data: dict[str, Any], where: str) -> SeatLogEntry:
    """A seat-log line's JSON object as an entry; a field of the wrong type, or a newer schema, is refused."""
    check_schema(data, where, SEAT_LOG_SCHEMA, "seat log line")
    if "action" not in data:
        raise InputError(f"{where}: a seat log line without its field 'action'")
    check_fields(data, where, SeatLogEntry.FIELDS)
    if data["action"] in TU_ACTIONS and data.get("key") is None:
        raise InputError(f"{where}: a {data['action']} seat log line without its field 'key'")
    return SeatLogEntry(**{k: v for k, v in data.items() if k in SeatLogEntry.FIELDS and v is not None})


def seat_line(line: bytes, where: str) -> Optional[SeatLogEntry]:
    """One line of a seat log as an entry; None for one that is not a JSON object (blank, or cut
    short by a killed job); a whole one that cannot be read is refused."""
    try:
        value = json.loads(line.decode("utf-8")) if line.strip() else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return seat_entry(value, where) if isinstance(value, dict) else None


def seat_entries(path: Path) -> list[SeatLogEntry]:
    """Every whole entry of a seat log (none when it is missing). A line that is not a JSON object
    (cut short by a killed job) is left out; a whole one that cannot be read is refused, by line number."""
    try:
        data = read_bytes(path, "seat log", "log")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"{path}: unreadable seat log ({exc.strerror or exc})") from None
    entries = (seat_line(line, f"{path}:{n}") for n, line in enumerate(data.splitlines(), 1))
    return [e for e in entries if e is not None]
