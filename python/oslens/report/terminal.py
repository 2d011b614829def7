"""The report in the terminal: rich tables for each section, the findings first-class, and one
line saying why a section is empty when the trace cannot support it."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from oslens.analysis import units
from oslens.report import fit, model
from oslens.report.model import Report, view_rows

TEXT_FMTS = {"str"}


def _rich_table(report: Report, view, width: int) -> Table | None:
    cols, rows, more = view_rows(report, view, terminal=True)
    if not rows:
        return None
    lay = fit.fit([c.label for c in cols], rows, [c.fmt in TEXT_FMTS for c in cols], width)
    notes = []
    if more:
        notes.append(f"{more} more rows in the JSON output / oslens sql (report_{view.name})")
    if lay.left_out:
        notes.append(f"left out at this width: {', '.join(lay.left_out)} (in a wider terminal, the HTML or --json)")
    t = Table(title=view.title, title_justify="left", caption="; ".join(notes) or None, caption_justify="left",
              show_edge=False, header_style="bold", pad_edge=False, )
    for label, text, w in zip(lay.labels, lay.text, lay.widths):
        # a column is never narrower than its longest word or number (fit.py): it wraps at spaces only
        t.add_column(label, justify="left" if text else "right", overflow="fold", width=w)
    for r in lay.rows:
        t.add_row(*(Text(c) if isinstance(c, str) else c for c in r))  # '[libm.so.6]' is text, not markup
    return t


def render(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    h = report.header
    ks = report.kernel
    head = Text()
    head.append("oslens report  ", style="bold")
    head.append(str(report.trace))
    head.append(f"\n{h['command'] or ''}\n" if h["command"] else "\n")
    for line in h.get("flight") or []:
        head.append(line + "\n", style="bold")
    head.append(f"program {model.pids_text(h['program_pids'])}, {h['threads']} thread(s), wall "
                f"{units.fmt_ns(h['wall_ns'])}, CPUs {', '.join(map(str, h['cpus'])) or '-'}\n")
    for line in h.get("attach") or []:
        head.append(line + "\n")
    if h.get("incomplete"):
        head.append(f"incomplete trace: {h['incomplete']}\n", style="bold red")
    if ks["scheduling"]:
        head.append("kernel events: yes" + (f" ({ks['collector']})" if ks.get("collector") else ""))
    else:
        head.append(f"kernel events: no — {ks['reason']}", style="yellow")
    if h.get("exit"):
        head.append(f"\nprogram ended: {h['exit']}")
    if h.get("sync_mode"):
        head.append(f"\nlocks: {h['sync_mode']}")
    if h.get("crosscheck"):
        head.append(f"\ncross-check: {h['crosscheck']}", style="red" if h["crosscheck"].startswith("DISAGREES") else None)
    cost = model.recorder_cost_line(h)
    if cost:
        head.append(f"\nrecording cost outside the program: {cost}")
    if h["lost_records"]:
        head.append(f"\nlost records: {h['lost_records']:,}", style="red")
    if h.get("skipped_by_kernel"):
        runs = ", ".join(f"{name} {n:,}" for name, n in sorted(h["skipped_by_kernel"].items()))
        head.append(f"\nthe kernel skipped tracepoint runs (its eBPF recursion guard, counted for every task): {runs}")
    console.print(Panel(head, expand=False))

    # a snapshot's trigger, then the findings: they are what a reader wants
    first = [sid for sid in ("trigger", "findings") if any(s.id == sid for s in report.sections)]
    order = first + [s.id for s in report.sections if s.id not in first]
    for sid in order:
        s = report.section(sid)
        console.rule(f"[bold]{s.title}[/]  [dim]{s.reference}[/]", align="left")
        if not s.available:
            console.print(f"[yellow]{s.reason}[/]")
            continue
        if s.id == "findings":
            for f in report.tables["findings"].to_pylist():
                style = "bold red" if f["severity"] == "warning" else "bold blue"
                head = Table.grid()  # the title wraps under itself, not under the severity
                head.add_column(width=8, no_wrap=True)
                head.add_column()
                head.add_row(Text(f["severity"].upper(), style), Text(f["title"], "bold"))
                console.print(head)
                console.print(Padding(Text(f["text"]), (0, 0, 0, 8)))
            for n in s.notes:
                console.print(f"[dim]{n}[/]")
            continue
        for v in s.views:
            t = _rich_table(report, v, console.width)
            if t is not None:
                console.print(t)
        for n in s.notes:
            console.print(f"[dim]{n}[/]")
