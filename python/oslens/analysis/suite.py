"""Runs every report analysis once on a trace connection and returns the tables by name; writes
them as Parquet so that `oslens sql` can query every figure of the report."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from oslens.analysis import (
    breakdown,
    crosscheck,
    findings,
    io_timeline,
    phases_table,
    region_durations,
    switch_pattern,
    sync_summary,
    tasks,
    transitions,
    trigger_window,
)


def run_all(con) -> dict[str, pa.Table]:
    t: dict[str, pa.Table] = {}
    t["breakdown"] = breakdown.time_breakdown(con)
    t["tasks"] = tasks.task_cpu(con)
    t["phases"] = phases_table.phase_durations(con)
    t["phase_summary"] = phases_table.phase_summary(con)
    t["sync"] = sync_summary.sync_summary(con)
    t["region_stats"] = region_durations.region_stats(con)
    t["region_histograms"] = region_durations.region_histograms(con)
    t["switch_timeline"] = switch_pattern.switch_timeline(con)
    t["switch_summary"] = switch_pattern.switch_summary(con)
    t["cpu_occupancy"] = switch_pattern.cpu_occupancy(con)
    t["io_requests"] = io_timeline.io_requests(con)
    t["io_summary"] = io_timeline.io_summary(con, t["io_requests"])
    t["transitions"] = transitions.transition_matrix(con)
    t["crosscheck"] = crosscheck.crosscheck(con)
    t["trigger_window"] = trigger_window.trigger_window(con)
    t["findings"] = findings.findings(con, {k: t[k] for k in ("breakdown", "tasks", "sync", "crosscheck")})
    return t


def write_parquet(tables: dict[str, pa.Table], directory: Path) -> list[Path]:
    """Writes each table as DIRECTORY/report_<name>.parquet; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, table in tables.items():
        p = directory / f"report_{name}.parquet"
        pq.write_table(table, p)
        out.append(p)
    return out


def register_views(con, trace_dir: Path) -> list[str]:
    """Makes the report tables written by `oslens report` (TRACE/analysis/report_*.parquet)
    queryable on `con` as views named report_<name>; returns the view names."""
    names = []
    for p in sorted((Path(trace_dir) / "analysis").glob("report_*.parquet")):
        name = p.stem
        path = str(p).replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW \"{name}\" AS SELECT * FROM read_parquet('{path}')")
        names.append(name)
    return names
