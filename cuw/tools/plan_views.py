"""The planner's result drawn for people: a markdown table and an HTML page with the curve.

Both show, per N, the predicted slowest shard and wall (slowest + link replay)
against the bound max(longest TU, total/N), the recommended N marked, and the
per-family empty-shard columns; the HTML page draws the curve as inline SVG
(no scripts, no network).
"""

from __future__ import annotations

import html as _html

from cuw.partition.rules import OTHER_FAMILY
from cuw.tools.plan_shards import html_shards, markdown_shards
from cuw.tools.planner import Plan


def _families(p: Plan) -> list[str]:
    return [f for f in p.families if set(p.families) != {OTHER_FAMILY}]


def _seconds(value: "float | None") -> str:
    return "" if value is None else f"{value:.1f}"


def markdown(p: Plan) -> str:
    fams = _families(p)
    head = ["N", "TUs/shard", "shards w/o TUs", *[f"shards w/o {f}" for f in fams], "largest dispatch"]
    timed = p.total_s is not None
    if timed:
        head += ["slowest s", "bound s", "link s", "wall s"]
    lines = [
        f"### Plan for {p.recipe}: filter {p.filter}, rule {p.rule}{', per family' if p.per_family else ''}",
        "",
        f"{p.tus} TUs from {p.origin}."
        + (f" Cost table: {p.total_s:.1f} s in all, longest TU {p.longest_s:.1f} s." if timed else ""),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in p.rows:
        n = f"**{r.n}** (recommended)" if r.n == p.recommended else str(r.n)
        cells = [
            n,
            f"{r.tus_min}-{r.tus_max}",
            str(r.shards_without_tus),
            *[str(r.family_empty[f]) for f in fams],
            str(r.largest_dispatch),
        ]
        if timed:
            cells += [_seconds(r.slowest_s), _seconds(r.bound_s), _seconds(r.link_s), _seconds(r.wall_s)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *markdown_shards(p.shards, p.checked_n, p.runner), "", p.disk]
    lines += ["", f"Recommended N={p.recommended}: {p.reason}", "", f"Checks at N={p.checked_n}:", ""]
    for c in p.checks:
        lines.append(f"- {'✅' if c.ok else '❌'} **{c.name}**: {c.detail}" + (f" Fix: {c.fix}" if not c.ok and c.fix else ""))
    return "\n".join(lines) + "\n"


def _curve_svg(p: Plan) -> str:
    rows = [r for r in p.rows if r.slowest_s is not None]
    if not rows:
        return (
            '<p class="nocurve">No cost table: the curve needs seconds per TU (cuw costs &lt;recipe&gt; --from &lt;log&gt;).</p>'
        )
    w, h, left, bottom, top, right = 760, 360, 60, 40, 20, 20
    n_lo, n_hi = rows[0].n, max(rows[-1].n, rows[0].n + 1)
    y_hi = max(max(r.wall_s or 0.0 for r in rows), max(r.bound_s or 0.0 for r in rows)) * 1.08 or 1.0

    def x(n: float) -> float:
        return left + (n - n_lo) / (n_hi - n_lo) * (w - left - right)

    def y(s: float) -> float:
        return h - bottom - s / y_hi * (h - bottom - top)

    def line(values: list[tuple[int, float]], cls: str) -> str:
        pts = " ".join(f"{x(n):.1f},{y(s):.1f}" for n, s in values)
        return f'<polyline class="{cls}" points="{pts}" fill="none"/>'

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="predicted wall against N">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" class="axis"/>',
    ]
    for i in range(5):
        s = y_hi * i / 4
        out.append(f'<text x="{left - 6}" y="{y(s) + 4:.1f}" text-anchor="end" class="tick">{s:.0f}</text>')
    step = max(1, (n_hi - n_lo) // 10)
    for n in range(n_lo, n_hi + 1, step):
        out.append(f'<text x="{x(n):.1f}" y="{h - bottom + 16}" text-anchor="middle" class="tick">{n}</text>')
    out.append(line([(r.n, r.bound_s or 0.0) for r in rows], "bound"))
    out.append(line([(r.n, r.slowest_s or 0.0) for r in rows], "slowest"))
    out.append(line([(r.n, r.wall_s or 0.0) for r in rows], "wall"))
    best = next((r for r in rows if r.n == p.recommended), None)
    if best is not None and best.wall_s is not None:
        out.append(
            f'<circle class="recommended" cx="{x(best.n):.1f}" cy="{y(best.wall_s):.1f}" r="6" data-n="{best.n}">'
            f"<title>recommended N={best.n}: wall {best.wall_s:.1f} s</title></circle>"
        )
    out.append(f'<text x="{(left + w) / 2}" y="{h - 4}" text-anchor="middle" class="tick">N (shards)</text>')
    out.append("</svg>")
    return "".join(out)


def html(p: Plan) -> str:
    esc = _html.escape
    fams = _families(p)
    timed = p.total_s is not None
    head = ["N", "TUs/shard", "shards w/o TUs", *[f"w/o {f}" for f in fams], "largest dispatch"]
    head += ["slowest s", "bound s", "link s", "wall s"] if timed else []
    body = []
    for r in p.rows:
        cells = [
            str(r.n),
            f"{r.tus_min}-{r.tus_max}",
            str(r.shards_without_tus),
            *[str(r.family_empty[f]) for f in fams],
            str(r.largest_dispatch),
        ]
        if timed:
            cells += [_seconds(r.slowest_s), _seconds(r.bound_s), _seconds(r.link_s), _seconds(r.wall_s)]
        cls = ' class="recommended"' if r.n == p.recommended else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    checks = "".join(
        f'<li class="{"ok" if c.ok else "fail"}">{esc(c.name)}: {esc(c.detail)}'
        + (f" <i>fix: {esc(c.fix)}</i>" if not c.ok and c.fix else "")
        + "</li>"
        for c in p.checks
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><title>plan for {esc(p.recipe)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fff; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 8px; border-bottom: 1px solid #e3e6ec; text-align: right; }}
tr.recommended {{ background: #fff4c2; font-weight: bold; }} .axis {{ stroke: #5a6170; }}
.tick {{ font: 11px sans-serif; fill: #5a6170; }}
.bound {{ stroke: #8a8f98; stroke-dasharray: 5 4; stroke-width: 2; }} .slowest {{ stroke: #3b6fd6; stroke-width: 2; }}
.wall {{ stroke: #d6843b; stroke-width: 2; }} .recommended {{ fill: #d63b3b; }}
li.ok::marker {{ content: "✔ "; color: #2e9e5b; }} li.fail::marker {{ content: "✘ "; color: #d63b3b; }}
</style></head><body>
<h1>Plan for {esc(p.recipe)}</h1>
<p>filter {esc(p.filter)}, rule {esc(p.rule)}{", per family" if p.per_family else ""}; {p.tus} TUs from {esc(p.origin)}.</p>
<p class="recommendation">Recommended N={p.recommended}: {esc(p.reason)}</p>
<p><span style="color:#3b6fd6">&#9644; slowest shard</span> &nbsp;
<span style="color:#d6843b">&#9644; wall (slowest + link)</span>
&nbsp; <span style="color:#8a8f98">- - bound max(longest TU, total/N)</span></p>
{_curve_svg(p)}
<table><tr>{"".join(f"<th>{esc(h)}</th>" for h in head)}</tr>{"".join(body)}</table>
{html_shards(p.shards, p.checked_n, p.runner)}
<p class="disk">{esc(p.disk)}</p>
<h2>Checks at N={p.checked_n}</h2><ul>{checks}</ul>
</body></html>
"""
