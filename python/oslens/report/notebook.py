"""oslens in Jupyter (issue 33): a trace's tables as DuckDB relations, pandas or polars frames,
the report rendered in the notebook, and the `%%oslens` cell magic, which records the cell's code.

    t = oslens.trace("traces/run")       # imports the trace on first use
    t.tables                             # table names
    t.df("regions"); t.pl("syscalls")    # pandas / polars (a table name or a SELECT)
    t.report()                           # the HTML report, inline
    %load_ext oslens
    %%oslens -o traces/cell --events sched,syscalls
    ...code...                           # run in a fresh Python under `oslens record`, as
                                         # %%memray_flamegraph does: the notebook's variables are not there
"""

from __future__ import annotations

import html
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


class Trace:
    """One trace's tables, through one DuckDB connection."""

    def __init__(self, path):
        from oslens import store

        self.path = Path(path)
        self.con = store.open_trace(self.path, quiet=True)

    @property
    def tables(self) -> list[str]:
        rows = self.con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()
        return [name for (name,) in rows]

    def sql(self, query: str):
        """A DuckDB relation: .df(), .pl(), .arrow(), or shown as it is."""
        return self.con.sql(query)

    def _relation(self, table_or_query: str):
        text = table_or_query.strip()
        return self.con.sql(text if " " in text else f'SELECT * FROM "{text}"')

    def df(self, table_or_query: str):
        """A pandas DataFrame of a table (by name) or of a query."""
        return self._relation(table_or_query).df()

    def pl(self, table_or_query: str):
        """A polars DataFrame of a table (by name) or of a query."""
        return self._relation(table_or_query).pl()

    def arrow(self, table_or_query: str):
        return self._relation(table_or_query).arrow()

    def report(self) -> "Report":
        return Report(self)

    def _repr_html_(self) -> str:
        rows = []
        for name in self.tables:
            n = self.con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
            rows.append(f"<tr><td>{html.escape(name)}</td><td style='text-align:right'>{n:,}</td></tr>")
        counts = "".join(rows)
        return (f"<b>oslens trace</b> {html.escape(str(self.path))}<table><tr><th>table</th><th>rows</th></tr>"
                f"{counts}</table>")


class Report:
    """The trace's report: `.html` is the self-contained page `oslens report` writes; in Jupyter it
    shows itself in a frame (its styles then stay its own)."""

    def __init__(self, trace: Trace):
        from oslens.analysis import suite
        from oslens.report import html as html_report
        from oslens.report import model, program_phases

        tables = suite.run_all(trace.con)
        self.model = model.build(trace.con, str(trace.path), tables)
        program_phases.add(self.model, trace.con)
        self.html = html_report.render(self.model)

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:720px;border:0">'
                "</iframe>")


def record_cell(line: str, cell: str) -> Report:
    """`%%oslens [-o DIR] [oslens record options]`: the cell's code run as a script under
    `oslens record`; its output is printed and its report returned (shown as the cell's result)."""
    args = shlex.split(line)
    if "-o" not in args and "--output" not in args:
        args = ["-o", tempfile.mkdtemp(prefix="oslens-cell-"), *args]
    trace = Path(args[args.index("-o" if "-o" in args else "--output") + 1])
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="oslens-cell-", delete=False) as f:
        f.write(cell)
    proc = subprocess.run([sys.executable, "-m", "oslens.cli", "record", *args, "--", sys.executable, f.name],
                          capture_output=True, text=True)
    Path(f.name).unlink(missing_ok=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if not (trace / "meta.json").exists():
        raise RuntimeError(f"oslens record did not record the cell (exit {proc.returncode})")
    return Trace(trace).report()


def load_ipython_extension(ipython) -> None:
    """`%load_ext oslens`: registers the %%oslens cell magic."""
    ipython.register_magic_function(record_cell, magic_kind="cell", magic_name="oslens")
