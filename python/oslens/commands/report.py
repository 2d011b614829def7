"""`oslens report [TRACE] [--html FILE] [--json]`: where the time went and what the OS did to the
program - Kohr et al.'s tables and figures, and findings in plain words - in the terminal, as a
self-contained HTML file (TRACE/report.html unless --html says otherwise), or as JSON."""

from __future__ import annotations

import sys
from pathlib import Path

from oslens.commands import _calibration
from oslens.errors import OslensError

NAME = "report"
HELP = "summarise a trace: time per thread, per-task CPU, phases, locks, switches, I/O and findings"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("trace", nargs="?", help="trace directory (default: the newest under ./traces or ./oslens-trace*)")
    parser.add_argument("--html", metavar="FILE", help="write the HTML report here (default: TRACE/report.html)")
    parser.add_argument("--no-html", action="store_true", help="do not write the HTML report")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")


def open_trace(path: Path):
    from oslens import store

    return store.open_trace(path)


def run(args) -> int:
    from oslens.analysis import suite
    from oslens.report import html as html_mod
    from oslens.report import jsonout, model, program_phases, terminal

    trace = model.find_trace(args.trace)
    con = open_trace(trace)
    tables = suite.run_all(con)
    rep = model.build(con, str(trace), tables)
    program_phases.add(rep, con)  # Krintz & Wolski's phases when the trace has IP samples
    # every figure as a table: TRACE/analysis/report_<name>.parquet
    try:
        suite.write_parquet(tables, Path(trace) / "analysis")
    except OSError:
        pass
    html_path = None
    if not args.no_html:
        html_path = Path(args.html) if args.html else Path(trace) / "report.html"
        try:
            html_path.parent.mkdir(parents=True, exist_ok=True)
            html_path.write_text(html_mod.render(rep), encoding="utf-8")
        except OSError as err:
            raise OslensError(f"cannot write the HTML report to {html_path}: {err.strerror}.", 1)
    if args.json:
        sys.stdout.write(jsonout.dumps(rep) + "\n")
    else:
        terminal.render(rep)
        if html_path:
            print(f"\nHTML report: {html_path}")
    return 0
