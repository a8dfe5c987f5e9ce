"""``cuw audit``: what the published index holds, checked against the grid and the policy.

Verify runs at build time; the audit looks after publication, where nobody else looks:

* **gaps**: cells of the grid with no published wheel (a lane held back as unverified is named as
  such, not as a gap);
* **stale**: published wheels whose build record names other inputs than today's
  (:mod:`cuw.config.inputs`; the same comparison ``cuw matrix --published`` makes, so its findings
  are what ``--rebuild stale`` rebuilds);
* **yanked**: published wheels marked yanked (:mod:`cuw.wheel.yank`): their bytes are checked as
  every wheel's (a yanked wheel stays published), then reported as yanked with the reason, which
  is no failure: installers skip them unless pinned;
* **wheels**: every published file first against the sha256 the index's marker and the wheel's
  build record publish (hashed while it is read: the index folder's file, or streamed from its URL,
  the index's ``files/`` or a release asset, into a temporary file, never held in memory); a wheel
  that is missing (no file, 404), unreadable, larger or smaller than the marker lists, or of other
  bytes is a finding and is not checked further; then the published bytes through verify's own
  checks, without importing them: its name against its cell, RECORD, METADATA, size against the
  lane's limit, and its device code against the policy's arch list today (cuobjdump).

The wheels' reads share one deadline (``deadline_s``): a wheel not read by then is a finding
("not checked"), and the report keeps everything found before it.
Exit 0: nothing found; 1: findings; 2: the index (its marker and records) could not be read.
"""

from __future__ import annotations

import hashlib
import html
import http.client
import tempfile
import time
import urllib.error
import urllib.request
from urllib.parse import quote
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from cuw.base.errors import CuwError
from cuw.base.reading import open_file, read_bytes
from cuw.ci.matrix import UNVERIFIED_LANES
from cuw.ci.published import Published, cell_status, locate, read_index, record_cell, record_cell_of
from cuw.config.grid import cell_archs, cells
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe
from cuw.toolchain.toolkit import Toolkit
from cuw.wheel.index import yanked_in
from cuw.wheel.verify import verify

Say = Callable[[str], None]


@dataclass(frozen=True)
class Finding:
    kind: str  # gap | stale | wheel | yanked (reported, no failure)
    subject: str  # a cell id or a wheel name
    detail: str


READ_TIMEOUT_S = 120.0  # the longest wait for the next bytes of a wheel
DEADLINE_S = 3600.0  # the longest all the wheels' reads of one audit may take together
BLOCK = 1 << 20


@dataclass(frozen=True)
class _Read:
    """A published wheel as read: its local path (the index folder's file, or the download) and
    its sha256, or why it could not be read as listed (a finding)."""

    path: Optional[Path] = None
    sha256: str = ""
    problem: str = ""


def _read_file(path: Path) -> _Read:
    digest = hashlib.sha256()
    try:
        with open_file(path, "published wheel") as fh:  # a FIFO or a device there is a finding, not a hang
            while block := fh.read(BLOCK):
                digest.update(block)
    except FileNotFoundError:
        return _Read(problem=f"missing: {path} is not there (the marker lists it)")
    except OSError as exc:
        return _Read(problem=f"unreadable: {path} ({exc.strerror or exc})")
    except CuwError as exc:
        return _Read(problem=f"unreadable: {exc}")
    return _Read(path, digest.hexdigest())


def _download(url: str, target: Path, listed: Optional[int], limit: int, deadline: float, deadline_s: float) -> _Read:
    """``url`` streamed into ``target`` and hashed on the way: at most ``listed`` bytes (the size the
    marker lists for a release asset) or ``limit``, before ``deadline`` (``time.monotonic``)."""
    left = deadline - time.monotonic()
    late = f"not checked: the audit's deadline ({deadline_s:g} s for every wheel's read) passed"
    if left <= 0:
        return _Read(problem=f"{late} before {url} was read")
    most = listed if listed is not None else limit
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=min(READ_TIMEOUT_S, left)) as response, open(target, "wb") as out:
            length = response.headers.get("Content-Length")
            if listed is not None and length is not None and length.isdigit() and int(length) > listed:
                return _Read(problem=f"larger than listed: {url} serves {length} bytes, the marker lists {listed}")
            while block := response.read1(BLOCK):
                size += len(block)
                if size > most:
                    said = f"the marker lists {listed}" if listed is not None else f"the largest wheel a lane allows is {limit}"
                    return _Read(problem=f"larger than listed: {url} serves over {most} bytes, {said}")
                if time.monotonic() > deadline:
                    return _Read(problem=f"{late} while {url} was read ({size} bytes in)")
                digest.update(block)
                out.write(block)
    except urllib.error.HTTPError as exc:
        gone = exc.code in (404, 410)
        return _Read(problem=f"{'missing' if gone else 'unreadable'}: {url} answers HTTP {exc.code} {exc.reason}")
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError, a timeout, a reset: all OSError
        if time.monotonic() >= deadline:  # the last wait was cut to what was left of the deadline
            return _Read(problem=f"{late} while {url} was read ({size} bytes in)")
        return _Read(problem=f"unreadable: {url} ({getattr(exc, 'reason', None) or exc or type(exc).__name__})")
    if listed is not None and size != listed:
        return _Read(problem=f"truncated: {url} served {size} bytes, the marker lists {listed}")
    return _Read(target, digest.hexdigest())


