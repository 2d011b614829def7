"""The trace's tables as the analyses see them: which exist, their columns and sizes, meta, and
whether (and why not) the kernel collector recorded anything. A missing table reads as an empty
one: application-only traces have no kernel tables (docs/trace-schema.md)."""

from __future__ import annotations

import pyarrow as pa


def table_exists(con, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def columns(con, name: str) -> list[str]:
    if not table_exists(con, name):
        return []
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [name],
    ).fetchall()
    return [r[0] for r in rows]


def row_count(con, name: str) -> int:
    if not table_exists(con, name):
        return 0
    return int(con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])


def fetch(con, sql: str, params=None) -> pa.Table:
    """Runs a query and returns a pyarrow table."""
    return con.execute(sql, params or []).fetch_arrow_table()


def meta(con) -> dict[str, str]:
    if not table_exists(con, "meta"):
        return {}
    return {str(k): ("" if v is None else str(v)) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}


def empty_table(schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([], type=t) for k, t in schema.items()})


def from_rows(rows: list[dict], schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([r.get(k) for r in rows], type=t) for k, t in schema.items()})


def rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def has_column(con, table: str, column: str) -> bool:
    return column in columns(con, table)


def first_meta_value(m: dict[str, str], keys) -> str | None:
    for k in keys:
        if m.get(k):
            return m[k]
    return None


def kernel_status(con) -> dict:
    """Whether the trace has kernel events and, when it has none, why (from meta when the
    recorder said so). Returns {"scheduling": bool, "syscalls": bool, "faults": bool,
    "block_io": bool, "reason": str | None, "collector": str | None}."""
    m = meta(con)
    collector = first_meta_value(m, ["kernel.tier", "kernel.collector", "collector", "collector.mode", "kernel.mode", "kernel_collector"])
    reason = first_meta_value(
        m,
        ["kernel.reason", "kernel.error", "collector.reason", "collector.error", "kernel.status", "collector.status"],
    )
    sched = row_count(con, "switches") > 0 or row_count(con, "cpu_slices") > 0
    st = {
        "scheduling": sched,
        "syscalls": row_count(con, "syscalls") > 0,
        "faults": row_count(con, "faults") > 0,
        "block_io": row_count(con, "block_io") > 0,
        "collector": collector,
        "reason": None,
    }
    if not sched:
        if reason:
            st["reason"] = f"the kernel collector recorded no scheduling events ({reason})"
        elif collector and (collector.lower() in ("none", "off", "disabled", "app", "app-only")
                            or "only" in collector.lower()):
            st["reason"] = f"the kernel collector did not run (collector: {collector})"
        elif collector:
            st["reason"] = f"the kernel collector ({collector}) recorded no scheduling events"
        else:
            st["reason"] = (
                "the trace has no kernel events: the kernel collector did not run or lacked privilege "
                "(record as root, or with CAP_PERFMON/CAP_BPF, to get them)"
            )
    return st


def missing_reason(con, table: str, what: str) -> str:
    """One sentence saying why `table` is empty."""
    st = kernel_status(con)
    if not st["scheduling"]:
        return f"No {what}: {st['reason']}."
    return f"No {what}: the trace's `{table}` table is empty (the collector recorded none)."
