"""The shard timeline: when each job compiled which TU, drawn for people.

Built from the seat logs of a cell's job folders (``<work>/<cell>/shard-3of4``,
``<work>/<cell>/link``): every ``compiled`` entry is a bar from ``at - seconds``
to ``at``, marked by its outcome (a cold compile, a cache hit, a failed
compile). TUs a shard owned but never compiled come from its gate report and
are listed, since they have no time. Two renderings of one :class:`Timeline`:

* :func:`mermaid` -- a gantt chart for the GitHub step summary (GitHub renders
  mermaid blocks);
* :func:`html` -- one self-contained HTML file with inline SVG, no scripts and
  no network, which ``cuw report`` writes and ``build``/``link`` name.
"""

from __future__ import annotations

import html as _html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from cuw.base.errors import CuwError, InputError
from cuw.base.records import JobReport, SeatLogEntry, ShardReport, gate_of, read_report
from cuw.gates.conditions import size
from cuw.seat import seat_log

_JOB = re.compile(r"^shard-(\d+)of(\d+)$")
OUTCOME_COLORS = {"cold": "#3b6fd6", "hit": "#2e9e5b", "failed": "#d63b3b", "other": "#8a8f98"}


@dataclass(frozen=True)
class Bar:
    job: str
    key: str
    start: float
    """Seconds from the first compile of the cell."""
    end: float
    outcome: str
    """cold (compiled, a cache miss), hit, failed, or other (the tool did not say)."""


@dataclass
class Job:
    name: str
    """``shard 3/4`` or ``link``."""
    verdict: str = ""
    ok: Optional[bool] = None
    stubbed: int = 0
    uncompiled: list[str] = field(default_factory=list)
    resources: Optional[dict] = None
    """The report's resource record (:mod:`cuw.jobs.resources`): drawn as memory over time."""


@dataclass
class Timeline:
    cell: str
    jobs: list[Job]
    bars: list[Bar]

    @property
    def span(self) -> float:
        return max((b.end for b in self.bars), default=0.0)

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


def _outcome(entry: SeatLogEntry) -> str:
    if entry.rc not in (0, None):
        return "failed"
    outcome = entry.outcome or ""
    if outcome == "hit":
        return "hit"
    if outcome == "miss" or outcome.startswith("uncacheable"):
        return "cold"
    return "other"


def _job_name(folder: Path) -> Optional[str]:
    match = _JOB.match(folder.name)
    if match:
        return f"shard {int(match.group(1))}/{int(match.group(2))}"
    return "link" if folder.name == "link" else None


def _order(name: str) -> tuple[int, int]:
    if name == "link":
        return (1, 0)
    return (0, int(name.split()[1].split("/")[0]))


def _reports(folders: Iterable[Path]) -> dict[str, JobReport]:
    """Gate reports by job name, from the cell's artifacts folder and ``dist``."""
    out: dict[str, JobReport] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            if gate_of(path) is None:
                continue  # a verify report, a build record: not a job's
            report = read_report(path)
            shard = report.shard if isinstance(report, ShardReport) else None
            out[f"shard {shard}" if shard else "link"] = report
    return out


def _archived(folders: Iterable[Path]) -> dict[str, list[SeatLogEntry]]:
    """The compiles of every shard archive in the folders, from its manifest's timeline."""
    from cuw.jobs.archive import SUFFIX, read_manifest

    out: dict[str, list[SeatLogEntry]] = {}
    for folder in folders:
        for path in sorted(folder.glob(f"cuw-shard-*{SUFFIX}")) if folder.is_dir() else []:
            try:
                manifest = read_manifest(path)
            except CuwError:
                continue
            entries = [e for e in map(seat_log.timeline_entry, manifest.timeline) if e is not None]
            out[f"shard {manifest.shard_index}/{manifest.shard_count}"] = entries
    return out