def _limit(policy: Policy) -> int:
    """The most bytes a wheel without a listed size may take: the largest wheel the lanes allow
    (verify then says whether it is over its own lane's)."""
    return (max(policy.wheel.max_size_mb.values(), default=4096) + 1) << 20


def _published_bytes(
    published: Published, name: str, record: dict[str, Any], tmp: Path, policy: Policy, deadline: float, deadline_s: float
) -> _Read:
    """The wheel ``name`` read (from the folder or streamed from its URL) and compared with the
    sha256 its marker and its build record publish: the read, or the finding."""
    where = published.wheels.get(name, "")
    if where.startswith(("http://", "https://")):
        got = _download(where, tmp / name, published.sizes.get(name), _limit(policy), deadline, deadline_s)
    else:
        got = _read_file(Path(where))
    if got.problem:
        return got
    listed, recorded = published.digests.get(name), record.get("sha256")
    if listed is not None and recorded is not None and listed != recorded:
        return _Read(problem=f"the marker lists sha256 {listed}, its build record {recorded}; restore the index")
    expected = listed or recorded
    if not isinstance(expected, str) or not expected:
        return _Read(problem="neither the marker nor its build record names a sha256; restore the index")
    if got.sha256 != expected:
        return _Read(
            problem=f"other bytes: {where} has sha256 {got.sha256}, the marker and its build record publish {expected} "
            "(a published wheel is never replaced: restore its file)"
        )
    return got


def audit(
    location: str,
    recipes: list[Recipe],
    policy: Policy,
    toolkit: Toolkit,
    images: dict[str, str],
    say: Say = lambda _: None,
    deadline_s: float = DEADLINE_S,
) -> list[Finding]:
    """Every finding about the index at ``location`` for ``recipes`` (folder or URL); the wheels'
    reads end ``deadline_s`` seconds after they start."""
    published = read_index(location, "--index", lost_ok=True)  # a lost wheel file is a finding
    yanked = yanked_in(locate(location, "--index"), "--index")
    records = published.records
    by_key = {r.key: r for r in recipes}
    planned = [(r, c, images.get(c.lane, "")) for r in recipes for c in cells(r, policy.grid)]
    status = cell_status(planned, policy, records)
    missing = sorted((c.id, c.lane) for _, c, _ in planned if c.id in status.missing)
    held = [cell_id for cell_id, lane in missing if lane in UNVERIFIED_LANES]
    if held:  # not a gap: the farm does not build there until a run has verified the lane
        say(
            f"audit: {len(held)} cell(s) of unverified lanes not built, as planned: {', '.join(held[:3])}"
            + (", ..." if len(held) > 3 else "")
        )
    findings = [Finding("gap", cell_id, "no published wheel") for cell_id, lane in missing if lane not in UNVERIFIED_LANES]
    findings += [Finding("stale", cell_id, why) for cell_id, why in sorted(status.stale.items())]
    deadline = time.monotonic() + deadline_s
    with tempfile.TemporaryDirectory(prefix="cuw-audit-") as tmp:
        for record in records:
            name, cell, key = str(record.get("wheel")), record_cell_of(record), record.get("recipe")
            recipe = by_key.get(key) if isinstance(key, str) else None
            if recipe is None and recipes and isinstance(key, str):
                continue  # a recipe not audited here
            say(f"audit: checking {name}")
            got = _published_bytes(published, name, record, Path(tmp), policy, deadline, deadline_s)
            try:
                if name in yanked and got.path is not None:  # its bytes stand: withdrawn, not checked further
                    findings.append(Finding("yanked", name, f"yanked: {yanked[name]} (its file stays; installable by an == pin)"))
                else:
                    findings += _wheel_findings(got, name, record, recipe, cell, policy, toolkit)
            finally:
                if got.path is not None and got.path.parent == Path(tmp):
                    got.path.unlink()
                for left in Path(tmp).iterdir():  # a download cut short
                    left.unlink()
    return findings + gpu_report_findings(location)


