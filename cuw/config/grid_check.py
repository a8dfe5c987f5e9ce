"""Does the grid keep up? Ask the package indexes which torch releases exist per CUDA line.

``recipes/defaults.yml`` names, per CUDA line, the simple index that publishes
that line's torch wheels (``torch_index``). For each, the torch project page is
read (PEP 691 JSON, or PEP 503 HTML), every wheel file name is parsed, and the
torch minor lines (``2.15``) with their CPython versions are compared with
``grid.torch``. What the grid lacks is listed with the exact YAML to add; the
command exits 1 then, so a scheduled workflow can open the change.
"""

from __future__ import annotations

import html.parser
import json
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any
from dataclasses import dataclass, field

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from cuw.base.errors import CuwError, InputError
from cuw.config.grid import Grid

TIMEOUT_S = 20.0
_JSON = "application/vnd.pypi.simple.v1+json"


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_data(self, data: str) -> None:
        if data.strip().endswith(".whl"):
            self.names.append(data.strip())


def wheel_names(index: str, project: str = "torch") -> list[str]:
    """The wheel file names on ``<index>/<project>/`` (JSON when the index speaks it)."""
    url = f"{index.rstrip('/')}/{project}/"
    request = urllib.request.Request(url, headers={"Accept": f"{_JSON}, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            body = response.read()
            kind = response.headers.get("Content-Type", "")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CuwError(f"torch index {url}: cannot read it ({reason})") from None
    if _JSON in kind or body.lstrip().startswith(b"{"):
        try:
            files = json.loads(body)["files"]
            return [f["filename"] for f in files if str(f.get("filename", "")).endswith(".whl")]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise InputError(f"torch index {url}: not a PEP 691 project page") from None
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    return parser.names


def releases(names: list[str]) -> dict[str, set[str]]:
    """Torch minor line (``2.15``) -> CPython versions (``3.12``) with a wheel, from file names."""
    return {line: pythons for line, (pythons, _) in _releases(names).items()}


def newest(names: list[str]) -> dict[str, str]:
    """Torch minor line -> its newest release on the index (``2.15.0``)."""
    return {line: str(max(versions)) for line, (_, versions) in _releases(names).items()}


def _releases(names: list[str]) -> dict[str, tuple[set[str], set[Version]]]:
    out: dict[str, tuple[set[str], set[Version]]] = defaultdict(lambda: (set(), set()))
    for name in names:
        try:
            _, version, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if version.is_prerelease or version.is_devrelease:
            continue
        line = f"{version.major}.{version.minor}"
        for tag in tags:
            if tag.interpreter.startswith("cp3") and tag.interpreter[3:].isdigit() and not tag.abi.endswith("t"):
                out[line][0].add(f"3.{tag.interpreter[3:]}")
                out[line][1].add(Version(version.public))
    return dict(out)


def lanes_published(names: list[str]) -> dict[str, set[str]]:
    """Torch minor line -> the lanes it has a wheel for (by the platform tags' suffixes)."""
    from cuw.config.lanes import LANES

    out: dict[str, set[str]] = defaultdict(set)
    for name in names:
        try:
            _, version, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        for tag in tags:
            for lane in LANES.values():
                if tag.platform.endswith(lane.wheel_platform) and (lane.os != "linux" or "linux" in tag.platform):
                    out[f"{version.major}.{version.minor}"].add(lane.name)
    return dict(out)


@dataclass
class Finding:
    torch: str
    cuda: str
    pythons: list[str]
    new_line: bool
    """True: the grid has no entry for this torch line at all."""
    hole: str = ""
    """A lane this torch line ships no wheel for on this CUDA line (while the index serves that lane
    for other lines), which the grid's ``holes`` does not list: its cells would fail to install torch."""


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    asked: dict[str, str] = field(default_factory=dict)
    """CUDA line -> index URL asked."""
    seen: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """CUDA line -> torch line -> Pythons the index has (within the grid's Pythons)."""
    newest: dict[str, dict[str, str]] = field(default_factory=dict)
    """CUDA line -> torch line -> newest release on its index."""
    unreachable: dict[str, str] = field(default_factory=dict)
    """CUDA line -> why its index could not be read."""

    @property
    def ok(self) -> bool:
        return not self.findings

    def edit(self, grid: Grid) -> str:
        """The YAML for ``grid.torch`` in recipes/defaults.yml with every finding applied."""
        merged: dict[str, dict[str, Any]] = {
            t: {
                "cuda": set(r.cuda),
                "python": set(r.python),
                "patch": r.patch,
                "holes": {lane: set(lines) for lane, lines in r.holes.items()},
            }
            for t, r in grid.torch.items()
        }
        for f in self.findings:
            entry = merged.setdefault(f.torch, {"cuda": set(), "python": set(), "patch": None, "holes": {}})
            if f.hole:
                entry["holes"].setdefault(f.hole, set()).add(f.cuda)
                continue
            entry["cuda"].add(f.cuda)
            entry["python"].update(f.pythons)
        lines = ["  torch:"]
        for torch in sorted(merged, key=Version):
            cudas = ", ".join(f'"{c}"' for c in sorted(merged[torch]["cuda"], key=Version))
            pythons = ", ".join(f'"{p}"' for p in sorted(merged[torch]["python"], key=Version))
            extra = f', patch: "{merged[torch]["patch"]}"' if merged[torch]["patch"] else ""
            holes = merged[torch]["holes"]
            if holes:
                listed = ", ".join(
                    f"{lane}: [{', '.join(chr(34) + c + chr(34) for c in sorted(v, key=Version))}]"
                    for lane, v in sorted(holes.items())
                )
                extra += f", holes: {{{listed}}}"
            lines.append(f'    "{torch}": {{cuda: [{cudas}], python: [{pythons}]{extra}}}')
        return "\n".join(lines)


def check(grid: Grid, indexes: dict[str, str]) -> CheckResult:
    """Compares ``grid.torch`` with what each CUDA line's index publishes.

    Only torch lines at least as new as the grid's oldest count (older releases are
    history, not gaps), and only Pythons the grid builds."""
    if not indexes:
        raise InputError("recipes/defaults.yml names no torch_index (CUDA line -> simple index URL): nothing to ask")
    oldest = min((Version(t) for t in grid.torch), default=Version("0"))
    result = CheckResult()
    for cuda in grid.cuda:
        if cuda not in indexes:
            continue
        result.asked[cuda] = indexes[cuda]
        try:
            names = wheel_names(indexes[cuda])
        except CuwError as exc:  # one unreachable index must not hide what the others say
            result.unreachable[cuda] = str(exc)
            continue
        published = releases(names)
        served = lanes_published(names)
        any_lane = set().union(*served.values()) if served else set()
        result.newest[cuda] = newest(names)
        result.seen[cuda] = {}
        for torch, pythons in sorted(published.items(), key=lambda kv: Version(kv[0])):
            if Version(torch) < oldest:
                continue
            wanted = sorted((p for p in pythons if p in grid.python), key=Version)
            if not wanted:
                continue
            result.seen[cuda][torch] = wanted
            known = grid.torch.get(torch)
            if known is None:
                result.findings.append(Finding(torch, cuda, wanted, True))
            elif cuda not in known.cuda or set(wanted) - set(known.python):
                missing = wanted if cuda not in known.cuda else sorted(set(wanted) - set(known.python), key=Version)
                result.findings.append(Finding(torch, cuda, missing, False))
            for lane in grid.platforms:
                listed = known is not None and cuda in known.holes.get(lane, [])
                if lane in any_lane and lane not in served.get(torch, set()) and not listed:
                    result.findings.append(Finding(torch, cuda, [], known is None, hole=lane))
    return result


def render(result: CheckResult, grid: Grid) -> str:
    lines = [f"asked {cuda}: {url}" for cuda, url in result.asked.items()]
    lines += [f"could not ask CUDA {cuda}: {why}" for cuda, why in result.unreachable.items()]
    for cuda, lines_seen in result.seen.items():
        listing = "; ".join(f"torch {result.newest[cuda].get(t, t)} (Python {', '.join(p)})" for t, p in lines_seen.items())
        lines.append(f"CUDA {cuda} publishes: {listing or 'nothing the grid builds'}")
    if result.ok:
        lines.append("the grid knows every torch release the indexes it could ask publish")
        return "\n".join(lines)
    for f in result.findings:
        if f.hole:
            lines.append(
                f"HOLE torch {f.torch} ships no {f.hole} wheel for CUDA {f.cuda} (the index serves {f.hole} for "
                f"other torch lines): its {f.hole} cells would find no torch to install"
            )
            continue
        what = "a torch line the grid lacks" if f.new_line else "missing from the grid's entry"
        release = result.newest.get(f.cuda, {}).get(f.torch, f.torch)
        lines.append(f"MISSING torch {release} (line {f.torch}) for CUDA {f.cuda}, Python {', '.join(f.pythons)} ({what})")
    lines += ["", "fix: in recipes/defaults.yml, make grid.torch read:", result.edit(grid)]
    return "\n".join(lines)