def load(cell_dir: Path, report_dirs: Iterable[Path] = ()) -> Timeline:
    """The timeline of the cell whose job folders are under ``cell_dir``."""
    if not cell_dir.is_dir():
        raise InputError(f"{cell_dir}: not a folder (give a cell's work folder, e.g. .cuw/work/<cell id>)")
    raw: list[tuple[str, SeatLogEntry]] = []
    jobs: dict[str, Job] = {}
    for folder in sorted(p for p in cell_dir.iterdir() if p.is_dir()):
        name = _job_name(folder)
        if name is None:
            continue
        job = jobs.setdefault(name, Job(name))
        for entry in seat_log.read_entries(folder / "logs" / "seat.jsonl"):
            if entry.action == "stubbed":
                job.stubbed += 1
            elif entry.is_compile and entry.at is not None:
                raw.append((name, entry))
    report_dirs = list(report_dirs)
    for name, entries in _archived(report_dirs).items():  # a link job elsewhere: shards from their manifests
        if name not in jobs:
            jobs[name] = Job(name)
            raw.extend((name, e) for e in entries)
    if not jobs:
        raise InputError(f"{cell_dir}: no job folders (shard-IofN, link) in it: build the cell first")
    for name, report in _reports(report_dirs).items():
        job = jobs.setdefault(name, Job(name))
        job.ok = report.ok
        job.verdict = f"{report.gate} gate {'PASS' if job.ok else 'FAIL'}: " + "; ".join(report.reasons)
        job.uncompiled = list(report.facts.get("uncompiled") or [])  # checked by the reader: strings
        job.resources = report.resources
    bars = [_bar(name, e) for name, e in raw]
    origin = min((b.start for b in bars), default=0.0)
    bars = [Bar(b.job, b.key, round(b.start - origin, 3), round(b.end - origin, 3), b.outcome) for b in bars]
    ordered = sorted(jobs.values(), key=lambda j: _order(j.name))
    return Timeline(cell_dir.name, ordered, sorted(bars, key=lambda b: (_order(b.job), b.start, b.key)))


def _bar(job: str, entry: SeatLogEntry) -> Bar:
    """A compile as its bar in seconds since the epoch (:func:`load` moves them to the first compile)."""
    at = float(entry.at or 0.0)
    return Bar(job, str(entry.key), at - float(entry.seconds or 0.0), at, _outcome(entry))


def _mermaid_text(text: str) -> str:
    return re.sub(r"[:;#,]", "_", text)


def mermaid(timeline: Timeline) -> str:
    """A mermaid gantt chart: a section per job, a task per TU (misses ``crit``, hits ``done``)."""
    lines = ["```mermaid", "gantt", f"    title {_mermaid_text(timeline.cell)}", "    dateFormat X", "    axisFormat %M:%S"]
    for job in timeline.jobs:
        bars = [b for b in timeline.bars if b.job == job.name]
        if not bars and not job.uncompiled:
            continue
        lines.append(f"    section {_mermaid_text(job.name)}")
        for b in bars:
            tag = {"hit": "done, ", "failed": "crit, ", "cold": "active, "}.get(b.outcome, "")
            lines.append(f"    {_mermaid_text(b.key)} :{tag}{int(b.start)}, {max(int(b.end), int(b.start) + 1)}")
        for key in job.uncompiled:
            lines.append(f"    NOT COMPILED {_mermaid_text(key)} :crit, milestone, {int(timeline.span)}, 0s")
    lines.append("```")
    return "\n".join(lines)


# The compile chart's geometry: the label column, the chart, a job's row, the tick labels above.
_LABEL_W, _CHART_W, _ROW_H, _TOP = 150, 860, 26, 30
_STYLE = """<style>
body { font: 14px system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fff; }
.verdict.pass b { color: #2e9e5b; } .verdict.fail b { color: #d63b3b; }
.lane { fill: #f1f3f7; } .label { font: 13px monospace; } .tick { stroke: #d6dae2; }
.ticklabel { font: 11px sans-serif; fill: #5a6170; text-anchor: middle; } .uncompiled { fill: #d63b3b; font: 12px sans-serif; }
.memnote { font: 11px sans-serif; fill: #5a6170; }
.key { margin-right: 16px; } .swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
</style>"""


