"""The self-contained HTML report: one file, inline CSS and SVG figures, no remote resources, so it
opens offline and can be mailed around. A few lines of inline script mark each section with the
size its figure rendered at (data-rendered), which the headless-browser test reads back."""

from __future__ import annotations

import html
from datetime import datetime, timezone

from oslens.analysis import units
from oslens.report import plots
from oslens.report import model
from oslens.report.model import Report, view_rows

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #23395d; color: #fff; padding: 16px 28px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header .sub { opacity: 0.85; font-size: 13px; }
nav { background: #fff; border-bottom: 1px solid #ddd; padding: 8px 28px; font-size: 13px; }
nav a { margin-right: 14px; color: #23395d; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1200px; }
section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; margin: 18px 0; padding: 12px 20px; }
section h2 { margin: 4px 0; font-size: 18px; }
.ref { color: #777; font-size: 12px; margin: 0 0 8px 0; }
.missing { background: #fff6e5; border-left: 4px solid #e0a000; padding: 8px 12px; }
.note { color: #555; font-size: 12.5px; margin: 4px 0; }
.plot svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 12.5px; }
th, td { border-bottom: 1px solid #eee; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f3f5f9; }
td.t, th.t { text-align: left; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
.finding { border-left: 4px solid #4c72b0; padding: 6px 12px; margin: 8px 0; background: #f7f9fc; }
.finding.warning { border-color: #c44e52; background: #fdf5f5; }
.finding .sev { font-size: 11px; text-transform: uppercase; color: #c44e52; font-weight: 700; margin-right: 6px; }
.finding.info .sev { color: #4c72b0; }
dl.hdr { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 8px 0; font-size: 13px; }
dl.hdr dt { color: #666; } dl.hdr dd { margin: 0; }
.more { color: #777; font-size: 12px; }
"""

SCRIPT = """
(function () {
  function mark() {
    document.querySelectorAll('section.report-section').forEach(function (s) {
      var svg = s.querySelector('.plot svg');
      if (!svg) { s.setAttribute('data-rendered', 'none'); return; }
      var r = svg.getBoundingClientRect();
      var n = svg.querySelectorAll('path, rect, text, image, use, line, polyline').length;
      s.setAttribute('data-rendered', Math.round(r.width) + 'x' + Math.round(r.height) + ':' + n);
    });
    document.body.setAttribute('data-report-ready', '1');
  }
  if (document.readyState === 'complete') mark(); else window.addEventListener('load', mark);
})();
"""

TEXT_FMTS = {"str"}


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _table(report: Report, view) -> str:
    cols, rows, more = view_rows(report, view)
    if not rows:
        return ""
    out = [f"<table data-table='{_e(view.name)}'><caption>{_e(view.title)}</caption><thead><tr>"]
    for c in cols:
        cls = "t" if c.fmt in TEXT_FMTS else ""
        out.append(f"<th class='{cls}'>{_e(c.label)}</th>")
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>")
        for c, v in zip(cols, r):
            cls = "t" if c.fmt in TEXT_FMTS else ""
            out.append(f"<td class='{cls}'>{_e(v)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if more:
        out.append(f"<p class='more'>{more} more rows: <code>oslens sql TRACE \"SELECT * FROM report_{_e(view.name)}\"</code>"
                   " or the JSON output.</p>")
    return "".join(out)


def _findings(report: Report) -> str:
    rows = report.tables["findings"].to_pylist()
    if not rows:
        return ""
    out = []
    for f in rows:
        out.append(
            f"<div class='finding {_e(f['severity'])}' data-code='{_e(f['code'])}'>"
            f"<span class='sev'>{_e(f['severity'])}</span><b>{_e(f['title'])}</b><br>{_e(f['text'])}</div>"
        )
    return "".join(out)


def _header(report: Report) -> str:
    h = report.header
    ks = report.kernel
    items = [
        ("trace", h["trace"]),
        # a flight snapshot opens with its trigger (report/flight.py)
        *((("flight recorder", line) for line in h.get("flight") or [])),
        ("command", h["command"] or "-"),
        ("program", f"{model.pids_text(h['program_pids'])}, {h['threads']} thread(s)"),
        ("wall time", units.fmt_ns(h["wall_ns"]) + (f" (incomplete trace: {h['incomplete']})" if h.get("incomplete") else "")),
        ("program ended", h.get("exit") or "n/a (not recorded)"),
        ("locks", h.get("sync_mode") or "-"),
        ("cross-check with the kernel", h.get("crosscheck") or "n/a (no rusage kept, or no kernel events)"),
        ("program CPUs", ", ".join(map(str, h["cpus"])) or "-"),
        ("kernel events", "yes" + (f" ({ks['collector']})" if ks.get("collector") else "") if ks["scheduling"]
         else f"no: {ks['reason']}"),
        ("records", ", ".join(f"{k} {v:,}" for k, v in h["events"].items() if v)),
        ("lost records", f"{h['lost_records']:,}"),
        ("recording cost outside the program", model.recorder_cost_line(h) or "-"),
    ]
    return "<dl class='hdr'>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def findings_first(report: Report) -> list:
    """The sections with the findings first, as the terminal shows them: they are what a reader wants."""
    return sorted(report.sections, key=lambda s: s.id != "findings")


def render(report: Report) -> str:
    ordered = findings_first(report)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>oslens report: {_e(report.trace)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>oslens report</h1><div class='sub'>{_e(report.trace)} · generated "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}</div></header>",
        "<nav>" + "".join(f"<a href='#{s.id}'>{_e(s.title)}</a>" for s in ordered) + "</nav><main>",
        f"<section id='overview'><h2>Trace</h2>{_header(report)}</section>",
    ]
    for s in ordered:
        parts.append(
            f"<section id='{_e(s.id)}' class='report-section' data-available='{1 if s.available else 0}'>"
            f"<h2>{_e(s.title)}</h2><p class='ref'>{_e(s.reference)} · {_e(s.description)}</p>"
        )
        if not s.available:
            parts.append(f"<p class='missing'>{_e(s.reason)}</p>")
        svg = s.svg or (plots.render(report, s.plot) if s.plot and s.available else None)
        if s.id == "findings":
            parts.append(_findings(report))
        if svg:
            parts.append(f"<figure class='plot'>{svg}</figure>")
        for n in s.notes:
            parts.append(f"<p class='note'>{_e(n)}</p>")
        if s.available:
            for v in s.views:
                if s.id == "findings":
                    continue
                parts.append(_table(report, v))
        parts.append("</section>")
    parts.append(f"</main><script>{SCRIPT}</script></body></html>")
    return "".join(parts)
