"""The trace store: raw chunks imported once into Parquet tables (TRACE/tables/*.parquet), opened
through DuckDB with every table as a view. docs/trace-schema.md documents the tables.

    import oslens
    con = oslens.open("traces/app-...")          # == oslens.store.open_trace
    con.sql("SELECT name, sum(duration_ns) FROM regions GROUP BY 1").df()   # pandas
    con.sql("SELECT * FROM switches").pl()                                   # polars
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["import_trace", "open_trace", "table_paths", "SCHEMA_VERSION", "SCHEMAS", "TABLES"]

# Loaded on first use: every command imports a module of the store (the calibration's model), and
# the importer brings pyarrow and DuckDB, half a second a process that a command like `flags` never needs.
_LAZY = {"import_trace": "importer", "is_current": "importer", "tables_dir": "importer",
         "SCHEMA_VERSION": "schema", "SCHEMAS": "schema", "TABLES": "schema"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'oslens.store' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"oslens.store.{_LAZY[name]}"), name)


def table_paths(trace) -> dict[str, Path]:
    """{table name: Parquet file} of an imported trace (for pandas, polars, Spark, Dask...)."""
    from oslens.store.importer import tables_dir

    d = tables_dir(Path(trace))
    return {p.stem: p for p in sorted(d.glob("*.parquet"))}


def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def open_trace(trace, quiet: bool = False):
    """A DuckDB connection whose views are the trace's tables, importing the trace first when it
    has not been imported (or was imported by another schema version). A trace in a folder that
    cannot be written is imported into memory instead."""
    import duckdb

    from oslens.capture import raw
    from oslens.errors import OslensError
    from oslens.store import app_tables, importer, salvage
    from oslens.store.importer import import_trace, is_current, tables_dir

    trace = raw.require_trace_dir(trace)
    con = duckdb.connect(":memory:")
    if not is_current(trace):
        try:
            import_trace(trace, quiet=quiet)
        except OslensError:
            if importer.damaged_tables(trace):
                raise  # the damaged tables cannot be rebuilt here: the error says how
            if tables_dir(trace).is_dir() and importer.read_manifest(trace):
                pass  # fall through to the (older) tables on disk
            else:
                losses = salvage.Losses()
                tables = importer.build_tables(trace, losses)
                salvage.warn(trace, losses)
                for name, table in tables.items():
                    if not name.startswith("_"):
                        # a table the import's pass wrote (in $TMPDIR here) is read and its file removed
                        if isinstance(table, app_tables.WrittenTable):
                            table = table.read()
                        con.register(f"_arrow_{name}", table)
                        con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "_arrow_{name}"')
                _derived_views(con)
                return con
    for name, path in table_paths(trace).items():
        con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({_sql_string(str(path.resolve()))})')
    _derived_views(con)
    return con


def _derived_views(con) -> None:
    """Tables that are a query over others: lock_counts sums the preload's per-thread counts of
    uncontended lock acquisitions (counters rows of reason 'lock'; docs/trace-schema.md)."""
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    if "counters" in names and "lock_counts" not in names:
        con.execute("""CREATE VIEW lock_counts AS
            SELECT pid, tid, 'mutex' AS kind, name AS object, sum(value)::BIGINT AS count, count(*)::BIGINT AS records,
                   TRY_CAST(name AS UBIGINT) AS address
            FROM counters WHERE reason = 'lock' GROUP BY pid, tid, name""")