def html(timeline: Timeline) -> str:
    """One self-contained page: the verdicts, then an SVG row per job with a bar per TU."""
    esc = _html.escape
    span = max(timeline.span, 1.0)
    scale = _CHART_W / span
    rows = [_job_row(timeline, job, _TOP + i * _ROW_H, scale) for i, job in enumerate(timeline.jobs)]
    height = _TOP + len(timeline.jobs) * _ROW_H + 30
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><title>{esc(timeline.cell)}: shard timeline</title>
{_STYLE}</head>
<body>
<h1>{esc(timeline.cell)}</h1>
<ul class="verdicts">{_verdicts(timeline.jobs)}</ul>
<p class="legend">{_legend()}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + _CHART_W + 10}" height="{height}" role="img"
     aria-label="compile timeline per job">
{_ticks(span, scale, height)}
{"".join(rows)}
</svg>
<p>{len(timeline.bars)} compiles over {_clock(timeline.span)} (m:ss) in {len(timeline.jobs)} jobs.</p>
{memory_svg(timeline)}
</body></html>
"""


def _job_row(timeline: Timeline, job: Job, y: int, scale: float) -> str:
    """A job's row: its name, its lane, a bar per compile, and how many owned TUs it never compiled."""
    esc = _html.escape
    state = "pass" if job.ok else ("fail" if job.ok is False else "unknown")
    parts = [
        f'<g class="job {state}" data-job="{esc(job.name)}">',
        f'<text x="4" y="{y + 17}" class="label">{esc(job.name)}</text>',
        f'<rect x="{_LABEL_W}" y="{y + 2}" width="{_CHART_W}" height="{_ROW_H - 4}" class="lane"/>',
    ]
    for b in (b for b in timeline.bars if b.job == job.name):
        x = _LABEL_W + b.start * scale
        width = max((b.end - b.start) * scale, 1.5)
        parts.append(
            f'<rect class="bar {b.outcome}" x="{x:.1f}" y="{y + 4}" width="{width:.1f}" height="{_ROW_H - 8}" '
            f'fill="{OUTCOME_COLORS[b.outcome]}" data-key="{esc(b.key)}">'
            f"<title>{esc(b.key)}: {b.outcome}, {b.end - b.start:.1f} s</title></rect>"
        )
    if job.uncompiled:
        parts.append(
            f'<text x="{_LABEL_W + _CHART_W - 4}" y="{y + 17}" text-anchor="end" class="uncompiled">'
            f"{len(job.uncompiled)} owned TU(s) not compiled</text>"
        )
    parts.append("</g>")
    return "".join(parts)


def _ticks(span: float, scale: float, height: int) -> str:
    ticks = []
    step = _tick_step(span)
    t = 0.0
    while t <= span:
        x = _LABEL_W + t * scale
        ticks.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{height - 26}" class="tick"/>'
            f'<text x="{x:.1f}" y="{_TOP - 8}" class="ticklabel">{_clock(t)}</text>'
        )
        t += step
    return "".join(ticks)


def _legend() -> str:
    return " ".join(
        f'<span class="key"><span class="swatch" style="background:{c}"></span>{name}</span>'
        for name, c in (
            ("cold compile (miss)", OUTCOME_COLORS["cold"]),
            ("cache hit", OUTCOME_COLORS["hit"]),
            ("failed compile", OUTCOME_COLORS["failed"]),
            ("outcome unknown", OUTCOME_COLORS["other"]),
        )
    )


def _verdicts(jobs: list[Job]) -> str:
    esc = _html.escape
    return "".join(
        f'<li class="verdict {"pass" if j.ok else "fail" if j.ok is False else "unknown"}">'
        f"<b>{esc(j.name)}</b>: {esc(j.verdict or 'no gate report found')}"
        f"{' (' + str(j.stubbed) + ' TUs stubbed)' if j.stubbed else ''}"
        + (f"<br/>not compiled: {esc(', '.join(j.uncompiled[:20]))}" if j.uncompiled else "")
        + "</li>"
        for j in jobs
    )


