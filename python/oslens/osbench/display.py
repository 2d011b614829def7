"""Terminal tables (rich) for results and comparisons, grouped like the paper's tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def fmt_ns(ns: float) -> str:
    if ns != ns:  # nan
        return "-"
    if ns < 0:
        return "-" + fmt_ns(-ns)
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms" if ns < 1e8 else f"{ns / 1e9:.3g} s"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.3g} ns"


def _ci(r: dict) -> str:
    return f"{fmt_ns(r['ci_low_ns'])} – {fmt_ns(r['ci_high_ns'])}"


def results_table(doc: dict) -> Table:
    m = doc["machine"]
    t = Table(title=f"oslens bench — {m['kernel']} on {m['cpu_model']} ({m['cpus_allowed']} CPUs"
                    f"{', virtual machine' if m.get('virtualized') else ''})"
                    f"{' — quick' if doc['run']['quick'] else ''}",
              show_lines=False, header_style="bold")
    t.add_column("table", style="dim")
    t.add_column("benchmark", no_wrap=True)
    t.add_column("per", style="dim", no_wrap=True)
    t.add_column("median", justify="right", style="bold")
    t.add_column("min", justify="right")
    t.add_column("95% CI of median", justify="right", no_wrap=True)
    t.add_column("n", justify="right", style="dim")
    t.add_column("note")
    last = None
    for r in doc["results"]:
        table = r["table"] if r["table"] != last else ""
        last = r["table"]
        if r["status"] != "ok":
            t.add_row(table, r["name"], "", "", "", "", "", f"[yellow]{r['status']}: {r['reason']}[/]")
            continue
        note = "; ".join(r["notes"])
        if r["group"] == "timeslice" and r.get("extra"):
            e = r["extra"]
            note = (f"{e.get('switches', 0):.0f} slices of {e.get('slice_median_us', 0) / 1e3:.3g} ms, "
                    f"tick/irq {fmt_ns(e.get('interrupt_median_ns', 0))}" + (f"; {note}" if note else ""))
        t.add_row(table, r["name"], r["unit"], fmt_ns(r["median_ns"]), fmt_ns(r["min_ns"]), _ci(r), str(r["n"]),
                  f"[red]{note}[/]" if r["noisy"] else note)
    return t


def compare_table(cmp: dict, name_a: str, name_b: str) -> Table:
    t = Table(title=f"A = {name_a} ({cmp['a']['kernel']})   B = {name_b} ({cmp['b']['kernel']})",
              header_style="bold")
    t.add_column("benchmark", no_wrap=True)
    t.add_column("A median [95% CI]", justify="right")
    t.add_column("B median [95% CI]", justify="right")
    t.add_column("B/A", justify="right", style="bold")
    t.add_column("95% CI of B/A", justify="right")
    t.add_column("verdict")
    for row in cmp["rows"]:
        a, b = row["a"], row["b"]
        verdict = row["verdict"] + (" (noisy run)" if row["noisy"] else "")
        style = "" if not row["verdict"].startswith("B ") else ("red" if row["ratio"] > 1 else "green")
        t.add_row(row["name"],
                  f"{fmt_ns(a['median_ns'])} [{fmt_ns(a['ci_low_ns'])}, {fmt_ns(a['ci_high_ns'])}]",
                  f"{fmt_ns(b['median_ns'])} [{fmt_ns(b['ci_low_ns'])}, {fmt_ns(b['ci_high_ns'])}]",
                  f"{row['ratio']:.3f}", f"{row['ratio_low']:.3f} – {row['ratio_high']:.3f}",
                  f"[{style}]{verdict}[/]" if style else verdict)
    return t


def console(stderr: bool = False) -> Console:
    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal:
        con = Console(stderr=stderr, highlight=False, width=170)
    return con
