"""``cuw audit``: what the published index holds, checked against the grid and the policy.

Verify runs at build time; the audit looks after publication, where nobody else looks:

* **gaps**: cells of the grid with no published wheel (a lane held back as unverified is named as
  such, not as a gap);
* **stale**: published wheels whose build record names other inputs than today's
  (:mod:`cuw.config.inputs`; the same comparison ``cuw matrix --published`` makes, so its findings
  are what ``--rebuild stale`` rebuilds);
* **wheels**: every published wheel through verify's own checks, without importing it: its name
  against its cell, RECORD, METADATA, size against the lane's limit, and its device code against
  the policy's arch list today (cuobjdump).

A remote index's wheels are downloaded whole into a temporary folder (verify reads every member).
Exit 0: nothing found; 1: findings; 2: the index could not be read.
"""

from __future__ import annotations

import html
import http.client
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuw.base.errors import CuwError
from cuw.ci.matrix import UNVERIFIED_LANES
from cuw.ci.published import cell_status, read_index, record_cell, record_cell_of
from cuw.config.grid import cell_archs, cells
from cuw.config.policy import Policy
from cuw.config.recipe import Recipe
from cuw.toolchain.toolkit import Toolkit
from cuw.wheel.verify import verify

Say = Callable[[str], None]


@dataclass(frozen=True)
class Finding:
    kind: str  # gap | stale | wheel
    subject: str  # a cell id or a wheel name
    detail: str


DOWNLOAD_TIMEOUT_S = 120.0  # the longest wait for the next bytes of a wheel


def _wheel_file(where: str, name: str, into: Path, limit: int) -> Path:
    """The published wheel ``name``: its path in the index folder, or downloaded from its URL (the
    index's ``files/`` or a release asset), at most ``limit`` bytes."""
    if not where.startswith(("http://", "https://")):
        return Path(where)
    target = into / name
    try:
        with urllib.request.urlopen(where, timeout=DOWNLOAD_TIMEOUT_S) as response, open(target, "wb") as out:
            size = 0
            while block := response.read1(1 << 20):
                size += len(block)
                if size > limit:
                    raise ValueError(f"over {limit} bytes, more than the index lists or a lane allows")
                out.write(block)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise CuwError(
            f"audit: cannot read {where} ({getattr(exc, 'reason', None) or exc}); an index that cannot be read is an error"
        ) from None
    return target


def _limit(name: str, policy: Policy, sizes: dict[str, int]) -> int:
    """The most bytes a wheel's download may take: the size the marker lists for a release asset,
    else the largest wheel the lanes allow (verify then says whether it is over its own lane's)."""
    return sizes[name] if name in sizes else (max(policy.wheel.max_size_mb.values(), default=4096) + 1) << 20


def audit(
    location: str, recipes: list[Recipe], policy: Policy, toolkit: Toolkit, images: dict[str, str], say: Say = lambda _: None
) -> list[Finding]:
    """Every finding about the index at ``location`` for ``recipes`` (folder or URL)."""
    published = read_index(location, "--index")
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
    with tempfile.TemporaryDirectory(prefix="cuw-audit-") as tmp:
        for record in records:
            name, cell, key = str(record.get("wheel")), record_cell_of(record), record.get("recipe")
            recipe = by_key.get(key) if isinstance(key, str) else None
            if recipe is None or cell is None or record_cell(record) is None:
                if recipe is not None or not recipes or not isinstance(key, str):  # else: a recipe not audited here
                    findings.append(Finding("wheel", name, "its build record names no cell of a known recipe"))
                continue
            try:
                archs = cell_archs(recipe, policy.archs, cell)
            except CuwError as exc:  # a CUDA line the policy has dropped since: the wheel stays published
                findings.append(Finding("wheel", name, f"not checked: its cell is outside today's policy ({exc})"))
                continue
            say(f"audit: checking {name}")
            wheel = _wheel_file(published.wheels[name], name, Path(tmp), _limit(name, policy, published.sizes))
            checked = verify(wheel, recipe, cell, toolkit, policy.wheel, archs, import_check=False)
            findings += [Finding("wheel", name, f"{c.name}: {'; '.join(c.details)}") for c in checked.checks if not c.ok]
            if wheel.parent == Path(tmp):
                wheel.unlink()
    return findings


def markdown(location: str, findings: list[Finding]) -> str:
    counts = {kind: sum(f.kind == kind for f in findings) for kind in ("gap", "stale", "wheel")}
    head = f"### audit of {location}: {counts['gap']} gap(s), {counts['stale']} stale, {counts['wheel']} wheel finding(s)"
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
