"""Tables for the report: what instrumentation took, and raw beside compensated times.

    instrumentation(con) -> pa.Table   per thread: records, instrumentation and pause time, the
                                       thread's span raw and compensated, the share it took
    regions(con) -> pa.Table           per region name: count, total and mean duration raw and
                                       compensated, and the difference

Both read the tables oslens.store.compensation adds at import (`compensation`, `*_comp_ns`);
on a trace imported without them they return empty tables.
"""

from __future__ import annotations

import pyarrow as pa


def _has(con, table: str, column: str | None = None) -> bool:
    try:
        cols = [r[0] for r in con.execute(f'DESCRIBE "{table}"').fetchall()]
    except Exception:
        return False
    return column is None or column in cols


def instrumentation(con) -> pa.Table:
    if not _has(con, "compensation") or not _has(con, "app_events", "ts_comp_ns"):
        return pa.table({"pid": pa.array([], pa.int64()), "tid": pa.array([], pa.int64())})
    return con.execute("""
        WITH c AS (
            SELECT pid, tid,
                   CAST(sum(records) FILTER (WHERE kind <> 'pause' AND cost_ns > 0) AS BIGINT) AS records,
                   sum(cost_ns) FILTER (WHERE kind <> 'pause') AS instrumentation_ns,
                   coalesce(sum(cost_ns) FILTER (WHERE kind = 'pause'), 0) AS pause_ns
            FROM compensation GROUP BY 1, 2),
        s AS (
            SELECT pid, tid, max(ts) - min(ts) AS span_ns, max(ts_comp_ns) - min(ts_comp_ns) AS span_comp_ns
            FROM app_events GROUP BY 1, 2)
        SELECT s.pid, s.tid, t.name, c.records, c.instrumentation_ns, c.pause_ns, s.span_ns, s.span_comp_ns,
               100.0 * (c.instrumentation_ns + c.pause_ns) / nullif(s.span_ns, 0) AS instrumentation_pct
        FROM s JOIN c USING (pid, tid) LEFT JOIN threads t USING (pid, tid)
        ORDER BY s.pid, s.tid""").fetch_arrow_table()


def regions(con) -> pa.Table:
    if not _has(con, "regions", "duration_comp_ns"):
        return pa.table({"name": pa.array([], pa.string())})
    return con.execute("""
        SELECT name, count(*) AS count,
               CAST(sum(duration_ns) AS BIGINT) AS total_ns, CAST(sum(duration_comp_ns) AS BIGINT) AS total_comp_ns,
               avg(duration_ns) AS mean_ns, avg(duration_comp_ns) AS mean_comp_ns,
               CAST(100.0 * (sum(duration_ns) - sum(duration_comp_ns)) / nullif(sum(duration_ns), 0) AS DOUBLE) AS instrumentation_pct
        FROM regions GROUP BY name ORDER BY total_ns DESC""").fetch_arrow_table()
