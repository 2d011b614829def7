"""The phases section of `oslens report`'s HTML: the similarity matrix `oslens phases` drew for
this trace (TRACE/phases.svg) and its phase table (TRACE/tables/phases.parquet), inline; nothing
when `oslens phases` has not drawn them. Reads only files `oslens phases` wrote, so the report pays nothing."""

from __future__ import annotations

import html
from pathlib import Path


def html_section(trace: str) -> str:
    base = Path(trace)
    svg_path = base / "phases.svg"
    head = ("<section id='phase-matrix' class='phase-matrix'><h2>Phase similarity</h2><p class='ref'>Krintz &amp; Wolski, "
            "Figure 1 · similarity of every pair of intervals (black = similar), phases found in them</p>")
    try:
        svg = svg_path.read_text(encoding="utf-8")
    except OSError:
        return ""  # not drawn: the report's own sections say what the trace holds
    svg = svg[svg.find("<svg"):]
    return head + f"<figure class='plot'>{svg}</figure>" + _table(base / "tables" / "phases.parquet") + "</section>"


def _table(path: Path) -> str:
    try:
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    except Exception:  # the table is optional: no table, no rows
        return ""
    cols = ["phase", "kind", "share", "recurrences", "functions"]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return ("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in cols) + f"</tr></thead><tbody>{body}</tbody></table>")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{100 * v:.1f}%"
    return "" if v is None else str(v)
