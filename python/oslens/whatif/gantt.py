"""A self-contained HTML page with one Gantt-style SVG per policy: a row per CPU, a bar per
stretch a task held it, program threads in colour, background load in grey."""

from __future__ import annotations

import html

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bcb6"]
MAX_BARS = 20_000  # per chart; longer runs are drawn from their first bars only (said in the caption)


def svg(segments, tasks, ncpus: int, width: int = 1000, row: int = 26) -> str:
    end = max((s.end for s in segments), default=1) or 1
    colours = {}
    for i, t in enumerate(tasks):
        if not t.background:
            colours[i] = PALETTE[len(colours) % len(PALETTE)]
    left = 60
    scale = (width - left - 10) / end
    h = ncpus * row + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" font-family="sans-serif" '
             f'font-size="11">']
    for c in range(ncpus):
        y = c * row + 4
        parts.append(f'<text x="4" y="{y + row * 0.6:.0f}">CPU {c}</text>')
    for s in segments[:MAX_BARS]:
        t = tasks[s.task]
        x = left + s.start * scale
        w = max(0.5, (s.end - s.start) * scale)
        y = s.cpu * row + 4
        fill = colours.get(s.task, "#bbbbbb")
        title = html.escape(f"{t.name} {t.tid}: {s.start / 1e6:.3f}-{s.end / 1e6:.3f} ms")
        parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row - 6}" fill="{fill}">'
                     f'<title>{title}</title></rect>')
    for k in range(11):
        x = left + (width - left - 10) * k / 10
        parts.append(f'<text x="{x:.0f}" y="{h - 6}" text-anchor="middle">{end * k / 10 / 1e6:.0f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend(tasks) -> str:
    items, n = [], 0
    for t in tasks:
        if t.background:
            continue
        items.append(f'<span style="color:{PALETTE[n % len(PALETTE)]}">&#9632;</span> {html.escape(t.name)} {t.tid}')
        n += 1
    items.append('<span style="color:#bbbbbb">&#9632;</span> other tasks (background)')
    return " &nbsp; ".join(items)


def page(doc: dict, charts: list[tuple[str, str]], tasks) -> str:
    body = [f"<h1>oslens whatif</h1><p>{html.escape(doc['trace'])}: {doc['cpus']} CPUs. Time axis in ms from the "
            f"program's start. Recorded makespan {doc['recorded']['makespan_ns'] / 1e6:.1f} ms, "
            f"{doc['recorded']['switches']} switches.</p><p>{legend(tasks)}</p>"]
    preds = {p["policy"]: p for p in doc["predictions"]}
    for label, chart in charts:
        p = preds.get(label, {})
        body.append(f"<h2>{html.escape(label)}</h2><p>predicted makespan {p.get('makespan_ns', 0) / 1e6:.1f} ms, "
                    f"{p.get('switches', 0)} switches</p>{chart}")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>oslens whatif</title>"
            "<style>body{font-family:sans-serif;margin:2em}</style></head><body>" + "".join(body) + "</body></html>")