def gpu_report_findings(location: str) -> list[Finding]:
    """Every GPU report the marker lists beside a wheel (``cuw gpu --into-index``), hashed against
    the sha256 the marker lists: a missing, unreadable or changed one is a finding about its wheel."""
    from cuw.base import http
    from cuw.ci.published import locate
    from cuw.wheel.index import MARKER, marker_gpu_reports, marker_lists, read_gpu_reports

    where = locate(location, "--index")
    if isinstance(where, Path):
        listed = read_gpu_reports(where)
    else:
        data, said = http.fetch_json(f"{where}/{MARKER}", "--index"), f"--index: {where}/{MARKER}"
        listed = marker_gpu_reports(data, marker_lists(data, said)[0], said)
    findings = []
    for wheel, reports in sorted(listed.items()):
        for name, sha in sorted(reports.items()):
            try:
                if isinstance(where, Path):
                    body = read_bytes(where / "files" / name, "GPU report", "report")
                else:
                    body = http.fetch(f"{where}/files/{quote(name)}", "--index")
            except (OSError, CuwError) as exc:
                findings.append(Finding("wheel", wheel, f"gpu report {name}: missing or unreadable ({exc})"))
                continue
            got = hashlib.sha256(body).hexdigest()
            if got != sha:
                findings.append(
                    Finding("wheel", wheel, f"gpu report {name}: other bytes (sha256 {got}, the marker lists {sha}); restore it")
                )
    return findings


def _wheel_findings(
    got: _Read, name: str, record: dict[str, Any], recipe: Optional[Recipe], cell: Any, policy: Policy, toolkit: Toolkit
) -> list[Finding]:
    """The findings about one published wheel: its bytes, its cell, then verify's checks of the bytes."""
    if got.path is None:
        return [Finding("wheel", name, got.problem)]
    if recipe is None or cell is None or record_cell(record) is None:
        return [Finding("wheel", name, "its build record names no cell of a known recipe")]
    try:
        archs = cell_archs(recipe, policy.archs, cell)
    except CuwError as exc:  # a CUDA line the policy has dropped since: the wheel stays published
        return [Finding("wheel", name, f"not checked: its cell is outside today's policy ({exc})")]
    checked = verify(got.path, recipe, cell, toolkit, policy.wheel, archs, import_check=False)
    return [Finding("wheel", name, f"{c.name}: {'; '.join(c.details)}") for c in checked.checks if not c.ok]


def failing(findings: list[Finding]) -> bool:
    """Whether the audit fails (exit 1): any finding but a yanked wheel's report."""
    return any(f.kind != "yanked" for f in findings)


def markdown(location: str, findings: list[Finding]) -> str:
    counts = {kind: sum(f.kind == kind for f in findings) for kind in ("gap", "stale", "wheel", "yanked")}
    head = f"### audit of {location}: {counts['gap']} gap(s), {counts['stale']} stale, {counts['wheel']} wheel finding(s)"
    head += f", {counts['yanked']} yanked" if counts["yanked"] else ""
    if not findings:
        return head + "\n\nNothing found.\n"
    rows = ["| kind | what | detail |", "|---|---|---|"]
    rows += [f"| {f.kind} | {f.subject} | {f.detail.replace('|', '/')} |" for f in findings]
    return head + "\n\n" + "\n".join(rows) + "\n"


def to_html(location: str, findings: list[Finding]) -> str:
    rows = "".join(
        f"<tr class='{f.kind}'><td>{f.kind}</td><td>{html.escape(f.subject)}</td><td>{html.escape(f.detail)}</td></tr>"
        for f in findings
    )
    body = f"<table><tr><th>kind</th><th>what</th><th>detail</th></tr>{rows}</table>" if findings else "<p>Nothing found.</p>"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>audit of {html.escape(location)}</title></head>"
        f"<body><h1>audit of {html.escape(location)}</h1><p id='counts'>{len(findings)} finding(s)</p>{body}</body></html>\n"
    )