def _tick_step(span: float) -> float:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if span / step <= 12:
            return float(step)
    return 7200.0


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


# -- memory over time, per job ------------------------------------------------------------


def _points(samples: list) -> list[tuple[float, float, float]]:
    """(epoch seconds, memory used MB, memory total MB) of the well-formed samples."""
    out = []
    for s in samples:
        if isinstance(s, dict) and all(isinstance(s.get(k), (int, float)) for k in ("at", "mem_used_mb", "mem_total_mb")):
            out.append((float(s["at"]), float(s["mem_used_mb"]), float(s["mem_total_mb"])))
    return out


def _resource_note(res: dict) -> str:
    """The numbers beside a job's memory line: the peak, the least left, the disk, the largest process."""
    top = res.get("largest") if isinstance(res.get("largest"), list) else []
    biggest = f", largest {top[0].get('name')} {size(top[0].get('rss_mb'))}" if top and isinstance(top[0], dict) else ""
    return (
        f"peak {size(res.get('peak_mem_used_mb'))} of {size(res.get('mem_total_mb'))}, "
        f"min {size(res.get('min_mem_available_mb'))} available, swap {size(res.get('max_swap_used_mb'))}, "
        f"disk {size(res.get('disk_free_start_mb'))} free at start, min {size(res.get('min_disk_free_mb'))}{biggest}"
    )


def memory_svg(timeline: Timeline) -> str:
    """A row per job with samples: memory used over the job's life (wall clock, all jobs on one
    axis from the first sample of the cell), against the machine's total (the row's top)."""
    esc = _html.escape
    sampled = [(j, _points(j.resources.get("samples") or [])) for j in timeline.jobs if j.resources]
    sampled = [(j, pts) for j, pts in sampled if pts]
    if not sampled:
        return (
            '<p class="resources none">no resource samples in the reports (jobs from before the forge sampled, or not Linux)</p>'
        )
    label_w, chart_w, row_h, top = 150, 860, 56, 30
    origin = min(p[0] for _, pts in sampled for p in pts)
    span = max(max(p[0] for _, pts in sampled for p in pts) - origin, 1.0)
    rows = []
    for i, (job, pts) in enumerate(sampled):
        y = top + i * row_h
        total = max(max(p[2] for p in pts), 1.0)
        line = " ".join(
            f"{label_w + (t - origin) * chart_w / span:.1f},{y + row_h - 6 - used / total * (row_h - 12):.1f}"
            for t, used, _ in pts
        )
        peak = max(pts, key=lambda p: p[1])
        px, py = label_w + (peak[0] - origin) * chart_w / span, y + row_h - 6 - peak[1] / total * (row_h - 12)
        note = _resource_note(job.resources or {})
        rows.append(
            f'<g class="resources" data-job="{esc(job.name)}" data-samples="{len(pts)}">'
            f'<text x="4" y="{y + 20}" class="label">{esc(job.name)}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{chart_w}" height="{row_h - 8}" class="lane"/>'
            f'<polyline class="mem" points="{line}" fill="none" stroke="#7a3bd6" stroke-width="2"/>'
            f'<circle class="peak" cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#d63b3b"><title>peak {size(peak[1])}</title></circle>'
            f'<text x="{label_w + chart_w - 4}" y="{y + 16}" text-anchor="end" class="memnote">{esc(note)}</text>'
            f"</g>"
        )
    height = top + len(sampled) * row_h + 8
    ticks, step, t = [], _tick_step(span), 0.0
    while t <= span:
        x = label_w + t * chart_w / span
        ticks.append(f'<text x="{x:.1f}" y="{top - 8}" class="ticklabel">{_clock(t)}</text>')
        t += step
    return (
        '<h2>Memory used per job</h2>\n<p class="legend">the line is memory in use (total minus available) '
        "against the machine's total, the row's height; the red dot is the peak; the time axis is the jobs' "
        "wall clock from the first sample of the cell</p>\n"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + chart_w + 10}" height="{height}" role="img" '
        f'aria-label="memory used over time per job" class="memory">{"".join(ticks)}{"".join(rows)}</svg>'
    )
