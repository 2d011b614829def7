"""`oslens sql [TRACE] "SELECT ..." [--format table|csv|json]`: query a trace's tables with DuckDB.
Every table of docs/trace-schema.md is a view; `oslens sql TRACE --tables` lists them."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

from oslens.commands import _calibration
from oslens.errors import OslensError

NAME = "sql"
HELP = "query a trace's tables with SQL (DuckDB); --format table|csv|json"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("args", nargs="*", metavar="[TRACE] QUERY",
                        help="trace directory (default: the newest under ./traces) and the SQL query")
    parser.add_argument("--format", "-f", choices=["table", "csv", "json"], default="table",
                        help="output format (json: one array of objects)")
    parser.add_argument("--tables", action="store_true", help="list the tables and their row counts")
    parser.add_argument("--max-rows", type=int, default=200, help="rows shown in table format (default 200)")


def _split(args) -> tuple[str | None, str | None]:
    pos = list(args.args)
    if len(pos) >= 2:
        return pos[0], " ".join(pos[1:])
    if len(pos) == 1:
        if Path(pos[0]).is_dir() or args.tables:
            return pos[0], None
        return None, pos[0]
    return None, None


def _jsonable(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def run(args):
    import duckdb

    from oslens import store
    from oslens.report.model import find_trace

    trace_arg, query = _split(args)
    trace = find_trace(trace_arg)
    con = store.open_trace(trace)
    # the tables `oslens report` wrote (report_*), queryable beside the trace's own
    from oslens.analysis.suite import register_views

    register_views(con, trace)
    if args.tables:
        rows = [(name, con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])
                for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]
        _print(["table", "rows"], rows, args.format, args.max_rows)
        return 0
    if not query:
        raise OslensError('no query given: oslens sql TRACE "SELECT * FROM regions LIMIT 10" (tables: --tables)', 2)
    try:
        cur = con.execute(query)
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0]
        raise OslensError(f"the query failed: {first}", 1) from err
    if cur.description is None:
        return 0
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    _print(cols, rows, args.format, args.max_rows)
    return 0


def _print(cols, rows, fmt, max_rows):
    out = sys.stdout
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if v is None else (_jsonable(v)) for v in r])
    elif fmt == "json":
        json.dump([{c: _jsonable(v) for c, v in zip(cols, r)} for r in rows], out, indent=None)
        out.write("\n")
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        from oslens.report import fit

        cells = [["NULL" if v is None else str(_jsonable(v)) for v in r] for r in rows[:max_rows]]
        # a pipe gets every column as it is; a terminal the layout of the report's tables (report/fit.py)
        width = Console().width if out.isatty() or os.environ.get("COLUMNS") else None
        text = [not any(isinstance(r[i], (int, float)) for r in rows[:max_rows]) for i in range(len(cols))]
        # fit.py's widths leave out the table's two outer edges, which this table draws
        lay = fit.fit(cols, cells, text, width - 2 if width else 10**9)
        t = Table(show_lines=False)
        for label, is_text, w in zip(lay.labels, lay.text, lay.widths):
            t.add_column(label, justify="left" if is_text else "right", overflow="fold", width=w)
        for r in lay.rows:
            t.add_row(*(Text(c) for c in r))
        console = Console(file=out, width=width or fit.table_width(lay.widths) + 2)
        console.print(t)
        if len(rows) > max_rows:
            console.print(f"({len(rows)} rows, {max_rows} shown; --max-rows N or --format csv for all)")
        else:
            console.print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
        if lay.left_out:
            console.print(f"({len(lay.left_out)} of {len(cols)} columns not shown, for the terminal's width: "
                          f"{', '.join(lay.left_out)}; select fewer columns, or --format csv for all)")
